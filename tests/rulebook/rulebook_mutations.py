"""Hypothesis strategies that mutate real rulebooks, and the fuzz target: load → validate → build → compile →
render, where anything but a located RulebookError is a bug.

Two mutators: bytes (flip, insert hostile tokens, delete, duplicate, splice lines of another seed) and structure
(replace a node of the parsed YAML with a hostile value, then dump it back), which gets past the YAML syntax to
the validator and the builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import strategies as st

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.events import parse_event
from gpuslo.engine.explain import SummaryRenderer
from gpuslo.engine.matcher import definition
from gpuslo.engine.plan import plan_rulebook
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.rulebook.marked_yaml import decode

ROOT = Path(__file__).resolve().parents[2]
SEEDS = tuple(
    path.read_bytes()
    for path in sorted([*(ROOT / "rules").glob("*.yaml"), ROOT / "tests/engine/golden/diagnostics.yaml",
                        *(ROOT / "tests/fixtures/rulebooks/bad").glob("*.yaml")])
    if not path.name.endswith(".test.yaml")
)
FILENAME = "fuzz.yaml"
TOKENS = (
    b"\x00", b"\xff", b"\xc3", b"\t", b"\r", b"\n", b"  ", b"- ", b": ", b"{", b"}", b"[", b"]", b"'", b'"', b"#",
    b"&a ", b"*a", b"!!int ", b"!!float ", b"!!bool ", b"!!map ", b"!!seq ", b"!!str ", b"!!binary ", b"? ",
    b"!!python/object:os.system ", b"<<: ", b"1e400", b"-1e400", b".nan", b"99999999999999999999999", b"-0",
    b"0x7fffffffffffffffff", b"2025-13-45", b"\\ud800", b"\\0", b"\\x07", b"~", b"null", b"yes", b"[" * 200,
    b"(" * 80, b"not " * 60, b" and ", b" or ", b" in ", b" has ", b" matches '(a)\\\\1'", b" matches '^(a+)+$'",
    b" contains ''", b"{{ event.host * 4000000 }}", b"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", b"{{",
    b"}}", b"{%", b"%}", b"'{0.__class__}'.format_map(event)", b"1GiB", b"200ms", b"0s", b"-5m", b"99999999d",
    b"\xe2\x80\xae", b"\xef\xbb\xbf",
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from([t.decode("utf-8", "replace") for t in TOKENS]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=12) | st.sampled_from(["when", "if", "event", "all", "count", "within", "same", "absent",
                                            "for", "after", "resolve", "summary", "rules", "macros", "lists"]),
    inner, max_size=4), max_leaves=12)


@dataclass(frozen=True)
class ByteEdit:
    kind: str  # flip | insert | delete | duplicate | splice
    at: float  # where, as a fraction of the length
    size: int
    payload: bytes


BYTE_EDITS = st.builds(
    ByteEdit, st.sampled_from(["flip", "insert", "insert", "delete", "duplicate", "splice"]),
    st.floats(min_value=0, max_value=1), st.integers(min_value=1, max_value=64),
    st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=8),
)


def apply_edit(data: bytes, edit: ByteEdit, other: bytes) -> bytes:
    at = int(edit.at * len(data))
    if edit.kind == "flip" and data:
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ (1 << (edit.size % 8))]) + data[at + 1:]
    if edit.kind == "insert":
        return data[:at] + edit.payload + data[at:]
    if edit.kind == "delete":
        return data[:at] + data[at + edit.size:]
    if edit.kind == "duplicate":
        return data[:at] + data[at:at + edit.size] * 2 + data[at + edit.size:]
    lines, theirs = data.splitlines(keepends=True), other.splitlines(keepends=True)
    if not lines or not theirs:
        return data
    here = min(int(edit.at * len(lines)), len(lines) - 1)
    return b"".join(lines[:here] + theirs[edit.size % len(theirs):][:3] + lines[here:])


@st.composite
def byte_mutants(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from(SEEDS))
    other = draw(st.sampled_from(SEEDS))
    for edit in draw(st.lists(BYTE_EDITS, min_size=1, max_size=6)):
        data = apply_edit(data, edit, other)
    return data


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*path, i))
    return found


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: _replace(node[head], rest, value)}
    copy = list(node)
    copy[head] = _replace(copy[head], rest, value)
    return copy


PARSED = tuple(data for data in (yaml.safe_load(seed) for seed in SEEDS[:7]) if isinstance(data, dict))


@st.composite
def structure_mutants(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from(PARSED))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(data)
        data = _replace(data, draw(st.sampled_from(paths)), draw(VALUES))
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode("utf-8", "surrogatepass")


EVENT = parse_event({"id": "e", "kind": "cuda_oom", "time": "2025-01-01T00:00:00Z", "host": "node-a", "gpu": 0,
                     "attrs": {"requested_bytes": 2 * 1024**3, "free_bytes": 1024**3}, "message": "m" * 200})


def load_everything(raw: bytes) -> str:
    """The fuzz target: what `gpuslo rules check` and the server do with a file. Returns how it ended; raises
    (the bug) on anything but a RulebookError whose every problem is located in the file."""
    try:
        book = load_rulebook_text(decode(raw, FILENAME), FILENAME)
    except RulebookError as exc:
        assert exc.problems, "a RulebookError without problems"
        for problem in exc.problems:
            assert str(problem).startswith(f"{FILENAME}"), str(problem)
        return "refused"
    orjson.dumps(definition(plan_rulebook(book, ruleset="fuzz")))  # what the matcher hands the C core (64-bit ints)
    renderer = SummaryRenderer()
    for rule in book.rules:
        assert renderer.render(rule, EVENT, {"host": "node-a"})  # never raises; default text at worst
    return "loaded"


CONDITION_TOKENS = (
    "requested_bytes", "free_bytes", "host", "gpu", "message", "labels.team", "api", "xid", "m.host", "big_request",
    "==", "!=", "<", "<=", ">", ">=", "in", "not in", "contains", "matches", "has", "and", "or", "not", "(", ")",
    "[", "]", ",", "1GiB", "200ms", "0", "-1", "1.5", "99999999999999999999", "'a'", "'(a)\\\\1'", "'^(a+)+$'",
    "'['", "fatal_xids", "true", "''",
)
TEMPLATE_PIECES = (
    "{{ event.host }}", "{{ event.attrs.requested_bytes | bytes }}", "{% if event.gpu %}", "{% endif %}",
    "{% for x in range(3) %}", "{% endfor %}", "{{ group.host }}", "{{ collective.sentence }}", "{{", "}}", "{%",
    "%}", "{{ event.host * 4000000 }}", "{{ '{0}'.format_map(event) }}", "{{ 9 ** 9 ** 9 }}", "text ", "|",
    "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{{ event.message|center(99999999) }}", "{# c #}",
    "{% set a = event.host %}{% set a = a ~ a %}", "{{ a }}", "{% raw %}", "{% endraw %}", "{{ undefined.x }}",
)


def _rule_paths(data: dict[str, Any]) -> list[int]:
    rules = data.get("rules")
    return list(range(len(rules))) if isinstance(rules, list) else []


@st.composite
def language_mutants(draw: st.DrawFn) -> bytes:
    """A valid rulebook with a rule's condition and summary drawn from the tokens of the languages, so mutants
    get past YAML and the schema to the parser, the builder, the compiler and the renderer."""
    data = draw(st.sampled_from([d for d in PARSED if _rule_paths(d)]))
    index = draw(st.sampled_from(_rule_paths(data)))
    rule = dict(data["rules"][index])
    when = dict(rule["when"]) if isinstance(rule.get("when"), dict) else {}
    if draw(st.booleans()):
        when["if"] = " ".join(draw(st.lists(st.sampled_from(CONDITION_TOKENS), min_size=1, max_size=12)))
    rule["when"] = when
    if draw(st.booleans()):
        rule["summary"] = "".join(draw(st.lists(st.sampled_from(TEMPLATE_PIECES), min_size=1, max_size=8)))
    rules = list(data["rules"])
    rules[index] = rule
    return yaml.safe_dump({**data, "rules": rules}, allow_unicode=True, sort_keys=False).encode()
