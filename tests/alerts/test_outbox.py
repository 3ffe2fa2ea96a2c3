"""The outbox on both databases: rows written with the violation, suppression, claiming, ordering, dead rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import inspect, select

from gpuslo.engine.alerts import enqueue_for_match, enqueue_for_transition, load_alerts_text
from gpuslo.engine.store import outbox
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.outbox import Attempt
from gpuslo.engine.store.outbox_models import NotificationRow

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # the `record` fixture's default time

CONFIG = """\
receivers:
  - {name: pd, type: pagerduty, allow_private_network: true, allow_http: true, routing_key: "env:PD", url: "http://127.0.0.1:9/v2/enqueue"}
  - {name: hook, type: webhook, allow_private_network: true, allow_http: true, url: "http://127.0.0.1:9/hook"}
routes:
  - {name: all, receivers: [pd, hook], group_wait: 10s, repeat_interval: 1h}
inhibit:
  - {source: {rule: gpu-xid-79}, target: {rule: token-stall}, equal: [host, gpu]}
"""
URL = "https://gpuslo.example"


def config():
    return load_alerts_text(CONFIG, "alerts.yaml", {"PD": "pd-secret-routing-key"})


def enqueuer(now=T0, **kwargs):
    return lambda session, view: enqueue_for_match(session, view, config=config(), public_url=URL, now=now,
                                                   **kwargs)


def rows(database: Database):
    with database.session(readonly=True) as session:
        return outbox.list_notifications(session)


def test_the_migration_creates_the_outbox_tables(database: Database) -> None:
    tables = set(inspect(database.engine).get_table_names())
    assert {"notifications", "delivery_attempts"} <= tables


def test_notifications_are_written_with_the_violation_in_one_transaction(database: Database, record) -> None:
    ids, view = record(database, enqueue=enqueuer())
    found = rows(database)
    assert [r.id for r in found] == ids and [r.receiver for r in found] == ["pd", "hook"]
    first = found[0]
    assert (first.status, first.action, first.dedup_key, first.violation_id) == (
        "pending", "trigger", f"gpuslo-{view.id}", view.id)
    assert first.next_attempt_at == T0 + timedelta(seconds=10)  # group_wait
    assert first.payload["url"] == f"{URL}/violations/{view.id}"


def test_a_failure_after_enqueue_rolls_back_violation_and_notifications(database: Database, record) -> None:
    def explode(session, view):
        enqueuer()(session, view)
        raise RuntimeError("crash inside the transaction")

    try:
        record(database, enqueue=explode)
    except RuntimeError:
        pass
    assert rows(database) == []


def test_secrets_are_not_stored_in_outbox_rows(database: Database, record) -> None:
    record(database, enqueue=enqueuer())
    with database.engine.connect() as connection:
        dump = repr(connection.execute(select(NotificationRow.__table__)).all())
    assert "pd-secret-routing-key" not in dump and "gpuslo-" in dump


def test_inhibited_and_silenced_rows_are_recorded_as_suppressed(database: Database, record) -> None:
    _, xid = record(database, rule_id="gpu-xid-79", group_key="xid", enqueue=enqueuer())
    record(database, rule_id="token-stall", group_key="stall", enqueue=enqueuer())
    record(database, rule_id="oom-storm", group_key="oom",
           enqueue=enqueuer(silenced=lambda session, v, now: "silenced by silence 3 (maintenance)"))
    by_rule = {}
    for row in rows(database):
        by_rule.setdefault(row.payload["rule"], set()).add((row.status, row.suppressed_reason))
    assert by_rule["gpu-xid-79"] == {("pending", None)}
    ((status, reason),) = by_rule["token-stall"]
    assert status == "suppressed" and f"violation {xid.id}" in reason and "host=node-a, gpu=0" in reason
    assert by_rule["oom-storm"] == {("suppressed", "silenced by silence 3 (maintenance)")}


def test_repeats_respect_the_routes_repeat_interval(database: Database, record) -> None:
    _, view = record(database, enqueue=enqueuer())
    with database.session() as session:
        assert enqueue_for_match(session, view, config=config(), public_url=URL, now=T0 + timedelta(minutes=30),
                                 notice="repeat") == []
        later = enqueue_for_match(session, view, config=config(), public_url=URL, now=T0 + timedelta(hours=2),
                                  notice="repeat")
    assert len(later) == 2


def test_resolve_goes_to_receivers_that_got_the_trigger_and_waits_for_it(database: Database, record) -> None:
    _, view = record(database, enqueue=enqueuer())
    with database.session() as session:
        resolve_ids = enqueue_for_transition(session, view, "resolve", config=config(), public_url=URL, now=T0)
    assert len(resolve_ids) == 2
    # the triggers wait for group_wait; the resolves are due now but must not overtake them
    with database.session() as session:
        assert outbox.claim(session, T0 + timedelta(seconds=1), lease_s=60, limit=10) == []
    with database.session() as session:
        claimed = outbox.claim(session, T0 + timedelta(seconds=11), lease_s=60, limit=10)
    assert {c.action for c in claimed} == {"trigger"}
    with database.session() as session:
        for row in claimed:
            outbox.finish(session, row, Attempt("delivered", 5, 202), T0 + timedelta(seconds=12))
    with database.session() as session:
        claimed = outbox.claim(session, T0 + timedelta(seconds=12), lease_s=60, limit=10)
    assert sorted(c.id for c in claimed) == sorted(resolve_ids)


def test_claim_leases_rows_and_an_expired_lease_is_claimed_again(database: Database, record) -> None:
    record(database, enqueue=enqueuer())
    at = T0 + timedelta(seconds=10)
    with database.session() as session:
        first = outbox.claim(session, at, lease_s=30, limit=10)
    with database.session() as session:
        assert outbox.claim(session, at + timedelta(seconds=29), lease_s=30, limit=10) == []
    with database.session() as session:
        again = outbox.claim(session, at + timedelta(seconds=31), lease_s=30, limit=10)
    assert [r.id for r in again] == [r.id for r in first] and all(r.attempts == 2 for r in again)
    with database.session() as session:  # the first worker's late answer no longer owns the row
        assert outbox.finish(session, first[0], Attempt("delivered", 1, 200), at) is False
        assert outbox.finish(session, again[0], Attempt("delivered", 1, 200), at) is True


def test_dead_rows_block_later_ones_until_retried(database: Database, record) -> None:
    _, view = record(database, enqueue=enqueuer())
    with database.session() as session:
        enqueue_for_transition(session, view, "resolve", config=config(), public_url=URL, now=T0)
    at = T0 + timedelta(seconds=10)
    with database.session() as session:
        triggers = outbox.claim(session, at, lease_s=30, limit=10)
        for row in triggers:
            outbox.finish(session, row, Attempt("dead", 3, 400, "HTTP 400: bad"), at)
    with database.session() as session:
        assert outbox.claim(session, at, lease_s=30, limit=10) == []
        assert {r.id for r in outbox.list_notifications(session, status="dead")} == {r.id for r in triggers}
        assert outbox.retry_dead(session, triggers[0].id, at) is True
        assert outbox.retry_dead(session, triggers[0].id, at) is False
    with database.session() as session:
        (claimed,) = outbox.claim(session, at, lease_s=30, limit=10)
    assert claimed.id == triggers[0].id and claimed.attempts == 1
    with database.session(readonly=True) as session:
        attempts = outbox.list_attempts(session, [r.id for r in triggers])
    assert [(a.status, a.response_code) for a in attempts] == [("dead", 400), ("dead", 400)]


def test_concurrent_claims_never_share_a_row(database: Database, record) -> None:
    for i in range(4):
        record(database, group_key=f"g{i}", enqueue=enqueuer())
    at = T0 + timedelta(seconds=10)
    with database.session() as first:
        mine = outbox.claim(first, at, lease_s=30, limit=3)
        if database.dialect == "postgresql":  # SKIP LOCKED: a second worker takes the others while we hold ours
            with database.session() as second:
                theirs = outbox.claim(second, at, lease_s=30, limit=10)
            assert len(theirs) == 5 and not {r.id for r in mine} & {r.id for r in theirs}
    if database.dialect == "sqlite":  # one writer: the second claim runs after the first committed
        with database.session() as second:
            theirs = outbox.claim(second, at, lease_s=30, limit=10)
        assert len(theirs) == 5 and not {r.id for r in mine} & {r.id for r in theirs}
