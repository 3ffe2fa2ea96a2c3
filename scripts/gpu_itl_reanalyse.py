"""h14f, post hoc: h14d's and h14e's ABBA ITL blocks read as h14f's cycle pairs, and h14e + h14f pooled.

    python3 scripts/gpu_itl_reanalyse.py

In an ABBA run the blocks go on | off off | on on | off off | ...; the switch between `on` and the next `off`
is the slow detach (~4 s), the one between `off` and the next `on` the fast attach (~0.02 s). So each off→on pair
of neighbours is h14f's AB (Y1 / X2), each off, off pair its AA (X2 / X1) and each on, on pair its BB (Y2 / Y1).
Prints those estimates for each old run (scripts/gpu_ab_stats.py), the DiD of h14e, and the AB and AA of h14e and
h14f (client in its own process in both) pooled by cycle. Not pre-registered: read beside h14f's own figures.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_ab_stats import contrast, paired_positions, round_log_ratios  # noqa: E402
from gpu_itl_ab import pair_blocks  # noqa: E402

INCIDENTS = Path(__file__).resolve().parents[1] / "examples" / "incidents"
OLD = {"h14d (client inside the probe's process)": "h200-stall-attribution-overhead-paired.json",
       "h14e (client in its own process)": "h200-probe-costs.json"}
KINDS = {("off", "on"): "ab", ("off", "off"): "aa", ("on", "on"): "bb"}


def neighbour_pairs(blocks: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Neighbouring blocks in run order as gpu_ab_stats blocks, round = the later block's index."""
    pairs: dict[str, list[dict[str, Any]]] = {"ab": [], "aa": [], "bb": []}
    for i in range(1, len(blocks)):
        first, second = blocks[i - 1], blocks[i]
        kind = KINDS.get((first["arm"], second["arm"]))
        if kind:
            pairs[kind] += [{"round": i, "arm": "on", "values": second["values"]},
                            {"round": i, "arm": "off", "values": first["values"]}]
    return pairs


def pooled(per_round: list[float], n_boot: int = 4000, seed: int = 11) -> dict[str, Any]:
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(per_round, k=len(per_round))) for _ in range(n_boot))

    def pct(x: float) -> float:
        return round((math.exp(x) - 1) * 100, 3)

    return {"rounds": len(per_round), "pct": pct(statistics.median(per_round)),
            "ci95_pct": [pct(boots[int(0.025 * n_boot)]), pct(boots[int(0.975 * n_boot) - 1])]}


def main() -> int:
    found: dict[str, Any] = {}
    ratios: dict[str, dict[int, float]] = {}
    for name, file in OLD.items():
        pairs = neighbour_pairs(json.loads((INCIDENTS / file).read_text())["itl_blocks"])
        found[name] = {k: paired_positions(v) for k, v in pairs.items()}
        r = {k: round_log_ratios(v) for k, v in pairs.items()}
        # one cycle: AA ends at block i-1, AB at i, BB at i+1 (off off on on)
        aa = {i + 1: v for i, v in r["aa"].items()}
        bb = {i - 1: v for i, v in r["bb"].items()}
        found[name]["did"] = contrast([(1.0, r["ab"]), (-0.5, aa), (-0.5, bb)], paired=True)
        if name.startswith("h14e"):
            ratios["h14e_ab"], ratios["h14e_aa"] = r["ab"], r["aa"]
    run = json.loads((INCIDENTS / "h200-itl-overhead-cycles.json").read_text())["itl_ab"]
    for k, (a, b) in {"ab": ("Y1", "X2"), "aa": ("X2", "X1")}.items():
        mine = list(round_log_ratios(pair_blocks(run["blocks"], a, b, "out")).values())
        found[f"h14e + h14f pooled, {k}"] = pooled(list(ratios[f"h14e_{k}"].values()) + mine)
    print(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
