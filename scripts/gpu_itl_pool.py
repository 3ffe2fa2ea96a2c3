"""The registered primary verdict of the second ITL cycle A/B (docs/notes/stop26-itl-prereg.md): the `out` cycles
of h14f's run and of the second run pooled, analysed exactly as gpu_itl_ab.analyse analyses one run.

    python3 scripts/gpu_itl_pool.py RUN.json [RUN.json ...]

Each RUN.json is an `itl_ab` object (gpu_itl_ab.py's itl-ab.json, or the `itl_ab` of a recording); cycles of
each later run are renumbered after the earlier ones so no two runs' cycles pair.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_itl_ab import analyse  # noqa: E402


def runs_blocks(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run's blocks, cycles renumbered so that run k's cycles follow run k-1's."""
    blocks: list[dict[str, Any]] = []
    offset = 0
    for run in runs:
        cycles = [int(b["cycle"]) for b in run["blocks"]]
        blocks += [{**b, "cycle": int(b["cycle"]) + offset} for b in run["blocks"]]
        offset += max(cycles, default=-1) + 1
    return blocks


def load(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(path.read_text())
    return found.get("itl_ab", found)


def main(argv: list[str]) -> int:
    runs = [load(Path(p)) for p in argv]
    found = {"runs": argv, "each": [analyse(run["blocks"]).get("verdict") for run in runs],
             "pooled": analyse(runs_blocks(runs))}
    print(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
