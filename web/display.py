"""How values read on a page: times as <time> elements (shown in the browser's zone by ui.js, UTC on hover),
bytes and durations in human units with the raw value in a tooltip. Template filters, registered on every app."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint
from markupsafe import Markup, escape

from gpuslo.engine.events import format_time

display = Blueprint("display", __name__)

_BYTE_STEPS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
# Attribute name endings and what one unit of them is in seconds.
_DURATION_SUFFIXES = (("_us", 1e-6), ("_ms", 1e-3), ("_s", 1.0), ("_seconds", 1.0))


def _moment(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):  # explanation JSON carries ISO strings
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return value


@display.app_template_filter("when")
def when(value: datetime | str | None) -> Markup | str:
    """A <time> with the UTC text `2025-01-31 12:00:00.123456Z`; ui.js rewrites the text into local time."""
    moment = _moment(value)
    if moment is None:
        return "" if value is None else str(value)
    utc = format_time(moment)
    text = utc.replace("T", " ")
    return Markup('<time datetime="{0}" title="{1}">{1}</time>').format(utc, text)


@display.app_template_filter("epoch_ms")
def epoch_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


def human_bytes(count: int | float) -> str:
    """`47369262592` → `44.1 GiB`; under 1 KiB stays in bytes."""
    for unit, size in _BYTE_STEPS:
        if abs(count) >= size:
            return f"{count / size:.3g} {unit}" if abs(count) / size < 100 else f"{count / size:.0f} {unit}"
    return f"{count:g} B"


def human_seconds(seconds: float) -> str:
    """`0.3987` → `399 ms`, `75.2` → `1 min 15 s`, `0.00004` → `40 µs`."""
    size = abs(seconds)
    if size < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if size < 1:
        return f"{seconds * 1e3:.3g} ms"
    if size < 60:
        return f"{seconds:.3g} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def humane(name: str, value: Any) -> str | None:
    """The human form of a numeric field by its name (`*_bytes`, `*_ms`, `*_us`, `*_s`), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    leaf = name.rsplit(".", 1)[-1]
    if leaf.endswith("_bytes"):
        return human_bytes(value)
    for suffix, unit in _DURATION_SUFFIXES:
        if leaf.endswith(suffix):
            return human_seconds(value * unit)
    return None


@display.app_template_filter("field_value")
def field_value(value: Any, name: str) -> Markup:
    """A field's value for a table cell: human units with the raw JSON value in the tooltip when it has units."""
    raw = json.dumps(value, default=str) if not isinstance(value, str) else value
    shown = humane(name, value)
    if shown is None:
        return escape(raw)
    return Markup('<span class="raw" title="{0}" data-raw="{0}">{1}</span>').format(raw, shown)


_FIELD_NUMBER = re.compile(r"\b([a-z][a-z0-9_.]*(?:_bytes|_ms|_us|_s|_seconds))(\s*=\s*)(-?\d+(?:\.\d+)?)\b")


@display.app_template_filter("humane_text")
def humane_text(text: str | None) -> Markup:
    """Engine-written text (`free_bytes = 47369262592 >= 1GiB`) with each unit field's number in human units,
    the raw number in the tooltip."""
    if not text:
        return Markup("")
    out, last = [], 0
    for match in _FIELD_NUMBER.finditer(text):
        name, equals, number = match.groups()
        shown = humane(name, float(number) if "." in number else int(number))
        out.append(escape(text[last:match.start()]))
        out.append(Markup('{0}{1}<span class="raw" title="{2}" data-raw="{2}">{3}</span>').format(
            name, equals, number, shown))
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


@display.app_template_filter("bytes")
def bytes_filter(value: int | float | None) -> Markup | str:
    if value is None:
        return ""
    return Markup('<span class="raw" title="{0} bytes">{1}</span>').format(value, human_bytes(value))
