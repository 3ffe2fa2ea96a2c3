"""Byte and duration literals as rulebooks write them: `1GiB`, `1.5GB`, `200ms`, `5m`."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

BYTE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
DURATION_UNITS: dict[str, Decimal] = {
    "us": Decimal("0.000001"),
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
}
_LITERAL = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


def _split(text: object, what: str, units: dict[str, object]) -> tuple[Decimal, str]:
    """Split `1.5GiB` into (Decimal('1.5'), 'GiB'), refusing unknown units."""
    example = "1GiB, 512MiB, 1.5GB" if what == "size" else "200ms, 1.5s, 5m, 2h"
    if not isinstance(text, str):
        raise ValueError(f"a {what} must be a string with a unit such as {example}, got {text!r}")
    match = _LITERAL.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a {what}: write a number and a unit, e.g. {example}")
    number, unit = match.groups()
    if unit not in units:
        raise ValueError(f"{text!r}: unknown {what} unit {unit!r} (known: {', '.join(units)})")
    try:
        return Decimal(number), unit
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"{text!r} is not a {what}") from exc


def parse_bytes(text: object) -> int:
    """`1GiB` → 1073741824; SI units (`GB`) are powers of ten, IEC units (`GiB`) powers of two."""
    number, unit = _split(text, "size", dict(BYTE_UNITS))
    value = number * BYTE_UNITS[unit]
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


def duration_in(text: object, unit: str) -> float:
    """A duration literal in `unit` (`us`, `ms`, `s`, ...), converted exactly: `1s` in ms is 1000.0."""
    number, given = _split(text, "duration", dict(DURATION_UNITS))
    return float(number * DURATION_UNITS[given] / DURATION_UNITS[unit])


def parse_duration(text: object) -> float:
    """`200ms` → 0.2, `5m` → 300.0 (seconds)."""
    return duration_in(text, "s")


def is_byte_literal(text: str) -> bool:
    """True when `text` spells a size (`4KiB`); used by the expression tokenizer."""
    match = _LITERAL.fullmatch(text)
    return match is not None and match.group(2) in BYTE_UNITS


def is_duration_literal(text: str) -> bool:
    """True when `text` spells a duration (`250us`)."""
    match = _LITERAL.fullmatch(text)
    return match is not None and match.group(2) in DURATION_UNITS


def format_duration(seconds: float) -> str:
    """Seconds as the two largest units that divide it: 300 → `5m`, 4200 → `1h 10m`, 259200 → `3d`."""
    left = int(round(seconds))
    if left <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts[:2])
