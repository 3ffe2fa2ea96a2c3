"""Frozen results of a rule match: the explanation and the match that becomes (or folds into) a violation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gpuslo.engine.events import Event
from gpuslo.engine.once import deferred_text

STATUSES: tuple[str, ...] = ("open", "acknowledged", "resolved")


@dataclass(frozen=True)
class ConditionResult:
    """One condition of the rule with what was observed: `fragmentation_ratio = 0.71 > 0.65`."""

    text: str
    field: str
    observed: Any
    holds: bool


@dataclass(frozen=True)
class ChainLink:
    """One step of the causal chain, in event-time order; `delay_s` is the time since the previous link."""

    event_id: str
    kind: str
    time: datetime
    text: str
    delay_s: float | None = None


@dataclass(frozen=True)
class Explanation:
    """Why a rule fired: each condition with its observed value, the evidence and the causal chain."""

    conditions: tuple[ConditionResult, ...]
    evidence: tuple[Event, ...]
    chain: tuple[ChainLink, ...]
    # The stall's split across layers (engine.attribution.stall_attribution), when a token_stall in the evidence
    # carries one: shown on the violation page as a stacked bar with the evidence of each share.
    attribution: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self._dict()
        if self.attribution is not None:
            out["attribution"] = dict(self.attribution)
        return out

    def _dict(self) -> dict[str, Any]:
        return {
            "conditions": [
                {"text": c.text, "field": c.field, "observed": c.observed, "holds": c.holds}
                for c in self.conditions
            ],
            "evidence": [e.id for e in self.evidence],
            "chain": [
                {"event_id": c.event_id, "kind": c.kind, "time": c.time.isoformat(), "text": c.text,
                 "delay_s": c.delay_s}
                for c in self.chain
            ],
        }


@dataclass(frozen=True)
class Match:
    """A rule fired for a group key; the store folds matches of one rule and key into one violation.

    The last three fields carry the rule's lifecycle options (see gpuslo.engine.transitions).
    """

    rule_id: str
    rule_title: str
    rulebook: str
    rulebook_version: str
    rulebook_hash: str
    slo: str
    slo_objective: str
    severity: str
    group_key: str
    group: Mapping[str, Any]
    if TYPE_CHECKING:
        summary: str
    else:
        summary: str = deferred_text()  # the text, or a render called at its first read (once.deferred)
    remediation: str
    runbook: str | None
    explanation: Explanation
    seen_at: datetime
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    repeat_interval_s: float = 4 * 3600.0
    flap_window_s: float = 600.0
    resolve_after_s: float | None = None


@dataclass(frozen=True)
class Clear:
    """An event met a rule's `resolve: {event, if}`: the rule's unresolved violation of `group_key` resolves."""

    rule_id: str
    rulebook: str
    group_key: str
    event: Event
