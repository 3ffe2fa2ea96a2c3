"""The ITL A/B's paired estimate (scripts/gpu_issue14.py): arms compared token position by token position.

Each block is one request of the same prompt, so the k-th gap of an `on` block and the k-th gap of the `off`
block of the same round decode at the same KV length, with the same kernels, seconds apart. The estimate is
the median over rounds of each round's median log ratio over positions, as a percentage; its 95 % interval
resamples rounds (a round's blocks stay together). A state that lasts a round (the CPU's speed, another
tenant) or a position (the KV length, a plan built for it) cancels in it; the probe's cost does not.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any


def _round_log_ratio(on: Sequence[float], off: Sequence[float]) -> float | None:
    logs = [math.log(a / b) for a, b in zip(on, off, strict=False) if a > 0 and b > 0]
    return statistics.median(logs) if logs else None


def paired_positions(blocks: Sequence[dict[str, Any]], arm: str = "on", base: str = "off", n_boot: int = 4000,
                     seed: int = 11) -> dict[str, Any]:
    """Per-position paired overhead of `arm` over `base` in per cent, with its 95 % bootstrap interval over
    rounds, from blocks {"round": r, "arm": a, "values": [gap ms per position]}."""
    rounds: dict[int, dict[str, list[float]]] = {}
    for b in blocks:
        rounds.setdefault(int(b["round"]), {})[str(b["arm"])] = [float(v) for v in b["values"]]
    per_round = [r for r in (_round_log_ratio(x[arm], x[base]) for x in rounds.values() if arm in x and base in x)
                 if r is not None]
    if not per_round:
        return {"arm": arm, "base": base, "rounds": 0}
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(per_round, k=len(per_round))) for _ in range(n_boot))

    def pct(log_ratio: float) -> float:
        return round((math.exp(log_ratio) - 1) * 100, 3)

    return {"arm": arm, "base": base, "rounds": len(per_round),
            "paired_position_pct": pct(statistics.median(per_round)),
            "ci95_pct": [pct(boots[int(0.025 * n_boot)]), pct(boots[int(0.975 * n_boot) - 1])],
            "rounds_slower": sum(r > 0 for r in per_round)}
