"""`matches` runs in linear time: `^(a+)+$` against a 28-character and a 1 MiB message, vs `contains` (baseline).

Each size is measured twice in this run: the operator alone (`text_test`, what the runtime posts to the engine for
every event) and a whole RuleEvaluator.evaluate of one event through a one-rule rulebook. The ratio is matches /
contains on the same message. Python's backtracking `re` (what `matches` used before) is timed for contrast on
short messages only: it doubles with every character (the 28-character case stalled the engine 6.6 s).

Run: .venv/bin/python bench/regex_conditions.py   (GPUSLO_BENCH_QUICK=1 for a shorter run)
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable

from gpuslo.engine.events import parse_event
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.rulebook.operators import holds as text_test
from gpuslo.engine.runtime import RuleEvaluator

QUICK = bool(os.environ.get("GPUSLO_BENCH_QUICK"))
PATTERN = "^(a+)+$"
RULEBOOK = """\
rulebook: bench-regex
version: "1"
slos:
  s: {service: x, sli: y, objective: z, window: 1d}
rules:
  - id: r
    title: regex bench
    slo: s
    severity: info
    when: {event: gpu_xid, if: "message OP 'ARG'"}
    summary: "{{ event.host }}"
    remediation: none
"""


def best_of(repeats: int, fn: Callable[[], object], inner: int) -> float:
    """The best mean seconds per call over `repeats` rounds of `inner` calls (CPU time of this thread)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.thread_time() - start) / inner)
    return best


def evaluator(op: str, arg: str) -> RuleEvaluator:
    runner = RuleEvaluator()
    runner.load([load_rulebook_text(RULEBOOK.replace("OP", op).replace("ARG", arg), "bench.yaml")])
    return runner


def measure(length: int, repeats: int) -> dict[str, float]:
    message = "a" * (length - 1) + "!"  # the worst case for backtracking: almost matches, then fails at the end
    inner = max(1, 20_000 // max(1, length // 64))
    base = parse_event({"id": "e", "kind": "gpu_xid", "time": "2025-01-01T00:00:00Z", "host": "h",
                        "attrs": {"xid": 79}})
    event = dataclasses.replace(base, message=message)  # past ingest's 8 KiB limit on purpose: the 1 MiB case
    matches, contains = evaluator("matches", PATTERN), evaluator("contains", "zzz")
    counter = iter(range(10**9))

    def evaluate(runner: RuleEvaluator) -> None:
        runner.evaluate([dataclasses.replace(event, id=f"e{next(counter)}")])

    evaluate(matches), evaluate(contains)  # warm: the RE2 program is compiled once per pattern
    return {
        "op_matches": best_of(repeats, lambda: text_test("matches", message, PATTERN), inner),
        "op_contains": best_of(repeats, lambda: text_test("contains", message, "zzz"), inner),
        "eval_matches": best_of(repeats, lambda: evaluate(matches), max(1, inner // 4)),
        "eval_contains": best_of(repeats, lambda: evaluate(contains), max(1, inner // 4)),
    }


def python_re(length: int) -> float:
    message = "a" * (length - 1) + "!"
    start = time.thread_time()
    re.search(PATTERN, message)
    return time.thread_time() - start


def main() -> None:
    repeats = 2 if QUICK else 5
    print(f"pattern {PATTERN!r}; CPU time of this thread, best of {repeats}")
    for length in (28, 1 << 20):
        got = measure(length, repeats)
        print(f"{length:>8} chars  operator: matches {got['op_matches'] * 1e6:10.1f} us, contains "
              f"{got['op_contains'] * 1e6:8.1f} us, ratio {got['op_matches'] / got['op_contains']:6.2f}")
        print(f"{'':>8}        evaluate: matches {got['eval_matches'] * 1e6:10.1f} us, contains "
              f"{got['eval_contains'] * 1e6:8.1f} us, ratio {got['eval_matches'] / got['eval_contains']:6.2f}")
    lengths = (14, 16, 18) if QUICK else (16, 20, 24, 28)
    print("python re (before), same pattern: " + ", ".join(f"{n} chars {python_re(n) * 1e3:.1f} ms" for n in lengths))


if __name__ == "__main__":
    main()
