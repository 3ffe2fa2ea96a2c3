from collections.abc import Callable

import pytest

from gpuslo.engine.units import duration_in, parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1GiB", 2**30), ("512MiB", 512 * 2**20), ("1.5GB", 1_500_000_000), ("4KiB", 4096), ("100B", 100)],
)
def test_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("200ms", 0.2), ("1.5s", 1.5), ("60s", 60.0), ("5m", 300.0), ("2h", 7200.0), ("1d", 86400.0),
     ("250us", 0.00025)],
)
def test_durations(text: str, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


def test_duration_conversion_is_exact() -> None:
    assert duration_in("200ms", "ms") == 200.0
    assert duration_in("1s", "ms") == 1000.0
    assert duration_in("1.1s", "ms") == 1100.0


@pytest.mark.parametrize(
    ("func", "text", "message"),
    [(parse_bytes, "1GiBs", "unknown size unit 'GiBs'"),
     (parse_bytes, "1.3B", "not a whole number of bytes"),
     (parse_bytes, "GiB", "write a number and a unit"),
     (parse_duration, "5 minutes", "unknown duration unit"),
     (parse_duration, 60, "must be a string with a unit"),
     (parse_duration, "-1s", "write a number and a unit")],
)
def test_bad_literals(func: Callable[[object], object], text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        func(text)
