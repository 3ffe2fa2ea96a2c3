"""Stored SLI buckets on SQLite and PostgreSQL: the API's figures equal brute force over the raw events, each
event counts once (duplicates, re-sent batches, backfill), and bad requests are charged to the violations open
for them exactly as a brute-force pass over the events and violations says."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from slo_support import RULEBOOK as RULEBOOK_TEXT
from slo_support import T0, brute_counts, fragmentation, measured_rulebook, request
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite

from gpuslo.engine.events import format_time, parse_event
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.slo import report, store
from gpuslo.engine.slo.attribution import OpenViolation, covers
from gpuslo.engine.slo.backfill import backfill
from gpuslo.engine.slo.model import LOOKBACKS
from gpuslo.engine.slo.store import record_sli
from gpuslo.engine.store import repository, violations
from gpuslo.engine.store.models import SloBucketRow, SloCauseRow, SloDayRow, SloHourRow, ViolationRow

RULEBOOK = measured_rulebook()
SLI = RULEBOOK.slos["itl"].indicator


def _run(database, events, evaluator=None, batch_size=50):
    """Store the events, evaluate them in batches and record each batch as the service does."""
    evaluator = evaluator or RuleEvaluator(lateness_s=1e9)
    evaluator.load([RULEBOOK])
    with database.session() as session:
        repository.store_events(session, events)
    burn = [SLI.alert_rule_id(a) for a in SLI.policy]
    for i in range(0, len(events), batch_size):
        result = evaluator.evaluate_batch(events[i:i + batch_size])
        with database.session() as session:
            violations.record(session, result.matches, now=T0)
            record_sli(session, result.sli, burn)
            repository.mark_processed(session, [e.id for e in result.events], T0)
    return evaluator


def _random_stream(seed, minutes=3 * 1440 + 600, count=400):
    rng = random.Random(seed)
    events = [request(rng.uniform(0, minutes * 60), rng.random() < 0.9, rng.choice(["/v1/chat", "/v1/embed"]),
                      gpu=rng.choice([0, 1, None])) for _ in range(count)]
    return sorted(events, key=lambda e: e.time)


@pytest.mark.parametrize("seed", [1, 2])
def test_api_figures_equal_brute_force(database, seed):
    events = _random_stream(seed)
    _run(database, events)
    with database.session(readonly=True) as session:
        groups = report.slo_groups(session, [SLI])
    assert {g.group["endpoint"] for g in groups} == {"/v1/chat", "/v1/embed"}
    now = max(int(e.timestamp // 60) for e in events)
    for group in groups:
        endpoint = group.group["endpoint"]
        assert group.as_of_minute == now
        assert (group.good, group.total) == brute_counts(events, now, 28 * 1440, endpoint)
        for name, seconds in LOOKBACKS:
            assert group.lookbacks[name] == brute_counts(events, now, seconds // 60, endpoint), name
        good, total = group.good, group.total
        assert group.to_dict()["error_budget_remaining"] == round(1 - (total - good) / (0.01 * total), 4)


def test_a_duplicate_or_resent_event_counts_once(database):
    """Ingest drops a duplicate id, and the runtime never evaluates an event twice; a re-sent batch is a no-op."""
    events = [request(i * 30, i % 3 != 0) for i in range(40)]
    evaluator = _run(database, events)
    with database.session() as session:
        statuses = repository.store_events(session, events[:5])  # sent again
    assert set(statuses) == {"duplicate"}
    with database.session(readonly=True) as session:
        (group,) = report.slo_groups(session, [SLI])
    assert (group.good, group.total) == brute_counts(events, group.as_of_minute, 28 * 1440)
    assert evaluator is not None


def test_late_events_land_in_their_own_minutes(database):
    on_time = [request(3600 + i * 10, True) for i in range(60)]
    late = [request(60 + i, False) for i in range(5)]  # an hour late, after the on-time ones
    _run(database, on_time + late)
    with database.session(readonly=True) as session:
        (group,) = report.slo_groups(session, [SLI])
        minutes = dict(session.execute(select(SloBucketRow.minute, SloBucketRow.total)).all())
    assert minutes[int(late[0].timestamp // 60)] == 5
    assert group.lookbacks["1h"] == brute_counts(on_time + late, group.as_of_minute, 60)
    assert (group.good, group.total) == (60, 65)


def _brute_causes(events, violations):
    """(violation id → bad requests charged, unattributed bad requests) straight from the definitions."""
    charged, unattributed = {}, 0
    for event in events:
        if event.kind != "token_latency" or event.attrs["itl_max_ms"] < 200:
            continue
        hits = [v.id for v in violations if covers(v, "itl", event)]
        for violation_id in hits:
            charged[violation_id] = charged.get(violation_id, 0) + 1
        unattributed += not hits
    return charged, unattributed


def test_budget_by_cause_equals_brute_force(database):
    """Fragmentation on node-1 GPU 0 and node-2 GPU 1 opens violations; bad requests on those GPUs (or with no
    GPU, on those hosts) after they opened are charged to them, the rest is unattributed."""
    rng = random.Random(7)
    events = [fragmentation(600, "node-1", 0), fragmentation(1800, "node-2", 1)]
    for _ in range(300):
        events.append(request(rng.uniform(0, 3600), rng.random() < 0.7, host=rng.choice(["node-1", "node-2"]),
                              gpu=rng.choice([0, 1, None])))
    events.sort(key=lambda e: e.time)
    _run(database, events, batch_size=25)
    with database.session(readonly=True) as session:
        rows = session.execute(select(ViolationRow)).scalars().all()
        violations = [OpenViolation(r.id, r.rule_id, r.slo, r.host, r.gpu, r.group, r.first_seen, r.resolved_at)
                      for r in rows if r.rule_id == "frag"]
        (group,) = report.slo_groups(session, [SLI])
        detail = report.causes_of(session, group)
    charged, unattributed = _brute_causes(events, violations)
    assert len(violations) == 2 and all(charged.values())
    assert {c.violation_id: c.bad for c in detail} == charged
    assert group.total - group.good - group.attributed == unattributed
    budget = 0.01 * group.total
    for cause in detail:
        assert cause.share == pytest.approx(charged[cause.violation_id] / budget)


def test_backfill_recounts_without_double_counting(database):
    events = _random_stream(3, minutes=600, count=200) + [fragmentation(0)]
    events.sort(key=lambda e: e.time)
    _run(database, events)
    with database.session(readonly=True) as session:
        before = report.slo_groups(session, [SLI])
        causes_before = session.execute(select(func.sum(SloCauseRow.bad))).scalar()
    for _ in range(2):  # twice: a backfill replaces the SLI's counts, it never adds to them
        counted = backfill(database, [SLI], now=T0 + timedelta(days=1))
        assert counted == sum(1 for e in events if e.kind == "token_latency")
    with database.session(readonly=True) as session:
        after = report.slo_groups(session, [SLI])
        causes_after = session.execute(select(func.sum(SloCauseRow.bad))).scalar()
    assert [g.to_dict() for g in after] == [g.to_dict() for g in before]
    assert causes_after == causes_before


def _statement_per_call(connection, table, keys, counts, rows):
    """The former _upsert: the ON CONFLICT statement built (and so compiled) anew on every call."""
    if not rows:
        return
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table)
    statement = statement.on_conflict_do_update(
        index_elements=list(keys), set_={name: table.c[name] + statement.excluded[name] for name in counts})
    connection.execute(statement, rows)


def _stored_sli_rows(database):
    """Every SLI row of the four tables, causes named by their violation's (rule, host, gpu, first seen)."""
    with database.session(readonly=True) as session:
        named = {r.id: (r.rule_id, r.host, r.gpu, r.first_seen) for r in session.scalars(select(ViolationRow))}
        found = {table.__tablename__: sorted(tuple(row) for row in session.execute(select(table.__table__)))
                 for table in (SloBucketRow, SloHourRow, SloDayRow)}
        found["slo_causes"] = sorted((r.slo_id, r.group_key, r.minute, named[r.violation_id], r.bad)
                                     for r in session.scalars(select(SloCauseRow)))
    return found


