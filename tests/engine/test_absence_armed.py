"""Armed absences (`absent:` with `after:`): an arming event expects another event of its key within `for`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from types import MappingProxyType

from engine_support import T0

from gpuslo.engine.events import Event
from gpuslo.engine.matcher import definition as dialect
from gpuslo.engine.plan import plan_rulebook
from gpuslo.engine.rulebook.model import ARM_ALIAS, Absence
from gpuslo.engine.runtime import RuleEvaluator

FIRST_TOKEN = """\
- id: first-token-missing
  title: No first token
  slo: token-latency
  severity: error
  when:
    absent: token_request
    if: "phase in ['first_token', 'done', 'error']"
    after: {event: token_request, if: "phase == 'start'"}
    same: [host, request_id]
    for: 10s
  group_by: [host, endpoint]
  summary: "no first token for {{ event.attrs.request_id }}"
  remediation: r
"""
LATENESS_S = 10.0


def _runner(book) -> RuleEvaluator:
    runner = RuleEvaluator(lateness_s=LATENESS_S)
    runner.load([book])
    return runner


def _request(event, request_id: str, phase: str, at: float, host: str = "node-7") -> Event:
    return event("token_request", at=at, host=host, request_id=request_id, phase=phase, endpoint="/v1/chat")


def test_fires_once_in_event_time_with_the_arming_event_as_evidence(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    start = _request(event, "r1", "start", 0)
    assert runner.evaluate([start]) == []
    assert runner.evaluate([event("cuda_error", at=10)]) == []  # exactly 10 s of silence is not more than 10 s
    (match,) = runner.evaluate([event("cuda_error", at=12.5)])
    assert (match.rule_id, match.group_key, match.summary) == ("first-token-missing", "host=node-7,endpoint=/v1/chat",
                                                               "no first token for r1")
    assert [e.id for e in match.explanation.evidence] == [start.id]
    texts = [c.text for c in match.explanation.conditions]
    assert texts == ["kind = token_request", "phase = 'start' = 'start'",
                     "no token_request where phase in ['first_token', 'done', 'error'] with the same host and "
                     "request_id within 10s of the token_request at 12:00:00.000 (none for 12.5s)"]
    assert match.explanation.conditions[-1].observed == 12.5
    assert match.seen_at == T0 + timedelta(seconds=12.5)
    assert runner.evaluate([event("cuda_error", at=100)]) == []  # once per arming
    assert runner.pending_facts() == 0  # fired: nothing of it is held any more


def test_wall_clock_tick_fires_without_further_events(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    start = _request(event, "r1", "start", 0)
    runner.evaluate([start])
    assert runner.tick(start.timestamp + 9.99) == []
    assert [m.rule_id for m in runner.tick(start.timestamp + 10.5)] == ["first-token-missing"]
    assert runner.tick(start.timestamp + 60) == []


def test_an_expected_event_within_for_disarms_and_leaves_after_for_plus_lateness(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    assert runner.evaluate([_request(event, "r1", "start", 0), _request(event, "r1", "first_token", 10.0)]) == []
    assert runner.pending_facts() == 1  # the first token, kept for a start that may still arrive late
    assert runner.evaluate([event("cuda_error", at=30.5)]) == []
    assert runner.pending_facts() == 0


def test_only_an_event_of_the_same_key_at_or_after_the_arming_disarms_it(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    matches = runner.evaluate([
        _request(event, "r0", "first_token", 0),       # another request
        _request(event, "r1", "first_token", 0.5),     # r1's, but before r1 started: an earlier request's
        _request(event, "r1", "start", 1),
        _request(event, "r1", "first_token", 2, host="node-8"),  # same id on another host: another request
        _request(event, "r2", "start", 3),
        _request(event, "r2", "error", 4),             # an end answers too (the expected condition says so)
    ])
    assert matches == []
    assert [m.summary for m in runner.tick((T0 + timedelta(seconds=30)).timestamp())] == ["no first token for r1"]


def test_an_expected_event_that_arrives_before_its_arming_event_still_answers_it(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    token, start = _request(event, "r1", "first_token", 3), _request(event, "r1", "start", 1)
    assert runner.evaluate([token]) == []
    assert runner.evaluate([start]) == []  # out of order, within the lateness: r1 got its token 2 s after start
    assert runner.tick((T0 + timedelta(seconds=60)).timestamp()) == []


def test_a_late_expected_event_neither_withdraws_nor_fires_again(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    runner.evaluate([_request(event, "r1", "start", 0)])
    fired = runner.evaluate([_request(event, "r1", "first_token", 14)])
    assert [m.explanation.conditions[-1].observed for m in fired] == [14.0]  # the silence the token ended
    assert runner.evaluate([_request(event, "r1", "done", 20)]) == []
    assert runner.tick((T0 + timedelta(seconds=120)).timestamp()) == []


ANY_EVENT = """\
- id: stall-unanswered
  title: A probe that went down did not come back
  slo: token-latency
  severity: warning
  when:
    absent: probe_status
    after: {event: probe_status, if: "state == 'down'"}
    same: [host, probe]
    for: 5m
  group_by: [host, probe]
  summary: "{{ event.attrs.probe }} still down"
  remediation: r
