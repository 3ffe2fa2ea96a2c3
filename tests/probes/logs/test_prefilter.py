"""The one-pass prefilter finds exactly the lines the TRIGGER regex finds, and events do not depend on it."""

from __future__ import annotations

import random
from bisect import bisect_left

import pytest
from logprobe_helpers import FIXTURES, READ_TIME, fixture_bytes

from gpuslo.probes.logs.catalog import TRIGGER, TRIGGER_WORDS
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.prefilter import Prefilter
from gpuslo.probes.logs.sources import LineAssembler

pytest.importorskip("ahocorasick_rs", reason="ahocorasick-rs has no wheel for this platform")
AUTOMATON = Prefilter(TRIGGER_WORDS, TRIGGER, engine="automaton")
REGEX = Prefilter(TRIGGER_WORDS, TRIGGER, engine="regex")
FIXTURE_NAMES = sorted(path.name for path in FIXTURES.glob("*.log"))


def lines_hit(prefilter: Prefilter, buf: bytes) -> set[int]:
    """Line numbers that contain a reported start."""
    newlines = [at for at, byte in enumerate(buf) if byte == 10]
    return {bisect_left(newlines, at) for at in prefilter.starts(buf, 0, len(buf))}


def test_the_words_are_the_regex_spelled_out():
    assert all(TRIGGER.fullmatch(word) for word in TRIGGER_WORDS)
    glued = b"|".join(TRIGGER_WORDS)
    assert TRIGGER.findall(glued) == list(TRIGGER_WORDS)


def test_automaton_and_regex_hit_the_same_lines_on_fuzzed_text():
    rng = random.Random(7)
    pieces = [w[: rng.randint(1, len(w))] for w in TRIGGER_WORDS for _ in range(3)] + list(TRIGGER_WORDS)
    pieces += [b" ", b"x", b"NCCL INFO ", b"GPU ", b"'s ", b"W", b"\n", b"\n"]
    buf = b"".join(rng.choice(pieces) for _ in range(20_000))
    regex_lines = lines_hit(REGEX, buf)
    assert len(regex_lines) > 100
    assert lines_hit(AUTOMATON, buf) == regex_lines


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_events_are_the_same_with_either_engine(name):
    data = fixture_bytes(name)
    by_engine = []
    for prefilter in (AUTOMATON, REGEX):
        parser = LogParser(ParserSettings(host="n", source=name), clock=lambda: READ_TIME, prefilter=prefilter)
        by_engine.append(parser.scan(data, 0) + parser.flush())
    assert by_engine[0] == by_engine[1]
    assert lines_hit(AUTOMATON, data) == lines_hit(REGEX, data)


@pytest.mark.parametrize("chunk", [1, 7, 64, 333, 4096])
def test_chunk_boundaries_do_not_change_events(chunk):
    data = b"".join(fixture_bytes(name) for name in FIXTURE_NAMES)
    whole = LogParser(ParserSettings(host="n", source="all"), clock=lambda: READ_TIME)
    expected = whole.scan(data, 0) + whole.flush()
    assembler = LineAssembler(LogParser(ParserSettings(host="n", source="all"), clock=lambda: READ_TIME), 64 * 1024)
    got = [event for at in range(0, len(data), chunk) for event in assembler.push(data[at: at + chunk])]
    assert got + assembler.finish() == expected
    assert len(expected) > 20


def test_no_trigger_word_is_shorter_than_three_bytes():
    # the automaton's SIMD prefilter fingerprints as many leading bytes as the shortest word has: one 2-byte word
    # ("HC") made bench/logs.py's prefilter pass 2.4x slower
    assert min(len(word) for word in TRIGGER_WORDS) >= 3
