"""The condition language: precedence, operators, literals with units, macros, lists, and typed errors."""

from __future__ import annotations

import pytest

from gpuslo.engine.errors import Location, RulebookError
from gpuslo.engine.rulebook.expr import parse_expression
from gpuslo.engine.rulebook.model import And, Compare, Exists, FieldRef, Literal, Not, Or
from gpuslo.engine.rulebook.regex import HINT, regex_problem

AT = Location("r.yaml", 7, 11)
MACROS = {"big_request": "requested_bytes >= 1GiB", "loop": "loop", "broken": "nope > 1",
          "fatal": "xid in fatal_xids"}
LISTS = {"fatal_xids": (48, 79), "states": ("down", "unavailable"), "mixed": ("a", 1)}


def parse(text: str, kind: str = "cuda_oom", **kw):  # type: ignore[no-untyped-def]
    return parse_expression(text, kind, location=AT, macros=MACROS, lists=LISTS, **kw)


def error(text: str, kind: str = "cuda_oom", **kw) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(RulebookError) as caught:
        parse(text, kind, **kw)
    assert len(caught.value.problems) == 1
    return str(caught.value.problems[0])


def test_precedence_and_binds_tighter_than_or() -> None:
    expr = parse("error_code == 2 or api == 'cuMemAlloc' and free_bytes < 1GiB")
    assert isinstance(expr, Or)
    assert expr.items[0] == Compare("==", FieldRef("error_code"), Literal(2, "2"))
    assert isinstance(expr.items[1], And) and len(expr.items[1].items) == 2


def test_parentheses_and_not() -> None:
    expr = parse("not (error_code == 2 or error_code == 3) and has pid")
    assert isinstance(expr, And)
    assert isinstance(expr.items[0], Not) and isinstance(expr.items[0].item, Or)
    assert expr.items[1] == Exists(FieldRef("pid"))
    assert parse("not not has pid") == Not(Not(Exists(FieldRef("pid"))))


def test_in_and_not_in() -> None:
    in_list = Compare("in", FieldRef("xid"), Literal((48, 79), "[48, 79]"))
    assert parse("xid in [48, 79]", "gpu_xid") == in_list
    assert parse("xid not in fatal_xids", "gpu_xid") == Not(
        Compare("in", FieldRef("xid"), Literal((48, 79), "fatal_xids")))
    assert parse("state in ['down', \"unavailable\"]", "probe_status").right.value == ("down", "unavailable")


def test_contains_matches_and_labels() -> None:
    assert parse("detail contains 'timeout'", "nccl_error") == Compare(
        "contains", FieldRef("detail"), Literal("timeout", "'timeout'"))
    expr = parse(r"labels.team == 'serving' and message matches 'NCCL (WARN|INFO) .*\d+'", "nccl_error")
    assert expr.items[0].left == FieldRef("labels.team")
    assert expr.items[1].right.value == r"NCCL (WARN|INFO) .*\d+"
    assert parse(r"detail matches 'it\'s'", "nccl_error").right.value == "it's"


def test_literals_and_unit_conversion() -> None:
    assert parse("requested_bytes > 1.5GB").right == Literal(1_500_000_000, "1.5GB")
    assert parse("free_bytes <= 512MiB").right == Literal(512 * 2**20, "512MiB")
    assert parse("gap_ms >= 1s", "token_stall").right == Literal(1000.0, "1s")
    assert parse("gap_ms >= 200ms", "token_stall").right == Literal(200.0, "200ms")
    assert parse("duration_us > 2ms").right == Literal(2000.0, "2ms")
    assert parse("window_s >= 5m", "token_latency").right == Literal(300.0, "5m")
    assert parse("fragmentation_ratio > 0.65", "mem_fragmentation").right == Literal(0.65, "0.65")


def test_macros_and_lists_expand() -> None:
    assert parse("big_request") == Compare(">=", FieldRef("requested_bytes"), Literal(2**30, "1GiB"))
    assert parse("fatal and gpu == 0", "gpu_xid").items[0].right == Literal((48, 79), "fatal_xids")


