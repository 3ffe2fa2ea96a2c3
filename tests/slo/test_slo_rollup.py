"""The API's figures are read as signed pieces of the minute/hour/day tables: the pieces cover exactly the range
(Hypothesis), read a bounded number of rows, and the figures equal a recount from the raw minute buckets on random
stored streams — late and out-of-order batches, rolling and calendar-month windows, both databases."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slo_support import measured_rulebook

from gpuslo.engine.slo import figures
from gpuslo.engine.slo.counter import SliBatch
from gpuslo.engine.slo.model import LOOKBACKS
from gpuslo.engine.slo.ranges import LEVELS, pieces
from gpuslo.engine.slo.store import record_sli

ROLLING = measured_rulebook().slos["itl"].indicator
MONTHLY = measured_rulebook(extra="      calendar: month").slos["itl"].indicator
M2026 = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) // 60


def _coverage(first: int, end: int, open_end: bool) -> Counter[int]:
    """Minute → how many times the pieces count it (a subtracted piece counts −1)."""
    counted: Counter[int] = Counter()
    for piece in pieces(first, end, open_end=open_end):
        size = LEVELS[piece.level][1]
        for minute in range(piece.lo * size, piece.hi * size):
            counted[minute] += piece.sign
    return +counted  # drops zeros: a minute added and subtracted is not counted


@given(st.integers(0, 3 * 1440 * 31), st.integers(0, 40 * 1440), st.booleans())
@settings(max_examples=400, deadline=None)
def test_pieces_count_each_minute_of_the_range_once(first, width, open_end):
    first += M2026
    assert _coverage(first, first + width, open_end) == Counter(range(first, first + width))


@given(st.integers(M2026, M2026 + 366 * 1440))
@settings(max_examples=300, deadline=None)
def test_every_lookback_reads_a_bounded_number_of_stored_rows(now):
    """Rows that can exist (none after `now`): at most 30 minutes + 12 hours per edge and the whole days."""
    for _name, seconds in (*LOOKBACKS, ("28d", 28 * 86400)):
        stored = 0
        for piece in pieces(now - seconds // 60 + 1, now + 1, open_end=True):
            newest_unit = now // LEVELS[piece.level][1]
            stored += max(0, min(piece.hi, newest_unit + 1) - piece.lo)
        assert stored <= 30 + 12 + seconds // 86400 + 1 + 1, (seconds, stored)


def _store(database, rng, sli, minutes):
    """Random buckets of three groups written through record_sli in shuffled batches (late ones included);
    returns the deltas written."""
    cells = [(key, minute) for minute in minutes for key in ("endpoint=/a", "endpoint=/b", "endpoint=/c")
             if rng.random() < 0.6 or (key, minute) == ("endpoint=/a", minutes[-1])]
    rng.shuffle(cells)
    written = {}
    for start in range(0, len(cells), 40):
        deltas = {}
        for key, minute in cells[start:start + 40]:
            total = rng.randint(1, 9)
            good = rng.randint(0, total)
            counts = [good, total] + [1] * rng.randint(0, total - good)
            deltas[sli.slo_id, key, minute] = counts
            written[key, minute] = counts
        with database.session() as session:
            record_sli(session, SliBatch(deltas, ()))
    return written


def _brute(written, sli, now):
    """The figures straight from the written deltas."""
    found = {}
    for name, first in figures.ranges(sli, now).items():
        for (key, minute), counts in written.items():
            if first <= minute <= now:
                sums = found.setdefault(key, {}).setdefault(name, [0, 0, 0])
                sums[0] += counts[0]
                sums[1] += counts[1]
                sums[2] += sum(counts[2:])
    return {sli.slo_id: (now, found)}


@pytest.mark.parametrize("sli", [ROLLING, MONTHLY], ids=["rolling-28d", "calendar-month"])
@given(seed=st.integers(0, 10_000), span_days=st.integers(1, 70), offset=st.integers(0, 400 * 1440))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_figures_equal_a_recount_from_the_minute_buckets(database, sli, seed, span_days, offset):
    rng = random.Random(seed)
    with database.engine.begin() as connection:
        for table in ("slo_buckets", "slo_hours", "slo_days", "slo_causes"):
            connection.exec_driver_sql(f"DELETE FROM {table}")
    newest = M2026 + offset
    # Sparse minutes over `span_days`: dense near both edges of every hour and day, where pieces meet.
    minutes = sorted({newest - rng.randint(0, span_days * 1440) for _ in range(300)}
                     | {newest - d * 1440 + e for d in range(span_days) for e in (-1, 0, 1) if d or e <= 0}
                     | {newest})
    written = _store(database, rng, sli, minutes)
    with database.session(readonly=True) as session:
        fast = figures.as_mapping(figures.figures(session, [sli]))
        slow = figures.as_mapping(figures.recount(session, [sli]))
    assert fast == slow
    assert fast == figures.as_mapping(_brute(written, sli, newest))


def test_the_migration_rolls_stored_hours_up_into_days(database):
    """Downgrade below the day roll-up, store hours only, upgrade: the days hold the same sums, figures equal
    the recount."""
    from alembic import command
    from alembic.config import Config

    from gpuslo.engine.store.db import migrations_folder

    config = Config()
    config.set_main_option("script_location", migrations_folder())
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0006_fleet")
    rng = random.Random(3)
    written = {}
    newest = M2026 + 40 * 1440 + 17
    with database.engine.begin() as connection:
        for minute in sorted({newest - rng.randint(0, 35 * 1440) for _ in range(200)} | {newest}):
            good, total = rng.randint(0, 3), 4
            written["endpoint=/a", minute] = [good, total]
            connection.exec_driver_sql(
                "INSERT INTO slo_buckets (slo_id, group_key, minute, good, total, attributed) "
                f"VALUES ('itl', 'endpoint=/a', {minute}, {good}, {total}, 0)")
            connection.exec_driver_sql(
                "INSERT INTO slo_hours (slo_id, group_key, hour, good, total, attributed) "
                f"VALUES ('itl', 'endpoint=/a', {minute // 60}, {good}, {total}, 0) ON CONFLICT (slo_id, group_key, "
                f"hour) DO UPDATE SET good = slo_hours.good + {good}, total = slo_hours.total + {total}")
    database.upgrade()
    with database.session(readonly=True) as session:
        assert figures.as_mapping(figures.figures(session, [ROLLING])) == figures.as_mapping(
            _brute(written, ROLLING, newest))
