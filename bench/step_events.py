"""Building a fleet stream's events: parse_event for every partition copy, against StepEvents (each event once).

Publishes bench/fleet.py's workload (60,000 events, `--partitions 8`) to an in-memory bus, decodes every message
as a worker would, and times building the 82,493 copies both ways (best of 7, CPU time per event).

  python bench/step_events.py [--events 60000] [--partitions 8]
"""

from __future__ import annotations

import argparse
import gc
import marshal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for helpers in ("tests", "tests/fleet"):  # the test suite's fleet helpers (RULES), as bench/fleet.py
    sys.path.insert(0, str(ROOT / helpers))

import engine_workload as workload  # noqa: E402
from fleet_support import RULES  # noqa: E402

from gpuslo.engine.events import parse_event  # noqa: E402
from gpuslo.engine.fleet.publish import Publisher, decode  # noqa: E402
from gpuslo.engine.fleet.routing import RoutingTable  # noqa: E402
from gpuslo.engine.fleet.step_events import StepEvents  # noqa: E402
from gpuslo.engine.rulebook import load_directory  # noqa: E402


class _MemoryBus:
    """What Publisher needs of a bus: the routing table, and publish() keeping the messages."""

    def __init__(self, table: RoutingTable):
        self.table, self.messages = table, list[bytes]()

    def routes(self) -> RoutingTable:
        return self.table

    def publish(self, items: Sequence[tuple[str, str, bytes]]) -> list[bool]:
        self.messages += [data for _subject, _id, data in items]
        return [False] * len(items)


def _best(work: Callable[[], object], events: int) -> float:
    best = float("inf")
    for _ in range(7):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best / events * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args(argv)
    bus = _MemoryBus(RoutingTable.of(load_directory(RULES)[0], args.partitions))
    events = [workload.to_event(item) for item in workload.mixed(args.events)]
    publisher = Publisher(bus)  # type: ignore[arg-type]
    for start in range(0, len(events), 1000):
        publisher.publish(events[start:start + 1000])
    copies = [obj for data in bus.messages for obj in decode(data)]
    seen: set[object] = set()
    repeats = []  # the copies after an event's first: those StepEvents reuses
    for obj in copies:
        key = obj["id"] if isinstance(obj, dict) else None
        if key in seen:
            repeats.append(obj)
        seen.add(key)
    gc.collect()
    gc.freeze()
    gc.set_threshold(2000, 10, 100)  # as a running worker (cli/serve.py tune_gc_after_startup)

    def cached() -> None:
        built = StepEvents()
        for obj in copies:
            built.build(obj)

    print(f"{len(bus.messages)} messages, {len(copies)} copies of {len(events)} events; CPU µs per event:")
    print(f"  decode every message          {_best(lambda: [decode(d) for d in bus.messages], len(events)):.2f}")
    print(f"  parse_event every copy        {_best(lambda: [parse_event(o) for o in copies], len(events)):.2f}")
    print(f"  StepEvents (each event once)  {_best(cached, len(events)):.2f}")
    print(f"  of which: repeats' parse_event {_best(lambda: [parse_event(o) for o in repeats], len(events)):.2f}, "
          f"marshal x2 {_best(lambda: [marshal.dumps(o, 2) for o in repeats + repeats], len(events)):.2f}")


if __name__ == "__main__":
    main()