def test_correlation_aliases() -> None:
    expr = parse("gpu == frag.gpu and frag.fragmentation_ratio > 0.5", "token_stall",
                 aliases={"frag": "mem_fragmentation"})
    assert expr.items[0].right == FieldRef("gpu", "frag")
    assert expr.items[1].left == FieldRef("fragmentation_ratio", "frag")
    assert error("host == frag.gpu", "token_stall", aliases={"frag": "mem_fragmentation"}) == (
        "r.yaml:7:19: 'host' is a string field but 'frag.gpu' is a number field")


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("requested_bytez > 1", "cuda_oom",
         "r.yaml:7:11: unknown field 'requested_bytez' for event cuda_oom (did you mean 'requested_bytes'?)"),
        ("api == 3", "cuda_oom", "r.yaml:7:18: 'api' is a string field; it cannot be compared with number 3 "
         "(quote it: '3')"),
        ("error_code == 'x'", "cuda_oom", "r.yaml:7:25: 'error_code' is a number field; "
         "it cannot be compared with string 'x'"),
        ("xid == 4GiB", "gpu_xid", "r.yaml:7:18: size 4GiB only compares with *_bytes fields, not 'xid'"),
        ("free_bytes > 5s", "cuda_oom",
         "r.yaml:7:24: duration 5s only compares with *_ms, *_us or *_s fields, not 'free_bytes'"),
        ("gap_ms > 5parsecs", "token_stall", "r.yaml:7:20: unknown unit in '5parsecs' "
         "(sizes: B KB MB GB KiB MiB GiB; durations: us ms s m h d)"),
        ("xid contains 'a'", "gpu_xid", "r.yaml:7:24: 'contains' needs a string field; "
         "'xid' is a number field"),
        ("api > 'a'", "cuda_oom", "r.yaml:7:15: '>' needs a number field; 'api' is a string field"),
        ("state == down", "probe_status", "r.yaml:7:20: expected a value (number, 'string', 1GiB, 200ms) "
         "after 'state', found 'down' (quote strings: 'down')"),
        ("xid == 1 xid == 2", "gpu_xid", "r.yaml:7:20: unexpected 'xid'; join conditions with 'and' / 'or'"),
        ("(xid == 1", "gpu_xid", "r.yaml:7:20: expected ')' to close '(', found end of condition"),
        ("xid == 'a", "gpu_xid", "r.yaml:7:18: unterminated string"),
        ("xid = 1", "gpu_xid", "r.yaml:7:15: unexpected character '='"),
        ("xid", "gpu_xid", "r.yaml:7:14: expected a comparison after 'xid' (== != < <= > >= in contains "
         "matches), found end of condition"),
        ("", "gpu_xid", "r.yaml:7:11: empty condition"),
        ("xid in fatal_xid", "gpu_xid", "r.yaml:7:18: unknown list 'fatal_xid' (did you mean 'fatal_xids'?)"),
        ("xid in states", "gpu_xid", "r.yaml:7:18: list 'states' holds 'down', but 'xid' is a number field"),
        ("loop", "gpu_xid", "r.yaml:7:11: in macro 'loop': macro 'loop' refers to itself (loop -> loop)"),
        ("xid == 1 and broken", "gpu_xid", "r.yaml:7:24: in macro 'broken': "
         "unknown field 'nope' for event gpu_xid"),
        ("xid == true", "gpu_xid", "r.yaml:7:18: 'xid' is a number field; it cannot be compared with true"),
    ],
)
def test_errors_point_at_the_token(text: str, kind: str, message: str) -> None:
    assert error(text, kind) == message


def test_multiline_expression_uses_the_node_location() -> None:
    assert error("xid == 1 and\nnope == 2", "gpu_xid") == (
        "r.yaml:7:11: unknown field 'nope' for event gpu_xid")
    assert error("xid == 1 and nope == 2", "gpu_xid", exact_columns=False) == (
        "r.yaml:7:11: unknown field 'nope' for event gpu_xid")


def test_regex_that_does_not_compile_is_refused() -> None:
    assert regex_problem("(") == ("does not compile under RE2: missing ): (", None)


@pytest.mark.parametrize(
    "pattern", [r"NCCL.*", r"^Xid \d{2}$", r"(?i)out of memory", r"\bword\b", r"[]a]", "\\[x\\]", r"^(a+)+$",
                r"(?P<rank>\d+)", r"\z", r"a{2,5}?"])
def test_any_re2_regex_is_accepted(pattern: str) -> None:
    assert regex_problem(pattern) is None


@pytest.mark.parametrize(("pattern", "what"), [
    (r"(a)\1", "backreferences ('\\1')"),
    (r"(?P<n>a)(?P=n)", "named backreferences '(?P=name)'"),
    (r"(?=a)b", "lookahead '(?=...)' / '(?!...)'"),
    (r"a(?!b)", "lookahead '(?=...)' / '(?!...)'"),
    (r"(?<=a)b", "lookbehind '(?<=...)' / '(?<!...)'"),
    (r"(?>a)", "atomic groups '(?>...)'"),
    (r"a++", "possessive quantifiers ('++', '*+', '?+')"),
    (r"x\Z", "'\\Z' (write '\\z' or '$')"),
])
def test_what_re2_cannot_run_is_named_with_a_hint(pattern: str, what: str) -> None:
    problem = regex_problem(pattern)
    assert problem is not None and problem[0].startswith(f"RE2 does not support {what} (") and problem[1] == HINT


def test_a_backreference_is_a_located_rulebook_error_with_the_hint() -> None:
    with pytest.raises(RulebookError) as caught:
        parse_expression(r"detail matches '(x)\1'", "gpu_xid", location=Location("r.yaml", 7, 11))
    (problem,) = caught.value.problems
    assert str(problem) == (
        "r.yaml:7:26: regex '(x)\\1': RE2 does not support backreferences ('\\1') (invalid escape sequence: \\1) "
        f"({HINT})")


def test_matches_error_points_at_the_regex() -> None:
    assert error("detail matches 'x(3'", "gpu_xid") == (
        "r.yaml:7:26: regex 'x(3': does not compile under RE2: missing ): x(3")


def test_str_round_trips_source_spelling() -> None:
    assert str(parse("requested_bytes >= 1GiB and not api in ['a', 'b']")) == (
        "requested_bytes >= 1GiB and not (api in ['a', 'b'])")
