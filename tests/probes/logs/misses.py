"""Every excerpt the catalog misses now, its error-looking lines marked T (a trigger word on the line) or - (none).

Run `.venv/bin/python tests/probes/logs/misses.py`: a miss on a `-` line needs a trigger word before any reader can
see it; a miss on a `T` line needs a reader (or a look-alike rule relaxed), not a word.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).parent))

import corpus

from gpuslo.probes.logs.catalog import TRIGGER

_ERRORISH = re.compile(r"rror|fail|WARN|nan|memory|timed out|Allocation", re.IGNORECASE)
SPLITS = corpus.REPORTED  # heldout18 joined it in session 9 (h15g)


def main() -> None:
    for split in SPLITS:
        for case in corpus.load(split):
            if case.lookalike:
                continue
            out = corpus.check(case, corpus.run(case))
            if out.expected == out.found:
                continue
            print(f"== {split} {case.name} missed {out.expected - out.found}")
            for text in case.text.splitlines():
                if _ERRORISH.search(text):
                    print("  ", "T" if TRIGGER.search(text.encode()) else "-", text[:150])


if __name__ == "__main__":
    main()
