"""Fixtures for the store tests: a Match factory over stored events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

import pytest

from gpuslo.engine.events import Event
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match


@pytest.fixture
def make_match() -> Callable[..., Match]:
    """`make_match(evidence, seen_at=..., **overrides)`: rule `oom-storm` grouped by host and GPU."""

    def factory(evidence: Sequence[Event], seen_at: datetime | None = None, **overrides: Any) -> Match:
        latest = max(evidence, key=lambda e: e.time)
        explanation = Explanation(
            conditions=(ConditionResult("requested_bytes > 1GiB", "requested_bytes", 2 * 1024**3, True),),
            evidence=tuple(evidence),
            chain=tuple(ChainLink(e.id, e.kind, e.time, f"{e.kind} on {e.host}") for e in evidence),
        )
        fields: dict[str, Any] = {
            "rule_id": "oom-storm", "rule_title": "OOM storm", "rulebook": "memory", "rulebook_version": "1",
            "rulebook_hash": "a" * 64, "slo": "availability", "slo_objective": "99.9% of requests succeed",
            "severity": "critical", "group_key": f"host={latest.host},gpu={latest.gpu}",
            "group": MappingProxyType({"host": latest.host, "gpu": latest.gpu}),
            "summary": f"{len(evidence)} OOMs on {latest.host}", "remediation": "lower the batch size",
            "runbook": "https://runbooks.example/oom", "explanation": explanation,
            "seen_at": seen_at or latest.time, "labels": MappingProxyType({"team": "serving"}),
        }
        fields.update(overrides)
        return Match(**fields)

    return factory
