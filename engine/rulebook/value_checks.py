"""Checks of single values that rules, triggers and resolves share: event kinds, field names, durations."""

from __future__ import annotations

from collections.abc import Iterator

from gpuslo.engine.errors import RulebookProblem
from gpuslo.engine.events import ENVELOPE_FIELDS, KIND_ATTRS, KINDS, field_type
from gpuslo.engine.rulebook.hints import did_you_mean
from gpuslo.engine.rulebook.marked_yaml import Document, Path_
from gpuslo.engine.units import parse_duration


def kind_problem(doc: Document, path: Path_, kind: object, rule: str | None) -> Iterator[RulebookProblem]:
    """An event kind gpuslo does not know."""
    if isinstance(kind, str) and kind not in KINDS:
        yield RulebookProblem(
            doc.at(path),
            f"unknown event kind '{kind}'",
            rule,
            did_you_mean(kind, KINDS) or f"known: {', '.join(KINDS)}",
        )


def field_problems(
    doc: Document, path: Path_, names: object, kinds: list[str], rule: str | None
) -> Iterator[RulebookProblem]:
    """Field names in a list (`same`, `group_by`) that one of `kinds` lacks; one problem per name."""
    if not isinstance(names, list):
        return
    for i, name in enumerate(names):
        for kind in kinds:
            if isinstance(name, str) and field_type(kind, name) is None:
                yield RulebookProblem(
                    doc.at((*path, i)),
                    f"unknown field '{name}' for event {kind} in '{path[-1]}'",
                    rule,
                    did_you_mean(name, _kind_fields(kind)),
                )
                break


def _kind_fields(kind: str) -> list[str]:
    return [*ENVELOPE_FIELDS, *KIND_ATTRS.get(kind, {})]


def duration_problem(
    doc: Document, path: Path_, value: object, rule: str | None, limit: float | None = None
) -> Iterator[RulebookProblem]:
    """A duration that does not parse, is not above 0, or is over `limit` seconds."""
    if not isinstance(value, str):
        return
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        yield RulebookProblem(doc.at(path), str(exc), rule)
        return
    if seconds <= 0 or (limit is not None and seconds > limit):
        bound = "above 0" if limit is None else f"above 0 and at most {limit:g}s"
        yield RulebookProblem(doc.at(path), f"'{path[-1]}' must be {bound}, got {value}", rule)
