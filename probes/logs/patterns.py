"""The building blocks of message families: `Family`, `Found`, the field readers every family module shares,
and what starts a new record.

Field regexes allow a lost or extra space between words (`\\s*`), because hard-wrapped messages are rejoined
without knowing whether the wrap ate a space.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gpuslo.engine.events import canonical_pci_bus
from gpuslo.probes.logs.units import SIZE, to_bytes


@dataclass(frozen=True)
class Found:
    """What a family read from an incident's text."""

    kind: str
    attrs: dict[str, Any]
    gpu: int | None = None
    rank: int | None = None
    pid: int | None = None
    gpu_uuid: str | None = None


@dataclass(frozen=True)
class Family:
    """One message family: how its incidents start, when they are complete, and how fields are read."""

    name: str
    start: re.Pattern[str]
    extract: Callable[[str], Found | None]
    complete: re.Pattern[str] | None = None  # None: the start line is the whole incident
    max_lines: int = 1
    joiner: str = ""  # "" rejoins hard-wrapped text; "\n" keeps a block's lines apart
    accept: re.Pattern[str] | None = None  # continuation lines a block takes even if they look like records
    # strict: only `accept` lines from the first line's printer (NCCL thread, syslog host) continue; blank
    # lines between are skipped (NCCL's follow-up WARN often comes after one)
    strict: bool = False
    # substrings one of which every match of `start` contains: a line with none skips the regex (catalog.py)
    needs: tuple[str, ...] = ()
    # a generic wording (families_generic.py): only a line with log structure in front of the start counts
    structured: bool = False

    def starts(self, text: str) -> re.Match[str] | None:
        if self.needs and not any(need in text for need in self.needs):
            return None
        return self.start.search(text)


def _c(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


_SIZE_FIRST = "(?:SIZE)"
_SIZES = re.compile(SIZE)
_last_sizes: list[tuple[str, list[re.Match[str]]]] = [("", [])]  # the sizes of the last text asked about


@lru_cache(maxsize=512)
def _size_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern[len(_SIZE_FIRST):] if pattern.startswith(_SIZE_FIRST) else pattern.replace("SIZE", SIZE))


def _sizes(text: str) -> list[re.Match[str]]:
    cached = _last_sizes[0]  # one read: another thread's parser may replace it meanwhile
    if cached[0] is not text:
        cached = _last_sizes[0] = (text, list(_SIZES.finditer(text)))
    return cached[1]


def _size(pattern: str, text: str) -> int | None:
    """The size `pattern` places (its `SIZE`), in bytes. A pattern that begins with the size is matched after each
    size the text has (one pass finds them all): `re` would otherwise try the size at every character, ~20 µs a
    search on an OOM line, and an OOM line asks for five."""
    regex = _size_regex(pattern)
    if pattern.startswith(_SIZE_FIRST):
        match = next((size for size in _sizes(text) if regex.match(text, size.end())), None)
    else:
        match = regex.search(text)
    return to_bytes(match.group(1), match.group(2)) if match else None


def _int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else None


def _first(*values: int | None) -> int | None:
    """The first value that is not None (0 bytes free is a value)."""
    return next((v for v in values if v is not None), None)


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


def _first_rank(text: str) -> int | None:
    match = re.search(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|on rank (\d+)", text)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _pg(text: str) -> str | None:
    match = re.search(r"PG GUID (\S+?)(?: Rank|\])", text) or re.search(r"\[PG (?:ID )?(\d+)", text)
    return match.group(1) if match else None


def _gpu_any(text: str) -> int | None:
    match = re.search(r"\(GPU\s*(\d+)\s*;|GPU\s*(\d+)\s*has\s*a\s*total|device:GPU:(\d+)|GPU_(\d+)_bfc"
                      r"|device\s*ordinal\s*(\d+)", text)
    if not match:
        return None
    return int(next(g for g in match.groups() if g is not None))


def _pci(text: str) -> str | None:
    """The canonical PCI form of events (engine.events.canonical_pci_bus)."""
    return canonical_pci_bus(text)


_RECORD = r"(?:Traceback|File \"|During handling|The above exception|terminate called|\[|\w[\w.]*(?:Error|Exception)\b)"
NEW_RECORD = _c(r"^\s*(?:" + _RECORD + r"|\d{4}-\d\d-\d\d|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|NCCL\b|$)")
