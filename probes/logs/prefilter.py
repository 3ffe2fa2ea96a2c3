"""Finds the lines worth parsing: every trigger word searched in one pass over a chunk.

`re` tries its alternation at every byte that could begin a branch (~0.2 GB/s on GPU job logs); one
`bytes.find` per word is memchr/two-way fast but ~20 passes add up to more. An Aho-Corasick automaton
(ahocorasick-rs, SIMD-accelerated) reads the chunk once at GB/s. Both engines report the same lines.
"""

from __future__ import annotations

import re
from typing import Literal

from gpuslo.engine.errors import ProbeError

try:
    import ahocorasick_rs
except ImportError:  # a platform without a wheel: the regex engine finds the same lines, slower
    ahocorasick_rs = None  # type: ignore[assignment]

Engine = Literal["auto", "automaton", "regex"]
_GROUP = 32  # words per automaton (two for up to 64 words: three or four measured slower)


class Prefilter:
    """Start offsets of trigger words (the literal expansion of `regex`, which must find the same ones)."""

    def __init__(self, words: tuple[bytes, ...], regex: re.Pattern[bytes], engine: Engine = "auto"):
        if engine == "automaton" and ahocorasick_rs is None:
            raise ProbeError("log prefilter engine 'automaton' needs ahocorasick-rs; pip install ahocorasick-rs")
        self.engine = "automaton" if engine != "regex" and ahocorasick_rs is not None else "regex"
        self._regex = regex
        # leftmost-first is the regex's own semantics, and only leftmost kinds get the crate's SIMD prefilter
        # (standard matching measured 8x slower on bench/logs.py)
        leftmost = ahocorasick_rs.MatchKind.LeftmostFirst if ahocorasick_rs is not None else None
        # Two automata of ~29 words each read a chunk faster than one of 58 (22-24 vs 53-59 ms over bench/logs.py's
        # 100 MB): the SIMD prefilter puts fewer words in each of its buckets, so fewer false candidates.
        groups = -(-len(words) // _GROUP)
        size = -(-len(words) // groups) if words else 1
        self._automata = [ahocorasick_rs.BytesAhoCorasick(list(words[at:at + size]), matchkind=leftmost)
                          for at in range(0, len(words), size)] if self.engine == "automaton" else []

    def starts(self, buf: bytes, start: int, end: int) -> list[int]:
        """Ascending offsets (into `buf`) of matches in `buf[start:end]`. Words hold no newline, so every line
        that contains a word has at least one reported start (non-overlapping matches hide only another
        match on the same line)."""
        if not self._automata:
            return [match.start() for match in self._regex.finditer(buf, start, end)]
        view = memoryview(buf)[start:end]
        found = [start + at for automaton in self._automata for _, at, _ in automaton.find_matches_as_indexes(view)]
        return sorted(found) if len(self._automata) > 1 else found
