"""The regex dialect of `matches`: RE2 (google-re2), which runs in time linear in the text, as in Prometheus.

Python's `re` backtracks: `^(a+)+$` against 28 characters stalled the engine for seconds. RE2 has no
backreferences or lookaround; the loader refuses such patterns with a hint instead of running them.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

_UNSUPPORTED = (
    ("invalid perl operator: (?=", "lookahead '(?=...)' / '(?!...)'"),
    ("invalid perl operator: (?!", "lookahead '(?=...)' / '(?!...)'"),
    ("invalid perl operator: (?<", "lookbehind '(?<=...)' / '(?<!...)'"),
    ("invalid perl operator: (?>", "atomic groups '(?>...)'"),
    ("invalid escape sequence: \\Z", "'\\Z' (write '\\z' or '$')"),
    ("bad repetition operator: ++", "possessive quantifiers ('++', '*+', '?+')"),
    ("bad repetition operator: *+", "possessive quantifiers ('++', '*+', '?+')"),
    ("bad repetition operator: ?+", "possessive quantifiers ('++', '*+', '?+')"),
)
HINT = ("`matches` uses RE2, as Prometheus and Alertmanager do: it runs in linear time and has no backreferences, "
        "lookaround or possessive quantifiers; see docs/rulebooks.md#regular-expressions")


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported as a located rulebook error, not on stderr
    return options


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate from a YAML escape must not raise here


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """The RE2 program of `pattern` (compiled once per pattern); raises re2.error when RE2 refuses it."""
    return re2.compile(_utf8(pattern), _options())


def search(pattern: str, text: str) -> bool:
    """`re.search` semantics under RE2: does `pattern` match anywhere in `text`?"""
    return compiled(pattern).search(_utf8(text)) is not None


def regex_problem(pattern: str) -> tuple[str, str | None] | None:
    """Why RE2 refuses `pattern` (with a hint when it uses what only backtracking engines have), or None."""
    try:
        compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        unsupported = next((what for marker, what in _UNSUPPORTED if reason.startswith(marker)), None)
        if "(?P=" in pattern and reason.startswith("invalid perl operator: (?P"):
            unsupported = "named backreferences '(?P=name)'"
        if unsupported or reason.startswith("invalid escape sequence: \\") and reason[-1:].isdigit():
            what = unsupported or "backreferences ('\\1')"
            return f"RE2 does not support {what} ({reason})", HINT
        return f"does not compile under RE2: {reason}", None
    return None
