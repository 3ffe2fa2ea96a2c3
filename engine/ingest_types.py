"""Frozen results of ingesting a batch of raw events: one verdict per item, in input order."""

from __future__ import annotations

from dataclasses import dataclass

from gpuslo.engine.errors import FieldProblem

ACCEPTED = "accepted"  # new, stored, queued for the engine
DUPLICATE = "duplicate"  # same id and same body as before: nothing changed
CONFLICT = "conflict"  # same id as before with another body: refused
REJECTED = "rejected"  # failed validation: refused


@dataclass(frozen=True)
class IngestResult:
    index: int
    id: str | None
    status: str
    problems: tuple[FieldProblem, ...] = ()


@dataclass(frozen=True)
class IngestReport:
    results: tuple[IngestResult, ...]

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)
