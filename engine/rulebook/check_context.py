"""What the meaning checks share: the document with its SLOs, lists and macros, and conditions parsed in place."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.events import KINDS
from gpuslo.engine.rulebook.expr import parse_expression
from gpuslo.engine.rulebook.marked_yaml import Document, Path_


def expression_location(doc: Document, path: Path_) -> tuple[Location, bool]:
    """Where a condition's text begins, and whether its columns can be trusted (one line, not a block)."""
    where = doc.at(path)
    if doc.styles.get(path) in ('"', "'") and where.col is not None:
        where = replace(where, col=where.col + 1)
    return where, path not in doc.multiline


@dataclass(frozen=True)
class CheckContext:
    """The document being checked, and the rulebook's SLOs, lists and macros that rule checks look up."""

    doc: Document
    slos: Mapping[str, Any]
    lists: Mapping[str, tuple[Any, ...]]
    macros: Mapping[str, str]

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
        """The problems of the condition `text` at `path` on events of `kind`, attributed to `rule`."""
        if not isinstance(text, str) or kind not in KINDS:
            return
        where, exact = expression_location(self.doc, path)
        try:
            parse_expression(
                text,
                kind,
                location=where,
                aliases=aliases,
                macros=self.macros,
                lists=self.lists,
                exact_columns=exact,
            )
        except RulebookError as exc:
            yield from (replace(p, rule_id=rule) for p in exc.problems)
