"""Which sources of a candidate split some other excerpt already names (run before measuring a fresh batch).

Run `.venv/bin/python tests/probes/logs/overlap.py <split>`: prints every source of corpus/<split>.yaml that any
other split, fixture or test file under tests/probes/logs names (as `owner/repo#N`, or a URL naming the same
report), and exits 1 if there is one. A report is the same report whatever its comment anchor.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).parent
_SHORT = re.compile(r"\b([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)#(\d+)")
_URL = re.compile(r"github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/(?:issues|pull|discussions)/(\d+)")


def reports(text: str) -> set[str]:
    """Every report named in `text`, as lower-case `owner/repo#N`; other URLs as themselves."""
    found = {f"{repo.lower()}#{number}" for repo, number in _SHORT.findall(text)}
    found |= {f"{repo.lower()}#{number}" for repo, number in _URL.findall(text)}
    return found


def source_key(source: str) -> set[str]:
    return reports(source) or {source.split("#")[0].rstrip("/").lower()}


def overlap(split: str) -> dict[str, set[str]]:
    """Source of `split` -> the other files that name it."""
    mine = {case["source"] for case in yaml.safe_load((ROOT / "corpus" / f"{split}.yaml").read_text())}
    named: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*")):
        if not path.is_file() or path.name in (f"{split}.yaml", f"{split}-first-run.txt") or path.suffix == ".pyc":
            continue
        text = path.read_text(errors="replace")
        keys = reports(text) | {url.split("#")[0].rstrip("/").lower() for url in re.findall(r"https?://\S+", text)}
        for key in keys:
            named.setdefault(key, set()).add(str(path.relative_to(ROOT)))
    return {source: files for source in mine for key in source_key(source) if (files := named.get(key, set()))}


if __name__ == "__main__":
    clashes = overlap(sys.argv[1])
    for source, files in sorted(clashes.items()):
        print(f"{source}: also in {', '.join(sorted(files))}")
    print(f"{len(clashes)} sources of {sys.argv[1]} named elsewhere")
    sys.exit(1 if clashes else 0)
