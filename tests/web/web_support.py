"""Helpers of the web tests: FakeCore (unit tests of request parsing only), seeding, app settings."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy import text

from gpuslo.engine.config import Settings
from gpuslo.engine.engine_health import EngineHealth
from gpuslo.engine.errors import EventError, FieldProblem
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.ingest_types import ACCEPTED, CONFLICT, DUPLICATE, REJECTED, IngestReport, IngestResult
from gpuslo.engine.metrics_http import HttpMetrics
from gpuslo.engine.services.accounts import Accounts
from gpuslo.engine.store import repository, violations
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match


@dataclass
class FakeCore:
    """Validates with the real parse_event and remembers ids and body hashes; stores nothing else."""

    settings: Settings
    stored: dict[str, str] = field(default_factory=dict)
    calls: list[list[object]] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    rejected_early: list[FieldProblem] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.database = Database("sqlite:///:memory:")
        self.database.upgrade()  # the access layer reads users and tokens (none: bootstrap mode on loopback)
        self.accounts = Accounts(self.database)
        self.rulebooks = SimpleNamespace(status=lambda: SimpleNamespace(
            rulebooks=(), problems=(), loaded_at=datetime(2025, 1, 1, tzinfo=UTC)))
        registry = CollectorRegistry()
        self.metrics = SimpleNamespace(
            registry=registry,
            engine_queue_depth=Gauge("gpuslo_engine_queue_depth", "queued events", registry=registry),
            http=HttpMetrics(registry),
            exposed=lambda: registry,
        )

    def ingest(self, items: Sequence[object]) -> IngestReport:
        self.calls.append(list(items))
        results = []
        for index, item in enumerate(items):
            try:
                event = parse_event(item)
            except EventError as exc:
                item_id = item.get("id") if isinstance(item, dict) else None
                results.append(IngestResult(index, item_id if isinstance(item_id, str) else None, REJECTED,
                                            exc.problems))
                continue
            known = self.stored.get(event.id)
            if known is None:
                self.stored[event.id] = event.body_hash()
                results.append(IngestResult(index, event.id, ACCEPTED))
            elif known == event.body_hash():
                results.append(IngestResult(index, event.id, DUPLICATE))
            else:
                problem = FieldProblem("id", "already stored with another body")
                results.append(IngestResult(index, event.id, CONFLICT, (problem,)))
        return IngestReport(tuple(results))

    def ping_database(self) -> bool:
        with self.database.session() as session:
            session.execute(text("SELECT 1"))
        return True

    def engine_health(self) -> EngineHealth:
        return EngineHealth(True)

    def ingest_refused(self, status: int) -> None:
        self.refused.append(status)

    def ingest_rejected(self, problem: FieldProblem) -> None:
        self.rejected_early.append(problem)

    def close(self) -> None:
        if isinstance(self.database, Database):
            self.database.dispose()


# ---- real apps on Gpuslo ------------------------------------------------------------------------------

RULES_DIR = Path(__file__).resolve().parents[2] / "rules"
SEED_TIME = datetime(2025, 1, 1, tzinfo=UTC)


def seed_violation(database: Database, events: Sequence[Event], **overrides: Any) -> ViolationView:
    """Store `events` and one violation explained by them, straight through the repository."""
    first = events[0]
    fields: dict[str, Any] = {
        "rule_id": "frag-high", "rule_title": "Allocator fragmentation is high", "rulebook": "memory",
        "rulebook_version": "1.2.0", "rulebook_hash": "ab12cd34ef56" * 4, "slo": "serving-availability",
        "slo_objective": "99.9% of requests succeed over 30d", "severity": "warning",
        "group_key": f"host={first.host},gpu={first.gpu}", "group": {"host": first.host, "gpu": first.gpu},
        "summary": f"fragmentation {first.get('fragmentation_ratio')} on {first.host}",
        "remediation": "Restart the worker.\nThen set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "runbook": "https://runbooks.example/frag",
        "explanation": Explanation(
            conditions=(ConditionResult("fragmentation_ratio > 0.65", "fragmentation_ratio",
                                        first.get("fragmentation_ratio"), True),),
            evidence=tuple(events),
            chain=tuple(ChainLink(e.id, e.kind, e.time, f"{e.kind} on {e.host}") for e in events),
        ),
        "seen_at": first.time,
    }
    fields.update(overrides)
    with database.session() as session:
        repository.store_events(session, list(events), now=SEED_TIME)
        return violations.record_match(session, Match(**fields), now=SEED_TIME)


def app_settings(database: Database, rules_dir: Path, **overrides: Any) -> Settings:
    """Settings of a real app on the test database, with small limits the tests can reach."""
    values: dict[str, Any] = {"database_url": database.url, "rules_dir": rules_dir,
                              "max_body_bytes": 64 * 1024, "max_events_per_request": 20, "page_size": 2}
    values.update(overrides)
    return Settings(**values)


_SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.DOTALL | re.IGNORECASE)


def assert_no_inline_code(html: str) -> None:
    """What the CSP (default-src 'self') would refuse is not in the page: every <script> is a static file with no
    body or a JSON data block (never run), and there is no style attribute or <style> element."""
    for attributes, body in _SCRIPT.findall(html):
        if 'type="application/json"' in attributes:
            assert "</" not in body, body[:200]
            continue
        assert re.fullmatch(r'\s+src="/static/[\w./-]+\.js"( defer)?\s*', attributes), attributes
        assert body == "", body[:200]
    assert len(_SCRIPT.findall(html)) == html.lower().count("<script")
    assert "style=" not in html and "<style" not in html
