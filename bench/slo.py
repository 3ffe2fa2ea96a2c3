"""SLO benchmark: (a) the cost per event of SLI counting, as a ratio to evaluation without it; (b) the latency
of GET /api/v1/slos over 28 days of one-minute buckets for 50 SLO groups.

Run: .venv/bin/python bench/slo.py [--quick]. Targets: (a) ≤ 1.2× on the fleet mix (the SLI-only stress
stream, where every event is a request of the ITL SLI, is measured beside it); (b) p99 ≤ 100 ms on SQLite.
(a) times RuleEvaluator.evaluate_batch over the shipped rulebooks, CPU time, best of N runs, SLI counting on
and off (RuleEvaluator(measure_slos=False)); the store's bucket upsert is part of the write path, measured in
(a') per batch. (b) fills slo_buckets/slo_hours/slo_days directly (2,016,000 + 33,600 + 1,450 rows), times the Flask
view, and recounts the same figures from the minute buckets alone in the same run (the baseline; they must be equal).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import engine_workload as workload
from sqlalchemy import insert

from gpuslo.engine.config import Settings
from gpuslo.engine.rulebook import load_directory, load_rulebook_text
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.slo import figures
from gpuslo.engine.slo.store import record_sli
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import SloBucketRow, SloDayRow, SloHourRow

ROOT = Path(__file__).resolve().parent.parent
BATCH = 500


def _sli_stream(count: int) -> list:
    """Every event a token_latency request of the ITL, TTFT SLIs (4 endpoints), 1 % slow."""
    rng = random.Random(3)
    items = []
    for i in range(count):
        slow = rng.random() < 0.01
        items.append({"id": f"sli-{i}", "kind": "token_latency", "time": datetime.fromtimestamp(
            workload.T0 + i * 0.01, UTC).isoformat().replace("+00:00", "Z"), "host": f"node-{i % 64}", "gpu": i % 8,
            "attrs": {"endpoint": workload.ENDPOINTS[i % 4], "tokens": 100, "itl_max_ms": 450.0 if slow else 80.0,
                      "itl_p99_ms": 70.0, "ttft_ms": 300.0}})
    return [workload.to_event(item) for item in items]


def _cpu_per_event(rulebooks, events, measure: bool, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        evaluator = RuleEvaluator(lateness_s=60.0, measure_slos=measure)
        evaluator.load(rulebooks)
        started = time.process_time()
        for i in range(0, len(events), BATCH):
            evaluator.evaluate_batch(events[i:i + BATCH])
        best = min(best, (time.process_time() - started) / len(events))
    return best


def counting_part(rulebooks, count: int, runs: int) -> dict[str, float]:
    fleet = [workload.to_event(item) for item in workload.mixed(count)]
    stress = _sli_stream(count)
    figures = {}
    for name, events in (("fleet", fleet), ("sli_only", stress)):
        off = _cpu_per_event(rulebooks, events, False, runs)
        on = _cpu_per_event(rulebooks, events, True, runs)
        figures[name] = {"off_us": off * 1e6, "on_us": on * 1e6, "ratio": on / off}
    # (a') the store's share: the bucket upsert of one 500-event batch of the stress stream, on SQLite.
    with tempfile.TemporaryDirectory() as folder:
        database = Database(f"sqlite:///{folder}/b.db")
        database.upgrade()
        evaluator = RuleEvaluator(lateness_s=60.0)
        evaluator.load(rulebooks)
        times = []
        for i in range(0, min(len(stress), 20 * BATCH), BATCH):
            result = evaluator.evaluate_batch(stress[i:i + BATCH])
            started = time.perf_counter()
            with database.session() as session:
                record_sli(session, result.sli, [])
            times.append(time.perf_counter() - started)
        database.dispose()
    figures["store_batch_ms"] = statistics.median(times) * 1e3
    return figures


RULEBOOK = """\
rulebook: bench
version: "1"
slos:
{slos}
rules:
  - id: frag
    title: fragmentation
    slo: slo-0
    severity: warning
    when: {{event: mem_fragmentation, if: fragmentation_ratio > 0.65}}
    summary: frag
    remediation: none
"""
SLO = """\
  slo-{i}:
    service: s
    sli: x
    objective: x
    window: 28d
    indicator:
      requests: {{event: token_latency}}
      good: itl_max_ms < 200ms
      target: 0.99
      group_by: [endpoint]
