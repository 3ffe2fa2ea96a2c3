"""engine/once.py: computed once per instance, then read from the instance like functools.cached_property."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuslo.engine.events import Event
from gpuslo.engine.once import computed_once


class _Counted:
    def __init__(self) -> None:
        self.calls = 0

    @computed_once
    def value(self) -> int:
        """The number of calls so far, plus one."""
        self.calls += 1
        return self.calls


def test_the_value_is_computed_at_the_first_read_only_and_the_class_sees_the_descriptor() -> None:
    counted = _Counted()
    assert (counted.value, counted.value, counted.calls) == (1, 1, 1)
    assert isinstance(_Counted.value, computed_once)
    assert _Counted.value.__doc__ == "The number of calls so far, plus one."
    assert _Counted().value == 1  # per instance


def test_an_events_timestamp_is_its_time_in_epoch_seconds_and_leaves_equality_to_the_fields() -> None:
    moment = datetime(2026, 11, 29, 12, 0, 0, 250_000, tzinfo=UTC)
    first, second = (Event(id="a", kind="probe_status", time=moment, host="h") for _ in range(2))
    assert first.timestamp == moment.timestamp() == 1_795_953_600.25
    assert first == second  # the cached value is not a field: equality still compares the fields
