"""Calendar-month budgets against brute force: requests around month boundaries (28-, 29-, 30- and 31-day months,
a year's end) go through the engine and the store; as of each chosen moment the window holds exactly the month's
requests so far, and the budget, its remaining share, burn rates and time to exhaustion equal the definitions
recomputed from the raw events — in the API's figures (both databases) and in the engine's counter."""

from __future__ import annotations

import calendar
import random
from datetime import UTC, datetime, timedelta

import pytest
from slo_support import T0, measured_rulebook, request

from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.slo import report
from gpuslo.engine.slo.maths import budget_remaining, burn_rate, exhaustion_s
from gpuslo.engine.slo.model import LOOKBACKS
from gpuslo.engine.slo.store import record_sli

RULEBOOK = measured_rulebook(window="30d", extra="      calendar: month")
SLI = RULEBOOK.slos["itl"].indicator

# The newest request's minute: the last minute of a month, or the first minutes of the next.
MOMENTS = [datetime(2026, 2, 28, 23, 59, tzinfo=UTC),  # February of 28 days, its last minute
           datetime(2026, 3, 1, 0, 0, tzinfo=UTC),     # a new month's first minute: the window restarts
           datetime(2028, 2, 29, 23, 59, tzinfo=UTC),  # a leap February (29 days)
           datetime(2026, 4, 30, 12, 30, tzinfo=UTC),  # 30 days
           datetime(2026, 1, 31, 23, 59, tzinfo=UTC),  # 31 days
           datetime(2027, 1, 1, 0, 7, tzinfo=UTC)]     # a year's end behind it


def _month_start(moment: datetime) -> datetime:
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _stream(moment: datetime, seed: int) -> list:
    """Requests over the previous month's last 3 days and this month up to `moment` (its last one at it),
    denser near the boundary and near `moment`."""
    rng = random.Random(seed)
    first = _month_start(moment) - timedelta(days=3)
    span = (moment - first).total_seconds()
    times = sorted({rng.uniform(0, span) for _ in range(500)}
                   | {rng.uniform(3 * 86400 - 600, 3 * 86400 + 600) for _ in range(100)}
                   | {span - rng.uniform(0, 3 * 3600) for _ in range(150)})
    times = [t for t in times if t < span] + [span]
    offset = (first - T0).total_seconds()
    return [request(offset + t, rng.random() < 0.93, rng.choice(["/v1/chat", "/v1/embed"])) for t in times]


def _brute(events, endpoint, first_minute, now_minute):
    chosen = [e for e in events if e.attrs["endpoint"] == endpoint and first_minute <= int(e.timestamp // 60)
              <= now_minute]
    return sum(1 for e in chosen if e.attrs["itl_max_ms"] < 200), len(chosen)


@pytest.mark.parametrize("moment", MOMENTS, ids=[m.strftime("%Y-%m-%dT%H:%M") for m in MOMENTS])
def test_calendar_month_budget_and_burn_equal_brute_force(database, moment):
    events = _stream(moment, seed=moment.month)
    evaluator = RuleEvaluator(lateness_s=1e9)
    evaluator.load([RULEBOOK])
    for i in range(0, len(events), 100):
        result = evaluator.evaluate_batch(events[i:i + 100])
        with database.session() as session:
            record_sli(session, result.sli, [SLI.alert_rule_id(a) for a in SLI.policy])
    now = int(moment.timestamp() // 60)
    start = calendar.timegm(_month_start(moment).timetuple()) // 60
    days = calendar.monthrange(moment.year, moment.month)[1]
    with database.session(readonly=True) as session:
        groups = {g.group["endpoint"]: g for g in report.slo_groups(session, [SLI])}
    counted = {f.group["endpoint"]: f for f in evaluator.slo.figures()}
    assert set(groups) == set(counted) == {"/v1/chat", "/v1/embed"}
    for endpoint, group in groups.items():
        assert group.as_of_minute == now
        good, total = _brute(events, endpoint, start, now)
        assert (group.good, group.total) == (good, total), (endpoint, days)
        assert (counted[endpoint].good, counted[endpoint].total) == (good, total)
        assert total > 0 or moment.day == 1
        budget = 0.01 * total
        remaining = 1 - (total - good) / budget if budget else 1.0
        assert group.remaining == pytest.approx(remaining) == pytest.approx(budget_remaining(good, total, 0.99))
        rates = group.burn_rates()
        for name, seconds in LOOKBACKS:
            g, t = _brute(events, endpoint, now - seconds // 60 + 1, now)
            assert group.lookbacks[name] == (g, t) == counted[endpoint].lookbacks[name], name
            assert rates[name] == round(((t - g) / t) / 0.01 if t else 0.0, 4), name
        assert group.exhaustion_s == exhaustion_s(remaining, SLI.window_s, burn_rate(*group.lookbacks["1h"], 0.99))
        # Nothing of the previous month counts, however near the boundary.
        previous = [e for e in events if e.attrs["endpoint"] == endpoint and int(e.timestamp // 60) < start]
        assert previous and group.total == total == len([e for e in events if e.attrs["endpoint"] == endpoint]) - len(
            previous)
