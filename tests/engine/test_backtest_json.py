"""The backtest reads each line through orjson where that gives json.loads's value, else through json.loads:
values, types and the bad-line reasons stay json.loads's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuslo.engine.backtest import BadLine, _loads, read_events

LINES = [b'{"a": 1, "a": 2}', b"-0", b"-0.0", b"1e2", b"1.5e-320", b"1e309", b"NaN", b"[Infinity]",
         b"18446744073709551615", b"-9223372036854775808", b"-9223372036854775809",
         b"123456789012345678901234567890", b'{"n": 1234567890123456789}', b'{"a":"\\u0000"}',
         b"\xef\xbb\xbf{}", b'"\\ud83d\\ude00"', b'"\\ud800"', b'{"a": 1}\r\n', b"  [1, 2.5, null, true]  ",
         '{"k": "\u00e9"}'.encode("utf-16"), b'{"x": "caf\xc3\xa9"}']
BAD = [b"[1,]", b"{", b'{"a" 1}', b"\xff\xfe\xfd", b"tru", b"1 2"]


def _typed(value: object) -> object:
    """The value with each scalar's type beside it (1 and 1.0 and True differ)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize("raw", LINES)
def test_a_line_decodes_as_json_loads_decodes_it(raw: bytes):
    assert _typed(_loads(raw)) == _typed(json.loads(raw))


@pytest.mark.parametrize("raw", BAD)
def test_a_bad_line_fails_as_json_loads_fails(raw: bytes):
    with pytest.raises((ValueError, UnicodeDecodeError)) as expected:
        json.loads(raw)
    with pytest.raises(type(expected.value)) as refused:
        _loads(raw)
    assert str(refused.value) == str(expected.value)


def test_read_events_reports_a_bad_line_with_json_loads_reason(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"[1,]\n")
    with path.open("rb") as stream:
        (bad,) = list(read_events(stream))
    assert isinstance(bad, BadLine) and bad.line == 1
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(b"[1,]")
    assert bad.reason == f"not JSON: {expected.value}"


def test_read_events_reports_every_byte_read_in_few_calls(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    line = json.dumps({"id": "e", "kind": "token_stall", "time": "2026-01-01T00:00:00Z", "host": "h",
                       "attrs": {"gap_ms": 300}})
    path.write_text("".join(line.replace('"e"', f'"e{i}"') + "\n" + ("\n" if i % 7 == 0 else "")
                            for i in range(3000)))
    heard: list[int] = []
    with path.open("rb") as stream:
        events = list(read_events(stream, heard.append))
    assert len(events) == 3000 and not any(isinstance(e, BadLine) for e in events)
    assert sum(heard) == path.stat().st_size and len(heard) == 4  # 3,429 lines: 3 full thousands and the rest
