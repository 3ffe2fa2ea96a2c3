"""The ITL A/B's paired estimates (scripts/gpu_issue14.py, scripts/gpu_itl_ab.py): arms compared token position
by token position.

Each block is one request of the same prompt, so the k-th gap of an `on` block and the k-th gap of the `off`
block of the same round decode at the same KV length, with the same kernels, seconds apart. The estimate is
the median over rounds of each round's median log ratio over positions, as a percentage; its 95 % interval
resamples rounds (a round's blocks stay together). A state that lasts a round (the CPU's speed, another
tenant) or a position (the KV length, a plan built for it) cancels in it; the probe's cost does not.

h14f: `round_log_ratios` gives those per-round values by round, and `contrast` combines several such estimates:
in the same rounds (paired: per round Σ w·x, e.g. an A/B pair minus the A/A and B/B pairs of the same cycle),
or from different rounds (unpaired: Σ w·median, each term resampled on its own, e.g. the client inside the
probe's process minus outside).
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


def _pct(log_ratio: float) -> float:
    return round((math.exp(log_ratio) - 1) * 100, 3)


def round_log_ratios(blocks: Sequence[dict[str, Any]], arm: str = "on", base: str = "off") -> dict[int, float]:
    """Each round's median log ratio over positions of `arm` over `base`, by round, from blocks
    {"round": r, "arm": a, "values": [gap ms per position]}; rounds missing an arm are left out."""
    rounds: dict[int, dict[str, list[float]]] = {}
    for b in blocks:
        rounds.setdefault(int(b["round"]), {})[str(b["arm"])] = [float(v) for v in b["values"]]
    found = {r: _round_log_ratio(x[arm], x[base]) for r, x in rounds.items() if arm in x and base in x}
    return {r: v for r, v in sorted(found.items()) if v is not None}


def paired_positions(blocks: Sequence[dict[str, Any]], arm: str = "on", base: str = "off", n_boot: int = 4000,
                     seed: int = 11) -> dict[str, Any]:
    """Per-position paired overhead of `arm` over `base` in per cent, with its 95 % bootstrap interval over
    rounds, from blocks {"round": r, "arm": a, "values": [gap ms per position]}."""
    per_round = list(round_log_ratios(blocks, arm, base).values())
    if not per_round:
        return {"arm": arm, "base": base, "rounds": 0}
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(per_round, k=len(per_round))) for _ in range(n_boot))
    return {"arm": arm, "base": base, "rounds": len(per_round),
            "paired_position_pct": _pct(statistics.median(per_round)),
            "ci95_pct": [_pct(boots[int(0.025 * n_boot)]), _pct(boots[int(0.975 * n_boot) - 1])],
            "rounds_slower": sum(r > 0 for r in per_round)}


def contrast(terms: Sequence[tuple[float, dict[int, float]]], paired: bool, n_boot: int = 4000,
             seed: int = 13) -> dict[str, Any]:
    """A weighted sum of per-round log-ratio estimates (from round_log_ratios), in per cent, with a 95 %
    bootstrap interval. paired: the rounds every term has, per round Σ w·x, the median over rounds, rounds
    resampled. Unpaired: Σ w·median(term), each term's rounds resampled on their own."""
    rng = random.Random(seed)
    if paired:
        common = sorted(set.intersection(*(set(t) for _, t in terms))) if terms else []
        if not common:
            return {"rounds": 0}
        per_round = [sum(w * t[r] for w, t in terms) for r in common]
        boots = sorted(statistics.median(rng.choices(per_round, k=len(per_round))) for _ in range(n_boot))
        point = statistics.median(per_round)
        rounds: Any = len(common)
    else:
        values = [(w, list(t.values())) for w, t in terms]
        if not values or any(not v for _, v in values):
            return {"rounds": [len(v) for _, v in values]}
        point = sum(w * statistics.median(v) for w, v in values)
        boots = sorted(sum(w * statistics.median(rng.choices(v, k=len(v))) for w, v in values)
                       for _ in range(n_boot))
        rounds = [len(v) for _, v in values]
    return {"rounds": rounds, "pct": _pct(point),
            "ci95_pct": [_pct(boots[int(0.025 * n_boot)]), _pct(boots[int(0.975 * n_boot) - 1])]}
