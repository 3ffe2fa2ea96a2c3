"""Hints for rulebook problems: the known word closest to a misspelt one."""

from __future__ import annotations

import difflib
from typing import Any


def did_you_mean(word: object, options: Any) -> str | None:
    """`did you mean 'X'?` for the closest of `options`, or None when nothing is close."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f"did you mean '{close[0]}'?" if close else None
