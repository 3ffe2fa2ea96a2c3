"""The incremental SSE decoder and the OpenAI chunk reader, on bytes cut at every possible place."""

from __future__ import annotations

import json

import pytest

from gpuslo.probes.tokens.sse import (
    MAX_LINE_CHARS,
    SseDecoder,
    SseError,
    SseMessage,
    interpret,
    resolve_endpoint,
)

WIRE = (
    b": ping\r\n\r\n"
    b"event: message\r\ndata: {\"a\": 1}\r\n\r\n"
    b"data: line one\ndata: line two\n\n"
    b"data:no-space\r\rdata: [DONE]\n\n"
)
EXPECTED = [SseMessage('{"a": 1}'), SseMessage("line one\nline two"), SseMessage("no-space"),
            SseMessage("[DONE]")]


def test_whole_stream_at_once():
    assert SseDecoder().feed(WIRE) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(WIRE)))
def test_same_messages_wherever_the_bytes_are_cut(cut):
    decoder = SseDecoder()
    assert decoder.feed(WIRE[:cut]) + decoder.feed(WIRE[cut:]) == EXPECTED


def test_utf8_split_inside_a_character():
    wire = "data: é€\n\n".encode()
    decoder = SseDecoder()
    got = [m for i in range(len(wire)) for m in decoder.feed(wire[i:i + 1])]
    assert got == [SseMessage("é€")]


def test_named_event_and_message_only_at_blank_line():
    decoder = SseDecoder()
    assert decoder.feed(b"event: error\ndata: x\n") == []
    assert decoder.feed(b"\n") == [SseMessage("x", "error")]


def test_endless_line_is_refused():
    with pytest.raises(SseError, match="longer than"):
        SseDecoder().feed(b"data: " + b"x" * (MAX_LINE_CHARS + 1))


def chat(delta: dict) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


@pytest.mark.parametrize(("data", "api", "has_token"), [
    (chat({"role": "assistant", "content": ""}), "chat", False),
    (chat({"content": "Hi"}), "chat", True),
    (chat({"reasoning_content": "think"}), "chat", True),
    (chat({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}), "chat", True),
    (json.dumps({"choices": [], "usage": {"completion_tokens": 5}}), "chat", False),
    (json.dumps({"choices": [{"index": 0, "text": " the"}]}), "completions", True),
    (json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}), "completions", False),
])
def test_interpret_counts_only_generated_text(data, api, has_token):
    chunk = interpret(data, api)
    assert chunk.has_token is has_token and chunk.done is False


def test_interpret_done_and_errors():
    assert interpret(" [DONE] ", "chat").done
    with pytest.raises(SseError, match="malformed SSE data"):
        interpret('{"choices": [', "chat")
    with pytest.raises(SseError, match="malformed SSE data"):
        interpret("[1, 2]", "chat")
    with pytest.raises(SseError, match="server error in stream: boom"):
        interpret('{"error": {"message": "boom"}}', "chat")


@pytest.mark.parametrize(("url", "api", "expected"), [
    ("http://h:8000", None, ("http://h:8000/v1/chat/completions", "chat")),
    ("http://h:8000/", "completions", ("http://h:8000/v1/completions", "completions")),
    ("http://h:8000/v1", "chat", ("http://h:8000/v1/chat/completions", "chat")),
    ("http://h:8000/v1/completions", "chat", ("http://h:8000/v1/completions", "completions")),
    ("http://h/x/v1/chat/completions/", None, ("http://h/x/v1/chat/completions", "chat")),
])
def test_resolve_endpoint(url, api, expected):
    assert resolve_endpoint(url, api) == expected