def _empty(database):
    with database.engine.begin() as connection:
        for table in ("slo_causes", "slo_buckets", "slo_hours", "slo_days", "violations", "events"):
            connection.exec_driver_sql(f"DELETE FROM {table}")


def test_the_compiled_upsert_stores_what_the_statement_per_call_stored(database, monkeypatch):
    """Several batches over the same minutes, hours and days (rows added to, not only inserted), charged bad
    requests included: the upsert compiled once per (dialect, table) and reused stores exactly the rows the
    statement built per call stored, and its compiled form is the one object every batch used."""
    events = sorted(_random_stream(4, minutes=2 * 1440, count=300)
                    + [fragmentation(600, "node-1", 0), fragmentation(1440 * 60 + 30, "node-1", 1)],
                    key=lambda e: e.time)
    half = len(events) // 2
    with monkeypatch.context() as patched:
        patched.setattr(store, "_upsert", _statement_per_call)
        _run(database, events[half:], _run(database, events[:half], batch_size=23), batch_size=23)
    before = _stored_sli_rows(database)
    _empty(database)
    store._UPSERTS.clear()
    evaluator = _run(database, events[:half], batch_size=23)
    compiled = dict(store._UPSERTS)
    _run(database, events[half:], evaluator, batch_size=23)
    assert _stored_sli_rows(database) == before
    assert before["slo_causes"] and all(before[t] for t in ("slo_buckets", "slo_hours", "slo_days"))
    assert {key[1] for key in compiled} == {"slo_buckets", "slo_hours", "slo_days", "slo_causes"}
    assert {key[0] for key in compiled} == {database.engine.dialect.name}
    assert all(store._UPSERTS[key] is found for key, found in compiled.items())


