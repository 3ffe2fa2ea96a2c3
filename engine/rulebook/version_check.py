"""Check a rulebook's `requires:` version range against the installed gpuslo."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import metadata

from gpuslo.engine.errors import RulebookProblem
from gpuslo.engine.rulebook.marked_yaml import Document

_REQUIRES = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*")
_COMPARISONS = {
    ">=": tuple.__ge__,
    "<=": tuple.__le__,
    "==": tuple.__eq__,
    "!=": tuple.__ne__,
    ">": tuple.__gt__,
    "<": tuple.__lt__,
}


def requires_problems(doc: Document, requires: object) -> Iterator[RulebookProblem]:
    """A `requires:` that is not a version range, or a range this gpuslo is outside of."""
    if not isinstance(requires, str):
        return
    where = doc.at(("requires",))
    try:
        current = _version_tuple(metadata.version("gpuslo"))
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return
    for part in requires.split(","):
        match = _REQUIRES.fullmatch(part)
        if not match:
            yield RulebookProblem(where, f"requires {requires!r} is not a version range", hint="e.g. '>=0.1'")
            return
        op, wanted = match.groups()
        want = _version_tuple(wanted)
        width = max(len(want), len(current))
        if not _COMPARISONS[op](current + (0,) * (width - len(current)), want + (0,) * (width - len(want))):
            yield RulebookProblem(
                where, f"this rulebook requires gpuslo {requires}, but this is {'.'.join(map(str, current))}"
            )


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])
