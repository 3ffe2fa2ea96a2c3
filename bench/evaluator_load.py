"""What loading the shipped rulebooks into one RuleEvaluator costs: a fleet worker does it once per partition it
claims (engine/fleet/partition.py), so 64 partitions per key space make a lone worker load ~190 evaluators before it
evaluates anything, and a worker taking over a dead one's partitions loads one per partition.

Measured alternately in one run, CPU ms per evaluator (best of 5 rounds of 30 loads): the evaluator as shipped,
and the baseline "compiled anew", where the prefilter's generated source is compiled on every load (what every
partition paid before the compile cache). The window-scope hashing, done once per rule instead of twice, is in
both arms; bench/RESULTS.md has the A/B against the code before both changes.

    .venv/bin/python bench/evaluator_load.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpuslo.engine import prefilter
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import RuleEvaluator

RULES = Path(__file__).resolve().parent.parent / "rules"


def _ms_per_load(rulebooks: tuple[Rulebook, ...], before_each: Callable[[], None], loads: int = 30) -> float:
    start = time.process_time()
    for _ in range(loads):
        before_each()
        RuleEvaluator(lateness_s=60.0, isolate_events=True).load(rulebooks)
    return (time.process_time() - start) / loads * 1e3


def main() -> None:
    rulebooks, errors = load_directory(RULES)
    if errors:
        raise SystemExit(f"bench/evaluator_load.py: the shipped rulebooks do not load: {errors}")
    arms: dict[str, Callable[[], None]] = {"compiled anew (baseline)": prefilter._compiled.cache_clear,
                                           "as shipped": lambda: None}
    best = dict.fromkeys(arms, float("inf"))
    for _round in range(5):
        for name, before_each in arms.items():
            best[name] = min(best[name], _ms_per_load(rulebooks, before_each))
    base = best["compiled anew (baseline)"]
    print(f"{len(rulebooks)} rulebooks, CPU ms per evaluator loaded (best of 5 rounds of 30):")
    for name, ms in best.items():
        print(f"  {name:26} {ms:6.2f} ms   ratio to baseline {base / ms:4.2f}x")


if __name__ == "__main__":
    main()
