"""`gpuslo slo backfill` against a running service on the real PostgreSQL (and SQLite): the engine ingests and
counts requests in its own thread while backfills replace the SLI's buckets, again and again; afterwards every
request is counted exactly once (figures = brute force over the events sent), the roll-ups agree with a recount
from the minute buckets, and the core keeps counting after the backfills."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
from slo_support import RULEBOOK

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.events import format_time
from gpuslo.engine.slo import figures
from gpuslo.engine.slo.backfill import backfill
from gpuslo.engine.slo.model import LOOKBACKS


def _requests(count: int, start: datetime) -> list[dict]:
    rng = random.Random(11)
    items = []
    for i in range(count):
        at = start + timedelta(seconds=i * 1.7)
        items.append({"id": f"live-{i}", "kind": "token_latency", "time": format_time(at), "host": "node-1",
                      "gpu": i % 2, "attrs": {"endpoint": rng.choice(["/v1/chat", "/v1/embed"]), "tokens": 10,
                                              "itl_max_ms": 450.0 if rng.random() < 0.08 else 50.0}})
    return items


def _brute(items: list[dict], now_minute: int, width: int, endpoint: str) -> tuple[int, int]:
    chosen = [i for i in items if i["attrs"]["endpoint"] == endpoint and now_minute - width < int(
        datetime.fromisoformat(i["time"].replace("Z", "+00:00")).timestamp() // 60) <= now_minute]
    return sum(1 for i in chosen if i["attrs"]["itl_max_ms"] < 200), len(chosen)


@pytest.mark.parametrize("database", ["postgresql", "sqlite"], indirect=True)
def test_backfills_while_the_service_ingests_count_every_request_once(database, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "slo-test.yaml").write_text(RULEBOOK.format(window="28d", target=0.99, extra=""))
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, rules_poll_seconds=0))
    try:
        (sli,) = core.slos.slis()
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
        items = _requests(3000, start)
        sent, statuses = threading.Event(), []

        def ingest() -> None:
            try:
                for i in range(0, len(items), 60):
                    statuses.extend(r.status for r in core.ingest(items[i:i + 60]).results)
            finally:
                sent.set()

        sender = threading.Thread(target=ingest)
        sender.start()
        backfills = during = 0
        while (not sent.is_set() or backfills < 3) and backfills < 200:
            backfill(core.database, [sli], now=datetime.now(UTC))
            backfills += 1
            during += not sent.is_set()  # ended while requests were still being sent
        sender.join(60)
        assert statuses == ["accepted"] * len(items)
        assert core.wait_idle(60)
        with core.database.session(readonly=True) as session:
            fast = figures.figures(session, [sli])
            assert figures.as_mapping(fast) == figures.as_mapping(figures.recount(session, [sli]))
        groups = {g.group["endpoint"]: g for g in core.slos.groups()}
        now = fast["itl"][0]
        assert set(groups) == {"/v1/chat", "/v1/embed"}
        assert sum(g.total for g in groups.values()) == len(items)
        for endpoint, group in groups.items():
            assert (group.good, group.total) == _brute(items, now, 28 * 1440, endpoint)
            for name, seconds in LOOKBACKS:
                assert group.lookbacks[name] == _brute(items, now, seconds // 60, endpoint), name
        assert backfills >= 3 and during >= 1, (backfills, during)
    finally:
        core.close()
