"""Turn a validated rulebook document into the frozen model objects, with the conditions the validation parsed."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gpuslo.engine.rulebook.marked_yaml import Document, Path_
from gpuslo.engine.rulebook.model import (
    ARM_ALIAS,
    CLEAR_ALIAS,
    Absence,
    Correlation,
    Count,
    EventPattern,
    Expr,
    Lifecycle,
    Rule,
    Rulebook,
    SingleEvent,
    Slo,
    Trigger,
)
from gpuslo.engine.slo.build import build_sli
from gpuslo.engine.units import parse_duration

DEFAULT_GROUP_BY: tuple[str, ...] = ("host",)


class _Builder:
    """Builds model objects from a document that `validate` found no problem in, and the conditions it parsed."""

    def __init__(self, doc: Document, conditions: Mapping[Path_, Expr]):
        self.doc = doc
        self.conditions = conditions

    def pattern(self, path: Path_, obj: dict[str, Any], alias: str) -> EventPattern:
        text = obj.get("if")
        condition = None if text is None else self.conditions[(*path, "if")]
        return EventPattern(kind=obj["event"], condition=condition, alias=alias, condition_text=text)

    def trigger(self, path: Path_, when: dict[str, Any]) -> Trigger:
        same = tuple(when.get("same", ()))
        if "all" in when:
            patterns = [self.pattern((*path, "all", i), obj, obj["name"]) for i, obj in enumerate(when["all"])]
            return Correlation(
                tuple(patterns), same, parse_duration(when["within"]), bool(when.get("ordered", False))
            )
        if "absent" in when:
            pattern = self.pattern(path, {**when, "event": when["absent"]}, "m")
            after = self.pattern((*path, "after"), when["after"], ARM_ALIAS) if "after" in when else None
            return Absence(pattern, same, parse_duration(when["for"]), after)
        pattern = self.pattern(path, when, "m")
        if "count" in when:
            return Count(pattern, int(when["count"]), same, parse_duration(when["within"]))
        return SingleEvent(pattern)

    def rule(self, i: int, obj: dict[str, Any]) -> Rule:
        path: Path_ = ("rules", i)
        return Rule(
            id=obj["id"],
            title=obj["title"],
            slo=obj["slo"],
            severity=obj["severity"],
            when=self.trigger((*path, "when"), obj["when"]),
            group_by=tuple(obj.get("group_by", DEFAULT_GROUP_BY)),
            summary=obj["summary"],
            remediation=obj["remediation"],
            location=self.doc.at(path),
            description=obj.get("description", ""),
            runbook=obj.get("runbook"),
            labels=MappingProxyType(dict(obj.get("labels") or {})),
            lifecycle=self.lifecycle(path, obj),
        )

    def lifecycle(self, path: Path_, obj: dict[str, Any]) -> Lifecycle:
        """`repeat_interval`, `flap_window` and `resolve` (after, event/if) of a rule, defaults where absent."""
        defaults = Lifecycle()
        resolve = obj.get("resolve") or {}
        after = resolve.get("after")
        clear = None
        if "event" in resolve:
            clear = self.pattern((*path, "resolve"), resolve, CLEAR_ALIAS)
        return Lifecycle(
            repeat_interval_s=parse_duration(obj.get("repeat_interval") or f"{defaults.repeat_interval_s}s"),
            flap_window_s=parse_duration(obj.get("flap_window") or f"{defaults.flap_window_s}s"),
            resolve_after_s=None if after is None else parse_duration(after),
            resolve_when=clear,
        )


def build_rulebook(doc: Document, source: str, conditions: Mapping[Path_, Expr]) -> Rulebook:
    """The frozen Rulebook of a document that `validate.validate` found no problem in, with the conditions it
    parsed (by path)."""
    data = doc.data
    builder = _Builder(doc, conditions)
    slos = {
        sid: Slo(
            id=sid,
            service=s["service"],
            sli=s["sli"],
            objective=s["objective"],
            window=s["window"],
            description=s.get("description", ""),
            indicator=build_sli(data["rulebook"], sid, s, conditions),
        )
        for sid, s in data["slos"].items()
    }
    return Rulebook(
        name=data["rulebook"],
        version=data["version"],
        description=data.get("description", ""),
        slos=MappingProxyType(slos),
        rules=tuple(builder.rule(i, obj) for i, obj in enumerate(data["rules"])),
        source=source,
        content_hash=hashlib.sha256(source.encode("utf-8")).hexdigest(),
        requires=data.get("requires"),
        location=doc.at(("rulebook",)),
    )
