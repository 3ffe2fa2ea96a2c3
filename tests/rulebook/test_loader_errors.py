"""Bad rulebooks: every problem reported, in file order, as exact `file:line:col: ...` text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rulebook import check_paths, load_directory, load_rulebook, load_rulebook_text


def problems_of(path: Path) -> list[str]:
    with pytest.raises(RulebookError) as caught:
        load_rulebook(path)
    return [str(p) for p in caught.value.problems]


def text_problems(text: str, name: str = "t.yaml") -> list[str]:
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(text, name)
    return [str(p) for p in caught.value.problems]


def test_every_problem_in_file_order(fixtures: Path) -> None:
    path = fixtures / "bad" / "many-problems.yaml"
    f = str(path)
    assert problems_of(path) == [
        f"{f}:12:10: rule \"oom-storm\": unknown SLO 'token-latncy' (did you mean 'token-latency'?)",
        f"{f}:13:15: rule \"oom-storm\": severity 'fatal' must be one of critical, error, warning, info",
        f"{f}:15:7: rule \"oom-storm\": a count needs 'within'",
        f"{f}:18:7: rule \"oom-storm\": unknown field 'withn' (did you mean 'within'?)",
        f"{f}:26:14: rule \"frag\": unknown event kind 'mem_fragmentaton' "
        "(did you mean 'mem_fragmentation'?)",
        f"{f}:35:40: rule \"stall\": '>' needs a number field; 'endpoint' is a string field",
        f"{f}:36:14: rule \"stall\": summary template: unexpected '}}' (template line 1)",
        f"{f}:38:9: rule \"oom-storm\": duplicate rule id 'oom-storm' (first at line 10)",
        f"{f}:44:11: rule \"oom-storm\": unknown field 'requested_bytez' for event cuda_oom "
        "(did you mean 'requested_bytes'?)",
        f"{f}:45:22: rule \"oom-storm\": unknown field 'gpuu' for event cuda_oom in 'group_by' "
        "(did you mean 'gpu'?)",
    ]


def test_string_number_mismatch_column(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text("probe_status", "dropped > 0 and state == 3")
    assert text_problems(text) == [
        "t.yaml:16:36: rule \"r1\": 'state' is a string field; "
        "it cannot be compared with number 3 (quote it: '3')"
    ]


def test_quoted_expression_column_skips_the_quote(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text("gpu_xid", "\"xid == 'a'\"")
    assert text_problems(text) == [
        "t.yaml:16:19: rule \"r1\": 'xid' is a number field; it cannot be compared with string 'a'"
    ]


def test_multiline_expression_points_at_the_value(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text("gpu_xid", "|\n        xid == 1 and\n        nope == 2")
    assert text_problems(text) == [
        "t.yaml:16:11: rule \"r1\": unknown field 'nope' for event gpu_xid"
    ]


def test_anchor_refused(fixtures: Path) -> None:
    path = fixtures / "bad" / "anchor.yaml"
    assert problems_of(path) == [
        f"{path}:4:9: YAML anchor '&common' is not allowed: rulebooks use 'lists' and 'macros' for reuse "
        "(this also rules out alias bombs)"
    ]


def test_alias_refused(fixtures: Path) -> None:
    path = fixtures / "bad" / "alias-bomb.yaml"
    assert problems_of(path) == [
        f"{path}:2:5: YAML alias '*a' is not allowed: rulebooks use 'lists' and 'macros' for reuse "
        "(this also rules out alias bombs)"
    ]


def test_unsafe_tags_refused(fixtures: Path) -> None:
    path = fixtures / "bad" / "tag.yaml"
    assert problems_of(path) == [
        f"{path}:6:12: YAML tag 'tag:yaml.org,2002:python/object:os.system' is not allowed in a rulebook "
        "(only plain YAML is)",
        f"{path}:7:14: YAML tag '!custom' is not allowed in a rulebook (only plain YAML is)",
    ]


def test_syntax_error(fixtures: Path) -> None:
    path = fixtures / "bad" / "syntax.yaml"
    assert problems_of(path) == [f"{path}:5:11: YAML syntax error: mapping values are not allowed here"]


def test_duplicate_key(fixtures: Path) -> None:
    path = fixtures / "bad" / "dupkey.yaml"
    assert problems_of(path) == [f"{path}:3:1: duplicate key 'rulebook' (first at line 1)"]


def test_file_over_one_mib_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (1024 * 1024 + 1))
    too_big = "file is 1048577 bytes; rulebooks are limited to 1 MiB (1048576 bytes)"
    assert problems_of(path) == [f"{path}: {too_big}"]
    assert text_problems("#" * (1024 * 1024 + 1)) == [
        "t.yaml: file is 1048577 bytes; rulebooks are limited to 1 MiB (1048576 bytes)"
    ]


def test_non_utf8_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"rulebook: x\ndescription: caf\xe9\n")
    assert problems_of(path) == [f"{path}:2:17: file is not valid UTF-8 (byte 28: invalid continuation byte)"]


def test_structure_problems(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text().replace('version: "1.0.0"', "version: 1").replace("id: r1", "id: R1")
    assert text_problems(text) == [
        "t.yaml:2:10: 'version' must be a string, got 1 (quote it)",
        "t.yaml:10:9: rule \"R1\": name 'R1' must use lowercase letters, digits, '-' and '_', "
        "starting with a letter or digit",
    ]


def test_form_problems(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text().replace("      if: big_request", "      within: 5m")
    assert text_problems(text) == [
        "t.yaml:16:7: rule \"r1\": 'within' does not apply to a single-event trigger"]


def test_empty_and_non_mapping() -> None:
    assert text_problems("") == ["t.yaml:1:1: a rulebook must be a YAML mapping with 'rulebook', 'version', "
                                 "'slos' and 'rules'"]
    assert text_problems("- a\n") == text_problems("")


def test_requires_checked(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text().replace("slos:", 'requires: ">=99"\nslos:', 1)
    assert text_problems(text) == ["t.yaml:3:11: this rulebook requires gpuslo >=99, but this is 0.1.0"]


def test_template_unknown_variable(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text().replace("{{ event.host }}", "{{ evnt.host }}")
    assert text_problems(text) == [
        "t.yaml:17:14: rule \"r1\": summary template uses unknown variable 'evnt' "
        "(known: event, group, collective, cascade) "
        "(did you mean 'event'?)"
    ]


def test_directory_duplicates_and_test_files(fixtures: Path) -> None:
    books, problems = load_directory(fixtures / "dupdir")
    d = fixtures / "dupdir"
    assert [b.name for b in books] == ["first"]
    assert [str(p) for p in problems] == [
        f"{d}/b.yaml:1:11: duplicate rulebook name 'first' (first defined at {d}/a.yaml:1:11)",
        f"{d}/b.yaml:6:5: rule \"shared-id\": duplicate rule id 'shared-id' "
        f"(first defined at {d}/a.yaml:6:5)",
        f"{d}/c.yml:6:5: rule \"shared-id\": duplicate rule id 'shared-id' "
        f"(first defined at {d}/a.yaml:6:5)",
        f"{d}/d.yaml:2:1: YAML syntax error: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence)",
    ]


def test_check_paths(fixtures: Path, tmp_path: Path, rulebook_text: Callable[..., str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(rulebook_text())
    assert check_paths([good]) == ()
    problems = [str(p) for p in check_paths([tmp_path / "missing.yaml", fixtures / "bad" / "dupkey.yaml"])]
    assert problems == [
        f"{tmp_path}/missing.yaml: no such file or directory",
        f"{fixtures}/bad/dupkey.yaml:3:1: duplicate key 'rulebook' (first at line 1)",
    ]


def test_good_rulebook_builds(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text()
    book = load_rulebook_text(text, "t.yaml")
    assert book.source == text and book.name == "mini" and book.rules[0].group_by == ("host",)
    assert book.rule("r1").location.line == 10
    assert str(book.rules[0].when.pattern.condition) == "requested_bytes >= 1GiB"


def test_unknown_summary_filter_is_a_located_problem(tmp_path):
    from gpuslo.engine.rulebook import check_paths

    source = Path("rules/latency.yaml").read_text()
    broken = tmp_path / "latency.yaml"
    broken.write_text(source.replace("summary: >-", "summary: >-\n      {{ event.host | nosuchfilter }}", 1))
    (problem,) = check_paths([broken])
    assert "summary template: No filter named 'nosuchfilter'." in str(problem)
    assert str(problem).startswith(f"{broken}:")


@pytest.mark.parametrize(("original", "broken"), [
    ("lists:\n  fatal_xids: [48, 79]\n", "lists: fatal\n"),
    ("macros:\n  big_request: requested_bytes >= 1GiB\n", "macros: [big]\nzzz_big_request: 1\n"),
])
def test_lists_or_macros_that_are_no_mapping_are_reported_not_a_crash(rulebook_text, original, broken) -> None:
    problems = text_problems(rulebook_text().replace(original, broken))
    assert problems and all(p.startswith("t.yaml:") for p in problems)
    assert any(("lists" if "lists" in broken else "macros") in p for p in problems)


def test_an_slo_window_of_zero_is_reported_with_its_location(rulebook_text) -> None:
    text = rulebook_text().replace("window: 28d", "window: 0s")
    assert text_problems(text) == ["t.yaml:4:60: 'window' must be above 0, got 0s"]


def test_a_pattern_name_that_is_no_string_is_reported_not_a_crash(rulebook_text) -> None:
    text = rulebook_text().replace(
        "    when:\n      event: cuda_oom\n      if: big_request\n",
        "    when:\n      all:\n        - {name: [a], event: cuda_oom}\n        - {name: b, event: cuda_oom}\n"
        "      within: 10s\n      same: [host]\n")
    problems = text_problems(text)
    assert problems and all(p.startswith("t.yaml:") for p in problems)
    assert any("name" in p for p in problems)


# ---- hostile files: limits and characters, each a located error (never a RecursionError or ReaderError) ----


def test_ten_thousand_levels_of_nesting_is_one_located_error() -> None:
    assert text_problems("a: " + "[" * 10_000 + "]" * 10_000 + "\n") == [
        "t.yaml:1:67: nesting deeper than 64 levels is not allowed in a rulebook"]


def test_a_nul_byte_and_other_control_characters_are_located(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text()
    assert text_problems(text.replace("restart", "re\x00start")) == [
        "t.yaml:18:20: character U+0000 is not allowed in YAML (special characters are not allowed)"]
    assert text_problems(text.replace("restart", "re\x1bstart")) == [
        "t.yaml:18:20: character U+001B is not allowed in YAML (special characters are not allowed)"]


@pytest.mark.parametrize(("escape", "what"), [
    ("\\0", "U+0000 (a control character)"), ("\\x07", "U+0007 (a control character)"),
    ("\\ud800", "U+D800 (a lone surrogate)")])
def test_escapes_that_postgresql_cannot_store_are_refused(rulebook_text: Callable[..., str], escape: str,
                                                         what: str) -> None:
    text = rulebook_text().replace("remediation: restart", f'remediation: "re{escape}start"')
    assert text_problems(text) == [f"t.yaml:18:18: {what} is not allowed in rulebook text"]


def test_an_explicit_tag_whose_value_does_not_fit_is_located(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text().replace("remediation: restart", "remediation: !!bool maybe")
    assert text_problems(text) == ["t.yaml:18:18: value 'maybe' is not a valid bool ('maybe')"]


@pytest.mark.parametrize("condition", [
    "(" * 5000 + "requested_bytes >= 1" + ")" * 5000, "not " * 5000 + "big_request"])
def test_conditions_nested_past_the_limit_are_located(rulebook_text: Callable[..., str], condition: str) -> None:
    (problem,) = text_problems(rulebook_text(condition=condition))
    assert problem.startswith("t.yaml:16:") and problem.endswith(
        'rule "r1": condition nests deeper than 50 levels (parentheses, \'not\', macros)')


def test_a_chain_of_macros_past_the_limit_is_located(rulebook_text: Callable[..., str]) -> None:
    chain = "".join(f"  m{i}: m{i + 1}\n" for i in range(200)) + "  m200: requested_bytes >= 1\n"
    text = rulebook_text(condition="m0").replace("  big_request: requested_bytes >= 1GiB\n", chain)
    (problem,) = text_problems(text)
    assert problem.startswith('t.yaml:216:11: rule "r1": in macro \'m0\': in macro \'m1\':')
    assert problem.endswith("condition nests deeper than 50 levels (parentheses, 'not', macros)")


@pytest.mark.parametrize(("condition", "why"), [
    ("requested_bytes >= 99999999999999999999", "out of the 64-bit integer range events can hold"),
    ("requested_bytes >= 9999999999999TiB", "out of the 64-bit integer range events can hold"),
    ("requested_bytes >= " + "9" * 400 + ".5", "not a finite number")])
def test_numbers_the_engine_cannot_hold_are_refused(rulebook_text: Callable[..., str], condition: str,
                                                   why: str) -> None:
    (problem,) = text_problems(rulebook_text(condition=condition))
    assert problem.startswith('t.yaml:16:30: rule "r1": number ') and problem.endswith(f": {why}")


def test_a_summary_nested_too_deeply_for_python_is_refused_at_load(rulebook_text: Callable[..., str]) -> None:
    text = rulebook_text().replace('"{{ event.host }}"', '"{{ ' + "(" * 3000 + "1" + ")" * 3000 + ' }}"')
    assert text_problems(text) == [
        't.yaml:17:14: rule "r1": summary template cannot be compiled: it nests too deeply '
        "(keep a summary to a sentence with a few {{ fields }} and {% if %} blocks)"]


def test_a_loader_bug_costs_only_its_file(tmp_path: Path, rulebook_text: Callable[..., str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuslo.engine.rulebook.load as rulebook_package

    (tmp_path / "a.yaml").write_text(rulebook_text())
    (tmp_path / "b.yaml").write_text(rulebook_text().replace("mini", "other").replace("id: r1", "id: r2"))
    real = rulebook_package.load_rulebook

    def flaky(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
        if path.name == "a.yaml":
            raise KeyError("a bug")
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rulebook_package, "load_rulebook", flaky)
    good, problems = load_directory(tmp_path)
    assert [b.name for b in good] == ["other"]
    assert [str(p) for p in problems] == [
        f"{tmp_path / 'a.yaml'}: could not be loaded: KeyError: 'a bug' (a gpuslo bug: please report it)"]
