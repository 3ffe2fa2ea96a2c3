"""What the meaning checks share: the document's context (SLOs, lists, macros, and every condition parsed once,
for the build), and checks of single values (event kinds, field names, durations, `requires:`, summaries)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

import jinja2
import jinja2.meta

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.events import ENVELOPE_FIELDS, KIND_ATTRS, KINDS, field_type
from gpuslo.engine.rulebook.expr import parse_expression
from gpuslo.engine.rulebook.marked_yaml import Document, Path_
from gpuslo.engine.rulebook.model import Expr
from gpuslo.engine.templates import summary_environment
from gpuslo.engine.units import parse_duration

# collective: gpuslo.engine.collectives, None if no hang; cascade: gpuslo.engine.cascades (root and cascades)
TEMPLATE_NAMES = ("event", "group", "collective", "cascade")
_REQUIRES = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*")
_VERSION_COMPARISONS = {">=": tuple.__ge__, "<=": tuple.__le__, "==": tuple.__eq__, "!=": tuple.__ne__,
                        ">": tuple.__gt__, "<": tuple.__lt__}


def did_you_mean(word: object, options: Any) -> str | None:
    """`did you mean 'X'?` for the closest of `options`, or None when nothing is close."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f"did you mean '{close[0]}'?" if close else None


def expression_location(doc: Document, path: Path_) -> tuple[Location, bool]:
    """Where a condition's text begins, and whether its columns can be trusted (one line, not a block)."""
    where = doc.at(path)
    if doc.styles.get(path) in ('"', "'") and where.col is not None:
        where = replace(where, col=where.col + 1)
    return where, path not in doc.multiline


@dataclass(frozen=True)
class CheckContext:
    """The document being checked, the rulebook's SLOs, lists and macros that checks look up, and `conditions`:
    each condition that parsed, by its path, filled in as the walk goes (the build reads them, never re-parses)."""

    doc: Document
    slos: Mapping[str, Any]
    lists: Mapping[str, tuple[Any, ...]]
    macros: Mapping[str, str]
    conditions: dict[Path_, Expr] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: Document) -> CheckContext:
        """The context of a document whose top level is a mapping."""
        data = doc.data
        lists, macros = data.get("lists"), data.get("macros")  # not mappings: the schema check says so
        return cls(
            doc=doc,
            slos=data.get("slos") if isinstance(data.get("slos"), dict) else {},
            lists={k: tuple(v) for k, v in lists.items() if isinstance(v, list)} if isinstance(lists, dict) else {},
            macros={k: v for k, v in macros.items() if isinstance(v, str)} if isinstance(macros, dict) else {},
        )

    def condition(
        self, path: Path_, text: object, kind: str, aliases: Mapping[str, str], rule: str | None
    ) -> Iterator[RulebookProblem]:
        """The problems of the condition `text` at `path` on events of `kind`, attributed to `rule`; a condition
        that parses is kept in `conditions`."""
        if not isinstance(text, str) or kind not in KINDS:
            return
        where, exact = expression_location(self.doc, path)
        try:
            self.conditions[path] = parse_expression(
                text, kind, location=where, aliases=aliases, macros=self.macros, lists=self.lists,
                exact_columns=exact,
            )
        except RulebookError as exc:
            yield from (replace(p, rule_id=rule) for p in exc.problems)


def kind_problem(doc: Document, path: Path_, kind: object, rule: str | None) -> Iterator[RulebookProblem]:
    """An event kind gpuslo does not know."""
    if isinstance(kind, str) and kind not in KINDS:
        hint = did_you_mean(kind, KINDS) or f"known: {', '.join(KINDS)}"
        yield RulebookProblem(doc.at(path), f"unknown event kind '{kind}'", rule, hint)


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
                    did_you_mean(name, [*ENVELOPE_FIELDS, *KIND_ATTRS.get(kind, {})]),
                )
                break


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
        if not _VERSION_COMPARISONS[op](current + (0,) * (width - len(current)), want + (0,) * (width - len(want))):
            yield RulebookProblem(
                where, f"this rulebook requires gpuslo {requires}, but this is {'.'.join(map(str, current))}"
            )


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def template_problems(doc: Document, path: Path_, text: object, rule: str | None) -> Iterator[RulebookProblem]:
    """A summary template's syntax errors, unknown filters and unknown variables."""
    if not isinstance(text, str):
        return
    env = summary_environment()
    try:
        tree = env.parse(text)
        undeclared = jinja2.meta.find_undeclared_variables(tree)  # also checks that every filter exists
        env.compile(tree)  # what the explainer runs: a template nested too deeply for Python fails here, at load
    except jinja2.TemplateError as exc:  # syntax errors, and assertions such as an unknown filter
        line = getattr(exc, "lineno", None)
        where = f" (template line {line})" if line else ""
        yield RulebookProblem(doc.at(path), f"summary template: {exc.message}{where}", rule)
        return
    except (RecursionError, MemoryError, SyntaxError, ValueError, OverflowError) as exc:
        deep = isinstance(exc, RecursionError | MemoryError)
        why = "it nests too deeply" if deep else f"{type(exc).__name__}: {exc}"
        yield RulebookProblem(doc.at(path), f"summary template cannot be compiled: {why}", rule,
                              "keep a summary to a sentence with a few {{ fields }} and {% if %} blocks")
        return
    for name in sorted(undeclared - set(TEMPLATE_NAMES)):
        yield RulebookProblem(
            doc.at(path),
            f"summary template uses unknown variable '{name}' (known: {', '.join(TEMPLATE_NAMES)})",
            rule,
            did_you_mean(name, TEMPLATE_NAMES),
        )
