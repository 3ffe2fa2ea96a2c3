"""The service's lifecycle: rule options reach stored violations, the scheduler job auto-resolves, actions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from engine_support import rulebook_text

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.services.lifecycle import LIFECYCLE_INTERVAL_S
from gpuslo.engine.store import repository, silences
from gpuslo.engine.store.read_models import ViolationFilter

RULES = """\
- id: itl-slow
  title: Inter-token latency is slow
  slo: token-latency
  severity: warning
  when: {event: token_latency, if: itl_p99_ms > 200}
  group_by: [host]
  summary: slow tokens
  remediation: look
  repeat_interval: 1h
  flap_window: 2m
  resolve:
    after: 10m
"""


def _event(i: int) -> dict:
    return {"id": f"itl-{i}", "kind": "token_latency", "time": f"2026-11-29T12:00:0{i}Z", "host": "node-7",
            "attrs": {"itl_p99_ms": 450}}


def test_rule_options_reach_the_violation_and_the_job_resolves_it(database, tmp_path: Path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "t.yaml").write_text(rulebook_text(RULES))
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules))
    try:
        job = core.scheduler.get_job("lifecycle")
        assert core.scheduler.running and job.trigger.interval == timedelta(seconds=LIFECYCLE_INTERVAL_S)
        assert core.rulebooks.quiet_by_rule() == {"itl-slow": 600.0}
        core.ingest([_event(1), _event(2)])
        assert core.wait_idle()
        with core.database.session(readonly=True) as session:
            (violation,) = repository.list_violations(session, ViolationFilter()).items
        assert (violation.repeat_interval_s, violation.flap_window_s, violation.resolve_after_s) == (3600, 120, 600)
        assert core.lifecycle.run_lifecycle(now=violation.quiet_since + timedelta(seconds=599)) == []
        (resolved,) = core.lifecycle.run_lifecycle(now=violation.quiet_since + timedelta(seconds=600))
        assert (resolved.id, resolved.status, resolved.notify) == (violation.id, "resolved", "resolve")
        reopened = core.lifecycle.reopen(violation.id, actor="carol", comment="not fixed", source="192.0.2.1")
        assert (reopened.status, reopened.resolved_at, reopened.notify) == ("open", None, "trigger")
        assert reopened.quiet_since > violation.quiet_since  # a human reopen restarts the quiet period
        with core.database.session(readonly=True) as session:
            # The job ran at a simulated later time, so select the reopen rather than take the last line.
            (last,) = [h for h in repository.get_violation(session, violation.id).history if h.action == "reopened"]
        assert (last.action, last.actor, last.source, last.comment) == ("reopened", "carol", "192.0.2.1", "not fixed")
    finally:
        core.close()
    assert not core.scheduler.running


def test_silences_through_the_core(database, tmp_path: Path):
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=tmp_path))
    try:
        now = datetime.now(UTC)
        silence = core.lifecycle.create_silence(matchers={"host": "node-7"}, starts_at=now - timedelta(hours=2),
                                      ends_at=now + timedelta(seconds=1), author="dave", comment="reboot")
        core.lifecycle.run_lifecycle(now=now + timedelta(seconds=2))  # the job expires ended silences
        with core.database.session(readonly=True) as session:
            assert silences.get_silence(session, silence.id).expired_by == "schedule"
    finally:
        core.close()
