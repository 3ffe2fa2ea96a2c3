"""Every shipped rulebook loads clean and covers every event kind with actionable text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuslo.engine.events import KINDS
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import SingleEvent

RULES = Path(__file__).resolve().parents[2] / "rules"


def test_shipped_rulebooks_load_clean() -> None:
    books, problems = load_directory(RULES)
    assert [str(p) for p in problems] == []
    assert {b.name for b in books} == {"memory", "cuda", "nccl", "hardware", "latency", "probes", "external",
                                       "stalls", "rootcause"}


def test_every_event_kind_has_a_single_event_rule() -> None:
    books, _ = load_directory(RULES)
    covered = {r.when.pattern.kind for b in books for r in b.rules if isinstance(r.when, SingleEvent)}
    assert covered == set(KINDS)


def test_every_shipped_rule_is_documented() -> None:
    books, _ = load_directory(RULES)
    for book in books:
        assert book.description and book.slos
        for rule in book.rules:
            assert len(rule.description) > 40, rule.id
            assert len(rule.remediation.splitlines()) >= 2, rule.id
            assert "{{" in rule.summary, rule.id
            assert rule.location.file and rule.location.line


def test_thresholds_follow_design() -> None:
    books, _ = load_directory(RULES)
    rules = {r.id: r for b in books for r in b.rules}
    assert str(rules["fragmentation-high"].when.pattern.condition) == "fragmentation_ratio > 0.65"
    stall = rules["token-stall"].when.pattern.condition
    assert stall.right.value == 200.0 and stall.right.text == "200ms"
    assert rules["ttft-high"].when.pattern.condition.right.value == 2000.0
    assert rules["xid-fallen-off-bus"].severity == "critical"
    assert rules["xid-fallen-off-bus"].when.pattern.condition.right.value == (79,)


def test_models_are_frozen() -> None:
    books, _ = load_directory(RULES)
    book = books[0]
    rule = book.rules[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        book.name = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.when.pattern.kind = "x"  # type: ignore[misc,union-attr]
    with pytest.raises(TypeError):
        book.slos["new"] = book.slos[next(iter(book.slos))]  # type: ignore[index]
    with pytest.raises(TypeError):
        rule.labels["x"] = "y"  # type: ignore[index]
    assert len(book.content_hash) == 64
