"""A Hypothesis stateful model of the incident lifecycle and the notification outbox (test_outbox_model.py).

The machine drives the real store (record_match, acknowledge, resolve, reopen, silences, enqueue, retry of a
dead notification, receiver re-enable) and the real DeliveryWorker, whose sender is scripted per round (ok,
fail, 410 Gone, timeout) and plays a PagerDuty that opens one incident per dedup key; a worker crash between
claim and send is a claim whose lease lapses. After every step the database must equal the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import select

from gpuslo.engine.alerts import DeliveryPolicy, DeliveryWorker, enqueue_for_change, load_alerts_text
from gpuslo.engine.alerts.transport import Outcome
from gpuslo.engine.events import parse_event
from gpuslo.engine.store import lifecycle, notifications, outbox, receivers, repository, silences, violations
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import Base, ViolationRow
from gpuslo.engine.store.outbox_models import NotificationRow
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match

KEYS = ("k0", "k1", "k2")
RECEIVERS = ("pd", "hook")
REPEAT_S = 3600.0
STEP_S = 5.0  # every step moves the clock: retries (at most 2 s of back-off) are due again at the next step
POLICY = DeliveryPolicy(timeout_s=1.0, per_receiver=50, lease_s=10.0, base_delay_s=2.0, max_delay_s=2.0,
                        max_attempts=3)
ALERTS = ('receivers:\n'
          '  - {name: pd, type: pagerduty, routing_key: "env:PD", url: "https://events.pagerduty.example/v2/enqueue"}\n'
          '  - {name: hook, type: webhook, url: "https://hooks.example/gpuslo"}\n'
          'routes:\n  - {receivers: [pd, hook], repeat_interval: 1h}\n')
OUTCOMES = {
    "ok": Outcome("delivered", 3, 202, reason="ok"),
    "fail": Outcome("retry", 3, 503, "HTTP 503: down", reason="http_5xx"),
    "hang": Outcome("retry", 1000, error="timeout: ReadTimeout", reason="timeout"),
    "gone": Outcome("gone", 3, 410, "HTTP 410: gone", reason="http_410"),
}


@dataclass
class Row:
    id: int
    violation: int
    receiver: str
    action: str
    status: str
    created_at: datetime
    attempts: int = 0
    lease_until: datetime | None = None


@dataclass
class Violation:
    id: int
    key: str
    status: str
    last_notified: datetime
    always_silenced: bool  # silenced at creation and at every change since: it must page nobody


@dataclass
class PagerDuty:
    """A PagerDuty Events API: one incident per dedup key while it is open; trigger on an open one dedupes."""

    incidents: dict[str, list[str]] = field(default_factory=dict)  # dedup key → states of its incidents, in order
    seen: list[tuple[str, str]] = field(default_factory=list)

    def receive(self, dedup_key: str, action: str) -> None:
        self.seen.append((dedup_key, action))
        states = self.incidents.setdefault(dedup_key, [])
        open_now = bool(states) and states[-1] != "resolved"
        if action == "trigger" and not open_now:
            states.append("triggered")
        elif action == "acknowledge" and open_now:
            states[-1] = "acknowledged"
        elif action == "resolve" and open_now:
            states[-1] = "resolved"


def expected_pagerduty(actions: list[str]) -> str | None:
    """What PagerDuty shows after these actions arrive in order (None: it never heard of the key)."""
    world = PagerDuty()
    for action in actions:
        world.receive("k", action)
    states = world.incidents.get("k")
    return states[-1] if states else None


def _match(key: str, event_id: str, at: datetime) -> tuple[Any, Match]:
    event = parse_event({"id": event_id, "kind": "cuda_oom", "time": at.isoformat(), "host": f"node-{key}",
                         "gpu": 0, "attrs": {"api": "cudaMalloc", "requested_bytes": 2 * 1024**3,
                                             "free_bytes": 1024**3}})
    explanation = Explanation(conditions=(ConditionResult("requested_bytes > 1GiB", "requested_bytes",
                                                          2 * 1024**3, True),),
                              evidence=(event,), chain=(ChainLink(event.id, event.kind, event.time, "oom"),))
    return event, Match(
        rule_id="oom-storm", rule_title="OOM storm", rulebook="memory", rulebook_version="1",
        rulebook_hash="a" * 64, slo="availability", slo_objective="99.9%", severity="critical",
        group_key=f"host=node-{key}", group=MappingProxyType({"host": f"node-{key}"}), summary=f"OOMs on {key}",
        remediation="lower the batch size", runbook=None, explanation=explanation, seen_at=at,
        repeat_interval_s=REPEAT_S, flap_window_s=0.0)


CONFIG = load_alerts_text(ALERTS, "alerts.yaml", {"PD": "pd-routing-key-0123456789"},
                          resolver=lambda host, port: ["93.184.215.14"])  # a public address: no DNS in the model


def empty(database: Database) -> None:
    """Delete every row the machine writes (fast: the tables hold a few dozen rows)."""
    with database.engine.begin() as connection:
        for table in reversed(Base.metadata.sorted_tables):
            if table.name != "audit_log":  # the machine writes none, and the log's guard refuses deletes
                connection.execute(table.delete())


class OutboxMachine(RuleBasedStateMachine):
    """One database and one DeliveryWorker serve every example (`bind`); each example starts from empty."""

    database: Database
    worker: DeliveryWorker
    machine: OutboxMachine | None = None
    examples = 0  # machines run (one per example), and steps taken: the test reports and checks them
    steps = 0

    @classmethod
    def bind(cls, database: Database) -> DeliveryWorker:
        cls.database = database
        cls.worker = DeliveryWorker(database, CONFIG, POLICY, clock=lambda: cls.machine.now,  # type: ignore[union-attr]
                                    sender=lambda c, r, n: cls.machine._send(c, r, n))  # type: ignore[union-attr]
        return cls.worker

    def __init__(self) -> None:
        super().__init__()
        empty(self.database)
        type(self).machine = self
        type(self).examples += 1
        self.now = datetime(2026, 6, 1, tzinfo=UTC)
        self.config = CONFIG
        self.pagerduty, self.hook_keys, self.round_outcome = PagerDuty(), [], "ok"
        self.violations: dict[int, Violation] = {}
        self.current: dict[str, int] = {}  # key → its latest violation
        self.rows: dict[int, Row] = {}
        self.silences: dict[int, str] = {}  # active silence id → key
        self.disabled: set[str] = set()
        self.events = 0

    def teardown(self) -> None:
        self._drain_and_compare_with_pagerduty()

    # ---- the scripted receivers ----

    def _send(self, _client: Any, request: Any, _now: datetime) -> Outcome:
        outcome = OUTCOMES[self.round_outcome]
        body = json.loads(request.body)
        if "routing_key" in body:
            if outcome.status == "delivered":
                self.pagerduty.receive(body["dedup_key"], body["event_action"])
        else:
            self.hook_keys.append(body["data"]["dedup_key"])
        return outcome

    # ---- helpers ----

    def _tick(self) -> None:
        self.now += timedelta(seconds=STEP_S)
        type(self).steps += 1

    def _silenced(self, key: str) -> bool:
        return key in self.silences.values()

    def _new_rows(self, session: Any, violation: Violation, expected: list[tuple[str, str, str]]) -> None:
        """The rows this change wrote must be `expected` (receiver, action, status); remember them."""
        known = max(self.rows, default=0)
        made = list(session.scalars(select(NotificationRow).where(NotificationRow.id > known)
                                    .order_by(NotificationRow.id)))
        assert sorted((r.receiver, r.action, r.status) for r in made) == sorted(expected), (made, expected)
        for r in made:
            assert r.violation_id == violation.id
            self.rows[r.id] = Row(r.id, violation.id, r.receiver, r.action, r.status, self.now)

    def _triggered(self, violation: Violation) -> list[str]:
        return sorted({r.receiver for r in self.rows.values() if r.violation == violation.id
                       and r.action == "trigger" and r.status != "suppressed"})

    def _trigger_rows(self, violation: Violation, repeat: bool) -> list[tuple[str, str, str]]:
        silenced = self._silenced(violation.key)
        status = "suppressed" if silenced else "pending"
        expected = []
        for receiver in RECEIVERS:
            if repeat:
                allowed = {"pending", "delivering", "delivered", "dead"} | ({"suppressed"} if silenced else set())
                last = max((r.created_at for r in self.rows.values() if r.violation == violation.id
                            and r.receiver == receiver and r.action == "trigger" and r.status in allowed),
                           default=None)
                if last is not None and (self.now - last).total_seconds() < REPEAT_S:
                    continue
            expected.append((receiver, "trigger", status))
        return expected

    def _transition_rows(self, violation: Violation, action: str) -> list[tuple[str, str, str]]:
        return [(receiver, action, "pending") for receiver in self._triggered(violation)]

    # ---- the lifecycle ----

    @rule(key=st.sampled_from(KEYS))
    def match(self, key: str) -> None:
        """A rule matches for `key`: a new violation, or a fold (a repeat after repeat_interval)."""
        self._tick()
        self.events += 1
        event, match = _match(key, f"ev-{self.events}", self.now)
        known = self.violations.get(self.current.get(key, -1))
        with self.database.session() as session:
            repository.store_events(session, [event], now=self.now)
            view = violations.record_match(session, match, now=self.now)
            enqueue_for_change(session, view, config=self.config, public_url="https://gpuslo.example", now=self.now)
            if known is None or known.status == "resolved":
                assert view.id not in self.violations and view.status == "open"
                violation = Violation(view.id, key, "open", self.now, self._silenced(key))
                self.violations[view.id], self.current[key] = violation, view.id
                self._new_rows(session, violation, self._trigger_rows(violation, repeat=False))
                return
            assert view.id == known.id
            repeat = known.status == "open" and (self.now - known.last_notified).total_seconds() >= REPEAT_S
            if repeat:
                known.last_notified = self.now
                known.always_silenced &= self._silenced(key)
            self._new_rows(session, known, self._trigger_rows(known, repeat=True) if repeat else [])

    @rule()
    def an_hour_passes(self) -> None:
        self.now += timedelta(seconds=REPEAT_S + 1)

    def _human(self, key: str, action: str, allowed: tuple[str, ...]) -> None:
        self._tick()
        violation = self.violations.get(self.current.get(key, -1))
        if violation is None or violation.status not in allowed:
            return
        change = {"acknowledge": lifecycle.acknowledge, "resolve": lifecycle.resolve,
                  "reopen": lifecycle.reopen}[action]
        with self.database.session() as session:
            view = change(session, violation.id, actor="model", now=self.now)
            enqueue_for_change(session, view, config=self.config, public_url="https://gpuslo.example", now=self.now)
            if action == "reopen":
                violation.status, violation.last_notified = "open", self.now
                violation.always_silenced &= self._silenced(key)
                self._new_rows(session, violation, self._trigger_rows(violation, repeat=False))
            else:
                violation.status = "acknowledged" if action == "acknowledge" else "resolved"
                self._new_rows(session, violation, self._transition_rows(violation, action))

    @rule(key=st.sampled_from(KEYS))
    def acknowledge(self, key: str) -> None:
        self._human(key, "acknowledge", ("open",))

    @rule(key=st.sampled_from(KEYS))
    def resolve(self, key: str) -> None:
        self._human(key, "resolve", ("open", "acknowledged"))

    @rule(key=st.sampled_from(KEYS))
    def reopen(self, key: str) -> None:
        self._human(key, "reopen", ("resolved",))

    @rule(key=st.sampled_from(KEYS))
    def silence(self, key: str) -> None:
        self._tick()
        with self.database.session() as session:
            made = silences.create_silence(session, matchers={"host": f"node-{key}"}, starts_at=self.now,
                                           ends_at=self.now + timedelta(days=30), author="model",
                                           comment="maintenance", now=self.now)
        self.silences[made.id] = key

    @precondition(lambda self: self.silences)
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        self._tick()
        silence_id = data.draw(st.sampled_from(sorted(self.silences)))
        with self.database.session() as session:
            silences.expire_silence(session, silence_id, actor="model", now=self.now)
        del self.silences[silence_id]

    # ---- delivery ----

    def _claimable(self, receiver: str) -> list[Row]:
        unfinished = ("pending", "delivering", "dead")
        mine = sorted((r for r in self.rows.values() if r.receiver == receiver), key=lambda r: r.id)
        found, blocked = [], set()
        for row in mine:
            waiting = row.status == "pending" or (row.status == "delivering" and row.lease_until is not None
                                                  and row.lease_until < self.now)
            if waiting and row.violation not in blocked:
                found.append(row)
            if row.status in unfinished:
                blocked.add(row.violation)
        return found

    @rule(outcome=st.sampled_from(sorted(OUTCOMES)))
    def deliver(self, outcome: str) -> None:
        """One delivery round in which every receiver answers `outcome`."""
        self._tick()
        self.round_outcome = outcome
        sent = {r: self._claimable(r) for r in RECEIVERS if r not in self.disabled}
        type(self).worker.run_once()
        for receiver, rows in sent.items():
            for row in rows:
                row.attempts += 1
                row.lease_until = None
                if outcome == "ok":
                    row.status = "delivered"
                elif outcome == "gone":
                    row.status = "pending"
                    self.disabled.add(receiver)
                else:
                    row.status = "dead" if row.attempts >= POLICY.max_attempts else "pending"

    @rule(receiver=st.sampled_from(RECEIVERS))
    def crash_after_claim(self, receiver: str) -> None:
        """A worker claims this receiver's rows and dies before sending: they go again after the lease."""
        self._tick()
        expected = [] if receiver in self.disabled else self._claimable(receiver)
        with self.database.session() as session:
            claimed = outbox.claim(session, self.now, lease_s=POLICY.lease_s, limit=50, receiver=receiver)
        assert sorted(c.id for c in claimed) == [r.id for r in expected]
        for row in expected:
            row.status, row.attempts = "delivering", row.attempts + 1
            row.lease_until = self.now + timedelta(seconds=POLICY.lease_s)

    @precondition(lambda self: any(r.status == "dead" for r in self.rows.values()))
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        self._tick()
        row = self.rows[data.draw(st.sampled_from(sorted(i for i, r in self.rows.items() if r.status == "dead")))]
        with self.database.session() as session:
            notifications.retry(session, row.id, self.now, actor="model")
        row.status, row.attempts = "pending", 0

    @precondition(lambda self: self.disabled)
    @rule(data=st.data())
    def enable(self, data: st.DataObject) -> None:
        self._tick()
        receiver = data.draw(st.sampled_from(sorted(self.disabled)))
        with self.database.session() as session:
            receivers.enable(session, receiver)
        self.disabled.discard(receiver)

    # ---- what must hold after every step ----

    @invariant()
    def database_equals_model(self) -> None:
        n = NotificationRow
        with self.database.session(readonly=True) as session:
            stored = {row[0]: tuple(row[1:]) for row in session.execute(
                select(n.id, n.violation_id, n.receiver, n.action, n.status, n.attempts))}
            statuses = dict(session.execute(select(ViolationRow.id, ViolationRow.status)).all())
            disabled = receivers.disabled(session)
        assert stored == {r.id: (r.violation, r.receiver, r.action, r.status, r.attempts)
                          for r in self.rows.values()}
        assert statuses == {v.id: v.status for v in self.violations.values()}
        assert disabled == self.disabled

    @invariant()
    def one_open_pagerduty_incident_per_dedup_key(self) -> None:
        for states in self.pagerduty.incidents.values():
            assert sum(1 for s in states if s != "resolved") <= 1
        for key, action in self.pagerduty.seen:  # never an acknowledge or resolve before the trigger
            assert action == "trigger" or self.pagerduty.incidents.get(key)

    @invariant()
    def silenced_keys_page_nobody(self) -> None:
        quiet = {f"gpuslo-{v.id}" for v in self.violations.values() if v.always_silenced}
        heard = {key for key, _ in self.pagerduty.seen} | set(self.hook_keys)
        assert not quiet & heard
        for row in self.rows.values():
            if self.violations[row.violation].always_silenced:
                assert row.status == "suppressed"

    def _drain_and_compare_with_pagerduty(self) -> None:
        """Heal everything, deliver until nothing waits; PagerDuty then shows what the rows said, in order."""
        for receiver in sorted(self.disabled):
            self._enable_now(receiver)
        for _ in range(50):
            for row in [r for r in self.rows.values() if r.status == "dead"]:
                with self.database.session() as session:
                    notifications.retry(session, row.id, self.now, actor="model")
                row.status, row.attempts = "pending", 0
            if not any(r.status in ("pending", "delivering") for r in self.rows.values()):
                break
            self.now += timedelta(seconds=POLICY.lease_s + 1)
            self._deliver_ok()
        self.database_equals_model()
        for violation in self.violations.values():
            actions = [r.action for r in sorted(self.rows.values(), key=lambda r: r.id)
                       if r.violation == violation.id and r.receiver == "pd" and r.status != "suppressed"]
            states = self.pagerduty.incidents.get(f"gpuslo-{violation.id}")
            assert (states[-1] if states else None) == expected_pagerduty(actions)

    def _enable_now(self, receiver: str) -> None:
        with self.database.session() as session:
            receivers.enable(session, receiver)
        self.disabled.discard(receiver)

    def _deliver_ok(self) -> None:
        self.round_outcome = "ok"
        sent = {r: self._claimable(r) for r in RECEIVERS if r not in self.disabled}
        type(self).worker.run_once()
        for rows in sent.values():
            for row in rows:
                row.attempts, row.status, row.lease_until = row.attempts + 1, "delivered", None