STALL_RULE = """\
  - id: stall
    title: stalled stream
    slo: itl
    severity: warning
    when: {event: token_stall, if: gap_ms > 200ms}
    group_by: [host, gpu]
    summary: stall
    remediation: none
"""


def _stall(at_s, host, gpu, dominant, cluster=None):
    attrs = {"gap_ms": 450.0, "token_index": 10, "attribution.dominant": dominant, f"attribution.{dominant}_ms": 400.0,
             "attribution.unattributed_ms": 50.0, "attribution.coverage": 0.89}
    if cluster:
        attrs["attribution.cluster"] = cluster
    return parse_event({"id": f"stall-{host}-{gpu}-{at_s}", "kind": "token_stall", "host": host, "gpu": gpu,
                        "time": format_time(T0 + timedelta(seconds=at_s)), "attrs": attrs})


def test_budget_by_stall_cause_names_each_stall_violations_cluster_or_dominant_layer(database):
    """Stall violations on three GPUs (one clustered as GPU contention, one only with a dominant layer) and a
    fragmentation violation: each cause carries its worst stall's layer and cluster, and the budget spent per
    stall cause sums the stall causes' bad requests; the fragmentation cause has none."""
    rulebook = load_rulebook_text(RULEBOOK_TEXT.format(window="28d", target=0.99, extra="") + STALL_RULE,
                                  "slo-test.yaml")
    events = [_stall(100, "node-1", 0, "gpu", "gpu-contention-by-another-process"),
              _stall(110, "node-1", 1, "gpu", "gpu-contention-by-another-process"),
              _stall(120, "node-2", 0, "scheduler"), fragmentation(130, "node-3", 0)]
    rng = random.Random(3)
    places = [("node-1", 0), ("node-1", 1), ("node-2", 0), ("node-3", 0)]
    for i in range(200):
        host, gpu = places[i % 4]
        events.append(request(200 + rng.uniform(0, 3000), rng.random() < 0.5, host=host, gpu=gpu))
    events.sort(key=lambda e: e.time)
    evaluator = RuleEvaluator(lateness_s=1e9)
    evaluator.load([rulebook])
    with database.session() as session:
        repository.store_events(session, events)
    sli = rulebook.slos["itl"].indicator
    for i in range(0, len(events), 40):
        result = evaluator.evaluate_batch(events[i:i + 40])
        with database.session() as session:
            violations.record(session, result.matches, now=T0)
            record_sli(session, result.sli, [sli.alert_rule_id(a) for a in sli.policy])
    with database.session(readonly=True) as session:
        (group,) = report.slo_groups(session, [sli])
        causes = report.causes_of(session, group)
    by_place = {c.group_key: (c.rule_id, c.stall_layer, c.stall_cluster) for c in causes}
    assert by_place == {"host=node-1,gpu=0": ("stall", "gpu", "gpu-contention-by-another-process"),
                        "host=node-1,gpu=1": ("stall", "gpu", "gpu-contention-by-another-process"),
                        "host=node-2,gpu=0": ("stall", "scheduler", None),
                        "host=node-3,gpu=0": ("frag", None, None)}
    shown = report.SloGroup(**{**group.__dict__, "causes": causes}).to_dict(causes=True)
    stall = {c.group_key: c for c in causes if c.rule_id == "stall"}
    contention = stall["host=node-1,gpu=0"].bad + stall["host=node-1,gpu=1"].bad
    assert [(s["stall_cause"], s["bad"], s["violations"]) for s in shown["by_stall_cause"]] == [
        ("gpu-contention-by-another-process", contention, 2),
        ("scheduler (dominant layer)", stall["host=node-2,gpu=0"].bad, 1)]
    assert shown["by_stall_cause"][0]["share"] == pytest.approx(
        stall["host=node-1,gpu=0"].share + stall["host=node-1,gpu=1"].share, abs=1e-4)
