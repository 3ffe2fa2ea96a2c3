"""`gpuslo serve` as a real process on waitress (stops cleanly on SIGTERM/SIGINT) and `gpuslo db upgrade`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from cli_support import EXAMPLE_INCIDENT, RULES_DIR
from click.testing import CliRunner
from serve_process import serving_process
from sqlalchemy import create_engine, inspect

from gpuslo.cli.main import main

GPUSLO = Path(sys.executable).parent / "gpuslo"


@contextmanager
def _serving(tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """`gpuslo serve --port 0` in a child process; yields it, its URL and its log lines (still growing)."""
    with serving_process(tmp_path, RULES_DIR, *extra, timeout_s=30) as served:
        yield served


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_answers_and_stops_cleanly_on_a_signal(tmp_path: Path, signum: int):
    with _serving(tmp_path) as (process, url, lines):
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        replay = CliRunner().invoke(main, ["replay", str(EXAMPLE_INCIDENT), "--server", url])
        assert replay.exit_code == 0, replay.output
        rulebooks = httpx.get(f"{url}/api/v1/rulebooks", timeout=10).json()
        assert rulebooks["problems"] == [] and len(rulebooks["rulebooks"]) >= 1
        process.send_signal(signum)
        assert process.wait(timeout=20) == 0
    output = "".join(lines)
    assert f"received {signal.Signals(signum).name}, shutting down" in output
    assert "gpuslo stopped" in output
    assert "Traceback" not in output
    assert (tmp_path / "served.db").exists()


def test_serve_runs_local_probes_and_reloads_rulebooks_on_sighup(tmp_path: Path):
    log = tmp_path / "worker.log"
    log.write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
                   "total capacity of 79.11 GiB of which 1.02 GiB is free.\n")
    with _serving(tmp_path, "--probe", f"logs:{log}") as (process, url, lines):
        deadline = time.monotonic() + 30
        rules: set[str] = set()
        while time.monotonic() < deadline and "cuda-oom" not in rules:
            time.sleep(0.5)
            rules = {v["rule_id"] for v in httpx.get(f"{url}/api/v1/violations", timeout=10).json()["items"]}
        assert "cuda-oom" in rules, "".join(lines)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("reloading the rulebooks" in line for line in lines):
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    output = "".join(lines)
    assert "local probes started: logs:" in output and "received SIGHUP, reloading the rulebooks" in output
    assert "Traceback" not in output


def test_db_upgrade_creates_the_schema(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'var' / 'fresh.db'}"
    result = CliRunner().invoke(main, ["db", "upgrade"], env={"GPUSLO_DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: ") and "latest schema" in result.stdout
    engine = create_engine(url)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"alembic_version", "events", "violations"} <= tables


def test_a_bad_setting_is_one_error_line(tmp_path: Path):
    result = CliRunner().invoke(main, ["db", "upgrade"], env={"GPUSLO_PORT": "eighty"})
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: setting 'GPUSLO_PORT': cannot read 'eighty' as int: invalid literal for int() with base 10: 'eighty'"
    ]


def test_a_port_in_use_is_one_error_line(tmp_path: Path):
    env = {**os.environ, "GPUSLO_DATABASE_URL": f"sqlite:///{tmp_path / 'busy.db'}"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(GPUSLO), "serve", "--port", str(port), "--rules", str(RULES_DIR)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "Traceback" not in result.stderr