"""


def test_the_arming_event_does_not_answer_itself_but_the_next_one_of_its_key_does(rulebook, event):
    runner = _runner(rulebook(ANY_EVENT))
    down = event("probe_status", at=0, probe="nvml", state="down")  # matches both patterns
    assert runner.evaluate([down, event("probe_status", at=1, probe="ebpf", state="up")]) == []
    assert runner.evaluate([event("probe_status", at=200, probe="nvml", state="degraded")]) == []
    assert runner.tick((T0 + timedelta(seconds=900)).timestamp()) == []
    runner.evaluate([event("probe_status", at=1000, probe="nvml", state="down")])
    assert [m.summary for m in runner.tick((T0 + timedelta(seconds=1301)).timestamp())] == ["nvml still down"]


def test_each_arming_of_one_key_fires_on_its_own(rulebook, event):
    per_endpoint = FIRST_TOKEN.replace("same: [host, request_id]", "same: [host, endpoint]")
    runner = _runner(rulebook(per_endpoint))
    runner.evaluate([_request(event, "r1", "start", 0), _request(event, "r2", "start", 5)])
    assert runner.evaluate([_request(event, "r1", "first_token", 4)]) == []  # answers r1 (armed at 0), not r2
    assert [m.summary for m in runner.evaluate([event("cuda_error", at=20)])] == ["no first token for r2"]


def test_arming_without_a_same_field_is_ignored(rulebook, event):
    by_gpu = FIRST_TOKEN.replace("same: [host, request_id]", "same: [host, gpu]")
    runner = _runner(rulebook(by_gpu))
    runner.evaluate([_request(event, "r1", "start", 0)])  # no gpu: it cannot be keyed
    assert runner.pending_facts() == 0
    assert runner.tick((T0 + timedelta(seconds=60)).timestamp()) == []


def test_reload_keeps_armings_of_an_unchanged_rule_and_drops_a_changed_one(rulebook, event):
    runner = _runner(rulebook(FIRST_TOKEN))
    runner.evaluate([_request(event, "r1", "start", 0)])
    runner.load([rulebook(FIRST_TOKEN, name="t")])  # same rule, reloaded
    assert [m.summary for m in runner.tick((T0 + timedelta(seconds=11)).timestamp())] == ["no first token for r1"]
    runner.evaluate([_request(event, "r2", "start", 20)])
    runner.load([rulebook(FIRST_TOKEN.replace("for: 10s", "for: 20s"))])
    assert runner.pending_facts() == 0
    assert runner.tick((T0 + timedelta(seconds=60)).timestamp()) == []


def test_heartbeat_absence_is_unchanged_without_after(rulebook, event):
    heartbeat = FIRST_TOKEN.replace("    after: {event: token_request, if: \"phase == 'start'\"}\n", "")
    book = rulebook(heartbeat)
    assert isinstance(book.rules[0].when, Absence) and book.rules[0].when.after is None
    runner = _runner(book)
    runner.evaluate([_request(event, "r1", "first_token", 0)])
    (match,) = runner.evaluate([event("cuda_error", at=11)])
    assert match.explanation.conditions[0].text.startswith("no token_request where phase in")
    assert len(match.explanation.conditions) == 1


def test_compiled_form_has_one_engine_rule_per_pattern(rulebook):
    cross_kind = """\
