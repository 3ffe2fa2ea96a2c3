"""The counter's bucketed figures equal a brute-force count over the raw events (random streams, late events,
window edges), and burn alerts fire and resolve at the event where the windows say so."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from slo_support import brute_counts, measured_rulebook, request

from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.slo.maths import burn_rate
from gpuslo.engine.slo.model import LOOKBACKS

RULEBOOK = measured_rulebook()
streams = st.lists(st.tuples(st.integers(0, 4 * 86400), st.booleans(), st.sampled_from(["/v1/chat", "/v1/embed"])),
                   min_size=1, max_size=120)


@settings(max_examples=60, deadline=None)
@given(streams)
def test_bucketed_lookbacks_equal_brute_force_over_any_order(items):
    """Events in any order (late ones included): every lookback of every group is the brute-force count."""
    evaluator = RuleEvaluator(lateness_s=10 * 86400)
    evaluator.load([RULEBOOK])
    events = [request(at, good, endpoint) for at, good, endpoint in items]
    evaluator.evaluate(events)
    for figures in evaluator.slo.figures():
        endpoint = figures.group["endpoint"]
        own = max(int(e.timestamp // 60) for e in events if e.attrs["endpoint"] == endpoint)
        stream = max(int(e.timestamp // 60) for e in events)
        # A group with a firing burn alert moves on to the stream's time at the batch's end (so it can resolve).
        assert figures.as_of_minute in (own, stream)
        newest = figures.as_of_minute
        for name, seconds in LOOKBACKS:
            assert figures.lookbacks[name] == brute_counts(events, newest, seconds // 60, endpoint), name
        assert (figures.good, figures.total) == brute_counts(events, newest, 28 * 1440, endpoint)


def test_window_edges_are_whole_minutes():
    """A lookback of 5m as of 10:04:59 holds 10:00:00 … 10:04:59; 09:59:59 is out."""
    evaluator = RuleEvaluator()
    evaluator.load([RULEBOOK])
    base = 10 * 3600
    evaluator.evaluate([request(base - 1, False), request(base, False), request(base + 299, True)])
    (figures,) = evaluator.slo.figures()
    assert figures.lookbacks["5m"] == (1, 2)
    assert figures.lookbacks["30m"] == (1, 3)


def test_an_event_older_than_every_kept_minute_counts_only_in_the_store():
    evaluator = RuleEvaluator(lateness_s=1e9)
    evaluator.load([measured_rulebook(window="1h")])
    result = evaluator.evaluate_batch([request(10 * 86400, True), request(0, False)])
    (figures,) = evaluator.slo.figures()
    assert figures.lookbacks["3d"] == (1, 1)  # the 10-day-old request is outside every lookback
    assert sum(d[1] for d in result.sli.deltas.values()) == 2  # ... but the stored buckets count it


def _alert_times(events, rule_suffix="page"):
    evaluator = RuleEvaluator(lateness_s=1e9)
    evaluator.load([RULEBOOK])
    fired, cleared = [], []
    for event in events:
        result = evaluator.evaluate_batch([event])
        fired += [(m.rule_id, event.id) for m in result.matches if m.rule_id.endswith(rule_suffix)]
        cleared += [(c.rule_id, event.id) for c in result.clears if c.rule_id.endswith(rule_suffix)]
    return fired, cleared


def _brute_page(events, upto):
    """The page alert's state after event `upto`, recomputed from the raw events (minute windows)."""
    seen = events[: upto + 1]
    now = max(int(e.timestamp // 60) for e in seen)
    pairs = [(14.4, 60, 5), (6.0, 360, 30)]
    firing = any(burn_rate(*brute_counts(seen, now, long_m), 0.99) >= burn
                 and burn_rate(*brute_counts(seen, now, short_m), 0.99) >= burn for burn, long_m, short_m in pairs)
    recovered = all(burn_rate(*brute_counts(seen, now, short_m), 0.99) < burn for burn, _, short_m in pairs)
    return firing, recovered


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 90), st.integers(0, 100)), min_size=1, max_size=60))
def test_page_alert_fires_and_resolves_where_brute_force_says(steps):
    """In time order: fire at the first event after which a pair's both windows burn ≥ its rate; resolve at
    the first event after which every short window is below its rate."""
    at, events = 0, []
    for gap_s, bad_percent in steps:
        at += gap_s * 20
        events.append(request(at, bad_percent >= 50))
    fired, cleared = _alert_times(events)
    expected_fired, expected_cleared, firing = [], [], False
    for i, event in enumerate(events):
        fires, recovered = _brute_page(events, i)
        if not firing and fires:
            firing = True
            expected_fired.append(("itl-burn-page", event.id))
        elif firing and recovered:
            firing = False
            expected_cleared.append(("itl-burn-page", event.id))
    assert fired == expected_fired
    assert cleared == expected_cleared


def test_a_burst_of_bad_requests_pages_with_an_explanation_and_recovers():
    good = [request(i * 10, True) for i in range(300)]  # 50 minutes of good traffic
    bad = [request(3000 + i, False) for i in range(30)]  # then 30 bad requests in 30 s
    after = [request(3100 + i * 10, True) for i in range(300)]  # good again for 50 minutes
    evaluator = RuleEvaluator()
    evaluator.load([RULEBOOK])
    evaluator.evaluate(good)
    matches = [m for e in bad for m in evaluator.evaluate([e])]
    # The 1h/5m pair needs 14.4 % bad over the hour: 51 bad of 351, never reached. The 6h/30m pair needs 6 %:
    # the 20th bad request makes 20 of 320 = 6.25 % over 6 h (and more over 30 m): the page fires there.
    (page,) = [m for m in matches if m.rule_id == "itl-burn-page"]
    assert page.explanation.evidence[0].id == bad[19].id
    assert page.severity == "critical" and page.group_key == "endpoint=/v1/chat"
    observed = {c.field: c.observed for c in page.explanation.conditions}
    assert observed["burn_rate_6h"] == round(20 / 320 / 0.01, 4)
    assert "burned 6.25× over 6h" in page.summary
    # Good requests again: the 30m window falls below 6× once enough good requests dilute it (and the 1h/5m
    # pair's short window, 5 m, is below 14.4× once the bad minute has left it): the alert resolves.
    cleared = []
    for e in after:
        cleared += [c for c in evaluator.evaluate_batch([e]).clears if c.rule_id == "itl-burn-page"]
    assert len(cleared) == 1
    first_minute_ok = next(i for i, e in enumerate(after) if _brute_page(good + bad + after[: i + 1],
                                                                         len(good) + len(bad) + i)[1])
    assert cleared[0].event.id == after[first_minute_ok].id


def test_groups_beyond_the_cap_are_stored_but_not_kept_in_memory(monkeypatch):
    from gpuslo.engine.slo import counter

    monkeypatch.setattr(counter, "MAX_GROUPS", 3)
    evaluator = RuleEvaluator()
    evaluator.load([RULEBOOK])
    result = evaluator.evaluate_batch([request(i, False, f"/e{i}") for i in range(5)])
    assert len(evaluator.slo.figures()) == 3 and evaluator.slo.capped == 2
    assert sum(d[1] for d in result.sli.deltas.values()) == 5
