"""A 28-day synthetic token stream replayed through `gpuslo replay --dry-run` in seconds: the budget it prints
equals a brute-force count, and the incident on day 20 pages (and only that)."""

from __future__ import annotations

import json
import random
import re
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner
from slo_support import T0

from gpuslo.cli.main import main
from gpuslo.engine.events import format_time

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "/v1/chat/completions"


def _stream(path: Path) -> tuple[int, int]:
    """One request every 2 minutes for 28 days; 0.2 % slow at random, and 40 minutes of day 20 at 50 %."""
    rng = random.Random(28)
    good = total = 0
    with path.open("w") as out:
        for i in range(28 * 720):
            at = T0 + timedelta(seconds=120 * i)
            incident = timedelta(days=20) <= at - T0 < timedelta(days=20, minutes=40)
            slow = rng.random() < (0.5 if incident else 0.002)
            total += 1
            good += not slow
            out.write(json.dumps({"id": f"r{i}", "kind": "token_latency", "time": format_time(at), "host": "gpu-node-7",
                                  "gpu": 3, "attrs": {"endpoint": ENDPOINT, "tokens": 64, "requests": 1,
                                                      "itl_max_ms": 420.0 if slow else 60.0,
                                                      "itl_p99_ms": 50.0, "ttft_ms": 300.0}}) + "\n")
    return good, total


def test_28_days_replay_shows_the_budget(tmp_path):
    stream = tmp_path / "28d.jsonl"
    good, total = _stream(stream)
    result = CliRunner().invoke(main, ["replay", "--dry-run", "--rules", str(ROOT / "rules"), str(stream)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    (budget,) = [line for line in lines if line.startswith("slo token-latency ")]
    bad = total - good
    assert f"{bad} bad of {total}" in budget
    assert f"budget left {100 * (1 - bad / (0.01 * total)):.1f} %" in budget
    pages = [line for line in lines if "token-latency-burn-page" in line]
    assert len(pages) == 1
    # It fired during the incident of day 20 (its first and last seen are shown as event times).
    assert re.search(r"2026-01-25T00:[0-3]\d", pages[0]), pages[0]
    first_token = [line for line in lines if line.startswith("slo first-token-latency ")]
    assert first_token and "0 bad of" in first_token[0]