"""


def api_part(days: int, requests: int) -> dict[str, float]:
    """5 SLOs × 10 endpoints = 50 groups, `days` of full one-minute buckets each; GET /api/v1/slos timed."""
    from gpuslo.engine.core import Gpuslo
    from gpuslo.web import create_app

    with tempfile.TemporaryDirectory() as folder:
        rules = Path(folder) / "rules"
        rules.mkdir()
        (rules / "bench.yaml").write_text(RULEBOOK.format(slos="".join(SLO.format(i=i) for i in range(5))))
        load_rulebook_text((rules / "bench.yaml").read_text(), "bench.yaml")
        settings = Settings(database_url=f"sqlite:///{folder}/api.db", rules_dir=rules, rules_poll_seconds=0)
        database = Database(settings.database_url)
        database.upgrade()
        now = int(time.time() // 60)
        rng = random.Random(5)
        started = time.perf_counter()
        with database.engine.begin() as connection:
            for slo in range(5):
                for endpoint in range(10):
                    key = f"endpoint=/v1/e{endpoint}"
                    rows = []
                    rollups: list[dict[int, list[int]]] = [{}, {}]
                    for minute in range(now - days * 1440 + 1, now + 1):
                        total = 60
                        good = total - (rng.random() < 0.05)
                        rows.append({"slo_id": f"slo-{slo}", "group_key": key, "minute": minute, "good": good,
                                     "total": total, "attributed": 0})
                        for found, size in zip(rollups, (60, 1440), strict=True):
                            sums = found.setdefault(minute // size, [0, 0])
                            sums[0] += good
                            sums[1] += total
                    connection.execute(insert(SloBucketRow.__table__), rows)
                    for table, unit, found in ((SloHourRow, "hour", rollups[0]), (SloDayRow, "day", rollups[1])):
                        connection.execute(insert(table.__table__), [
                            {"slo_id": f"slo-{slo}", "group_key": key, unit: u, "good": g, "total": t,
                             "attributed": 0} for u, (g, t) in found.items()])
        fill_s = time.perf_counter() - started
        database.dispose()
        core = Gpuslo.open(settings)
        try:
            client = create_app(settings, core=core).test_client()
            latencies, floor = [], []
            for _ in range(requests):
                started = time.perf_counter()
                response = client.get("/api/v1/slos", environ_base={"REMOTE_ADDR": "127.0.0.1"})
                latencies.append(time.perf_counter() - started)
                assert response.status_code == 200 and len(response.get_json()["items"]) == 50
                # The machine's floor, interleaved: the same client and app answering /healthz.
                started = time.perf_counter()
                assert client.get("/healthz", environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code == 200
                floor.append(time.perf_counter() - started)
            # The baseline, same run and data: every range recounted from the minute buckets alone (what the
            # fast path must equal, engine/slo/figures.py).
            baseline = []
            with core.database.session(readonly=True) as session:
                fast = figures.as_mapping(figures.figures(session, core.slos.slis()))
                for _ in range(3):
                    started = time.perf_counter()
                    slow = figures.as_mapping(figures.recount(session, core.slos.slis()))
                    baseline.append(time.perf_counter() - started)
            assert fast == slow, "the roll-up figures differ from the recount"
        finally:
            core.close()
    latencies.sort()
    floor.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return {"floor_p50_ms": floor[len(floor) // 2] * 1e3,
            "floor_p99_ms": floor[min(len(floor) - 1, int(len(floor) * 0.99))] * 1e3,
            "rows": 50 * days * 1440, "fill_s": fill_s, "p50_ms": latencies[len(latencies) // 2] * 1e3,
            "p99_ms": p99 * 1e3, "max_ms": latencies[-1] * 1e3, "recount_ms": statistics.median(baseline) * 1e3,
            "speedup": statistics.median(baseline) / latencies[len(latencies) // 2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs (GPUSLO_BENCH_QUICK=1 does the same)")
    parser.add_argument("--part", choices=("a", "b", "all"), default="all", help="run (a), (b) or both")
    args = parser.parse_args()
    quick = args.quick or os.environ.get("GPUSLO_BENCH_QUICK") == "1"
    rulebooks, problems = load_directory(ROOT / "rules")
    assert not problems, problems
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}", flush=True)
    ratios = []
    if args.part in ("a", "all"):
        counting = counting_part(rulebooks, 10_000 if quick else 50_000, 2 if quick else 5)
        for name in ("fleet", "sli_only"):
            f = counting[name]
            print(f"(a) {name:<9} evaluation {f['off_us']:.1f} µs/event without SLI counting, {f['on_us']:.1f} "
                  f"with: {f['ratio']:.2f}x (target <= 1.2 on the fleet mix)", flush=True)
            ratios.append(f"a_{name}={f['ratio']:.2f}")
        print(f"(a') storing one 500-request batch's buckets: {counting['store_batch_ms']:.2f} ms (SQLite)", flush=True)
    if args.part in ("b", "all"):
        api = api_part(2 if quick else 28, 50 if quick else 300)
        print(f"(b) GET /api/v1/slos, 50 groups, {api['rows']:,} minute buckets (filled in {api['fill_s']:.0f} s): "
              f"p50 {api['p50_ms']:.1f} ms, p99 {api['p99_ms']:.1f} ms, max {api['max_ms']:.1f} ms (target p99 <= "
              f"100); baseline: the same figures recounted from the minute buckets {api['recount_ms']:.0f} ms = "
              f"{api['speedup']:.0f}x the p50; GET /healthz interleaved (the machine's floor): p50 "
              f"{api['floor_p50_ms']:.1f} ms, p99 {api['floor_p99_ms']:.1f} ms", flush=True)
        ratios.append(f"b_p99_ms={api['p99_ms']:.1f} b_speedup={api['speedup']:.0f}")
    one, five, fifteen = os.getloadavg()
    print(f"ratios: {' '.join(ratios)}; load average {one:.2f} {five:.2f} {fifteen:.2f}")


if __name__ == "__main__":
    main()
