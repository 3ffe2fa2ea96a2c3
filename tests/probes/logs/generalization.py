"""How far the generic families (probes/logs/families_generic.py) reach alone: the excerpts that the fresh
first runs missed (corpus/*-first-run.txt), read with a catalog of only the generic families, and every
look-alike of every split read the same way (they must stay silent).

Run `.venv/bin/python tests/probes/logs/generalization.py` for the figures.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).parent))

from corpus import CORPUS, REPORTED, Case, load, run

from gpuslo.probes.logs import parser as parser_module
from gpuslo.probes.logs.catalog import FAMILIES, _Candidates
from gpuslo.probes.logs.families_generic import GENERIC_FAMILIES

# the fresh batches whose untuned first run is kept beside them, in the order they were written
FIRST_RUNS = ("heldout3", "tune-h15b", "heldout4", "heldout5", "heldout6", "heldout8", "heldout9", "heldout10",
              "heldout11")
_GENERIC = tuple(f for f in FAMILIES if f.name in {g.name for g in GENERIC_FAMILIES})


@contextmanager
def generic_only() -> Iterator[None]:
    """The parser tries only the generic families (prefixes, prose rules and blocks unchanged)."""
    saved = parser_module.candidates
    parser_module.candidates = _Candidates(_GENERIC)
    try:
        yield
    finally:
        parser_module.candidates = saved


def first_run_misses(split: str) -> list[tuple[Case, str]]:
    """(excerpt, kind) for every `missed <kind>` its first run reported."""
    cases = {c.name: c for c in load(split)}
    misses = []
    for line in (CORPUS / f"{split}-first-run.txt").read_text().splitlines():
        match = re.match(r"\s+(\S+) \[[^\]]+\]: (.*)", line)
        if match and match.group(1) in cases:
            misses += [(cases[match.group(1)], kind) for kind in re.findall(r"missed (\w+)", match.group(2))]
    return misses


def caught(case: Case, kind: str) -> bool:
    return any(e.kind == kind for e in run(case))


def main() -> None:
    total = found = 0
    with generic_only():
        for split in FIRST_RUNS:
            misses = first_run_misses(split)
            hits = [(c, k) for c, k in misses if caught(c, k)]
            total, found = total + len(misses), found + len(hits)
            print(f"{split}: the generic families alone catch {len(hits)} of its {len(misses)} first-run misses")
            for case, kind in misses:
                print(f"  {'caught' if (case, kind) in hits else 'missed'} {kind}: {case.name} [{case.source}]")
        every = [c for split in REPORTED for c in load(split)]
        lookalikes = [c for c in every if c.lookalike]
        loud = [c for c in lookalikes if run(c)]
        wanted = [(c, w["kind"]) for c in every for w in c.expect]
        reached = sum(caught(c, k) for c, k in wanted)
    print(f"all: {found}/{total} first-run misses caught by the generic families alone; "
          f"{len(loud)} of {len(lookalikes)} look-alikes give an event with them alone")
    for case in loud:
        print(f"  loud: {case.split}:{case.name}")
    print(f"every split: the generic families alone find {reached} of the {len(wanted)} expected events")


if __name__ == "__main__":
    main()