- id: xid-host-not-back
  title: Host not back after an Xid
  slo: token-latency
  severity: error
  when:
    absent: probe_status
    if: "state == 'up'"
    after: {event: gpu_xid, if: "xid == 79"}
    same: [host]
    for: 10m
  summary: "{{ event.host }} not back"
  remediation: r
"""
    unit = plan_rulebook(rulebook(cross_kind), ruleset="x")
    assert unit.kinds == {"probe_status", "gpu_xid"}
    assert {name: action.alias for name, action in unit.actions.items()} == {
        "x|xid-host-not-back|m": "m", f"x|xid-host-not-back|{ARM_ALIAS}": ARM_ALIAS}
    definition = dialect(unit)
    assert definition[f"r_xid-host-not-back__{ARM_ALIAS}"]["all"] == [
        {ARM_ALIAS: {"$and": [{"kind": "gpu_xid"}, {"xid": 79}]}}]
    assert unit.max_window_s == 600.0


# ---- bounded memory: state leaves once answered (and past for + lateness) or fired ----

STEP_S = 0.01


def _requests(count: int, answered: bool) -> Iterator[Event]:
    """Requests STEP_S apart, each with its own id; answered ones get their first token 50 ms after start."""
    for i in range(count):
        start = T0 + timedelta(seconds=i * STEP_S)
        attrs = {"request_id": f"r{i}", "endpoint": "/v1/chat"}
        yield Event(id=f"s{i}", kind="token_request", time=start, host="node-1",
                    attrs=MappingProxyType({**attrs, "phase": "start"}))
        if answered:
            yield Event(id=f"t{i}", kind="token_request", time=start + timedelta(milliseconds=50), host="node-1",
                        attrs=MappingProxyType({**attrs, "phase": "first_token"}))


def _held_after_batches(runner: RuleEvaluator, events: Iterator[Event], batch: int = 500) -> tuple[int, int]:
    """Feed in runtime-sized batches; returns (the most events held after any batch, matches)."""
    most, matches, pending = 0, 0, []
    for event in events:
        pending.append(event)
        if len(pending) == batch:
            matches += len(runner.evaluate(pending))
            most, pending = max(most, runner.pending_facts()), []
    matches += len(runner.evaluate(pending))
    return max(most, runner.pending_facts()), matches


def test_20k_answered_requests_hold_only_for_plus_lateness_of_first_tokens(rulebook):
    runner = _runner(rulebook(FIRST_TOKEN))
    most, matches = _held_after_batches(runner, _requests(20_000, answered=True))
    assert matches == 0
    assert most <= (10.0 + LATENESS_S) / STEP_S + 500  # the horizon, plus one batch not yet expired


def test_20k_unanswered_requests_each_fire_once_and_hold_only_for_of_armings(rulebook):
    runner = _runner(rulebook(FIRST_TOKEN))
    most, matches = _held_after_batches(runner, _requests(20_000, answered=False))
    assert most <= 10.0 / STEP_S + 500
    last = T0 + timedelta(seconds=20_000 * STEP_S)
    matches += len(runner.tick((last + timedelta(seconds=11)).timestamp()))
    assert matches == 20_000
    assert runner.pending_facts() == 0
