"""The rule-test runner: passing and failing cases with exp/got at file:line, must-not-fire, load errors,
coverage of the shipped rulebooks, pytest collection and `gpuslo rules test`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuslo.cli.rules_test import rules_test
from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rule_tests.files import BASE_TIME, load_test_file
from gpuslo.engine.rule_tests.run import Coverage, coverage, find_test_files, load_pair, run_test_file

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"

BOOK = """\
rulebook: mini
version: "1"
description: two rules for the runner tests
slos:
  s: {service: serving, sli: itl, objective: "p99 < 200 ms", window: 28d}
rules:
  - id: frag
    title: Fragmentation
    description: fragmentation above 0.65 on a GPU
    slo: s
    severity: warning
    when: {event: mem_fragmentation, if: fragmentation_ratio > 0.65}
    group_by: [host, gpu]
    summary: "FR {{ event.attrs.fragmentation_ratio }} on {{ event.host }} GPU {{ event.gpu }}"
    remediation: restart
  - id: storm
    title: OOM storm
    slo: s
    severity: critical
    when: {count: 2, event: cuda_oom, same: [host, gpu], within: 1m}
    group_by: [host, gpu]
    summary: "storm on {{ group.host }}"
    remediation: restart
"""


def _write(directory: Path, tests: str, book: str = BOOK) -> Path:
    (directory / "mini.yaml").write_text(book)
    path = directory / "mini.test.yaml"
    path.write_text(textwrap.dedent(tests))
    return path


PASSING = """\
defaults: {host: node-7, gpu: 3}
tests:
  - name: fires
    events:
      - {at: 1.5s, kind: mem_fragmentation, attrs: {fragmentation_ratio: 0.71}}
    expect:
      - rule: frag
        group: {host: node-7, gpu: 3}
        summary_contains: "FR 0.71 on node-7 GPU 3"
        conditions: ["fragmentation_ratio = 0.71 > 0.65"]
        evidence_count: 1
  - name: stays silent
    events:
      - {at: 0s, kind: mem_fragmentation, attrs: {fragmentation_ratio: 0.2}}
    expect: []
  - name: storm only on one GPU
    events:
      - {at: 0s, kind: cuda_oom}
      - {at: 10s, kind: cuda_oom, gpu: 4}
    not_expect: [storm]
"""


def test_passing_cases_pass_and_events_get_times_from_at(tmp_path: Path):
    path = _write(tmp_path, PASSING)
    result = run_test_file(path)
    assert result.problems == ()
    assert [(c.case.name, c.passed) for c in result.cases] == [
        ("fires", True), ("stays silent", True), ("storm only on one GPU", True)]
    event = result.cases[0].case.events[0]
    assert (event.time - BASE_TIME).total_seconds() == 1.5 and event.host == "node-7" and event.gpu == 3
    assert result.cases[0].got[0].rule_id == "frag" and result.ok


def test_a_failing_expectation_prints_exp_and_got_with_the_case_location(tmp_path: Path):
    path = _write(tmp_path, PASSING.replace('"FR 0.71 on node-7 GPU 3"', '"FR 0.99"'))
    result = run_test_file(path)
    assert [c.passed for c in result.cases] == [False, True, True] and not result.ok
    lines = result.cases[0].message().splitlines()
    assert lines[0] == f'{path}:3:5: case "fires": FAILED'
    assert lines[1] == f'  rule "frag" ({path}:7:9):'
    assert lines[2].startswith('    exp: [{group: {host: node-7, gpu: 3}, summary contains "FR 0.99", conditions:')
    assert lines[3].startswith('    got: [{group: {host: node-7, gpu: 3}, summary: "FR 0.71 on node-7 GPU 3", ')
    assert "fragmentation_ratio = 0.71 > 0.65" in lines[3]


def test_a_rule_that_does_not_fire_shows_an_empty_got(tmp_path: Path):
    path = _write(tmp_path, PASSING.replace("fragmentation_ratio: 0.71", "fragmentation_ratio: 0.5"))
    message = run_test_file(path).cases[0].message()
    assert message.splitlines()[-1] == "    got: []"


def test_an_extra_match_of_an_expected_rule_fails(tmp_path: Path):
    tests = PASSING.replace(
        "      - {at: 1.5s, kind: mem_fragmentation, attrs: {fragmentation_ratio: 0.71}}",
        "      - {at: 1.5s, kind: mem_fragmentation, attrs: {fragmentation_ratio: 0.71}}\n"
        "      - {at: 2s, kind: mem_fragmentation, attrs: {fragmentation_ratio: 0.72}}")
    result = run_test_file(_write(tmp_path, tests))
    assert not result.cases[0].passed
    assert result.cases[0].message().count("summary:") == 2


def test_must_not_fire_and_not_expect_report_what_fired(tmp_path: Path):
    tests = PASSING.replace("fragmentation_ratio: 0.2", "fragmentation_ratio: 0.8").replace(
        "{at: 10s, kind: cuda_oom, gpu: 4}", "{at: 10s, kind: cuda_oom}")
    result = run_test_file(_write(tmp_path, tests))
    silent, storm = result.cases[1], result.cases[2]
    assert silent.message().splitlines()[1:] == [
        "  must not fire at all:",
        "    exp: []",
        '    got: [frag {group: {host: node-7, gpu: 3}, summary: "FR 0.8 on node-7 GPU 3", evidence_count: 1}]',
    ]
    assert storm.message().splitlines()[1:3] == ['  rule "storm" must not fire:', "    exp: []"]
    assert "evidence_count: 2" in storm.message()


@pytest.mark.parametrize(("tests", "expected"), [
    ("tests:\n  - name: x\n    events: [{at: 0s, kind: cuda_oom, hots: a}]\n    expect: []\n",
     ["3:39: unknown field 'hots' in an event (did you mean 'host'?)"]),
    ("tests:\n  - name: x\n    events: [{at: soon, kind: cuda_oom}]\n    expect: []\n",
     ["3:19: 'at': 'soon' is not a duration"]),
    ("tests:\n  - name: x\n    events: [{at: 0s, kind: cuda_oom}]\n    expect: [{rule: fragg}]\n",
     ["4:21: unknown rule 'fragg' (not in the rulebook) (did you mean 'frag'?)"]),
    ("tests:\n  - name: x\n    evnts: []\n", ["2:5: a test case needs a list of 'events'",
                                             "2:5: a test case needs 'expect'",
                                             "3:5: unknown field 'evnts' in a test case (did you mean 'events'?)"]),
])
def test_test_file_errors_carry_file_line_and_column(tmp_path: Path, tests: str, expected: list[str]):
    path = _write(tmp_path, "defaults: {host: h}\n" + tests)
    with pytest.raises(RulebookError) as caught:
        load_pair(path)
    got = [str(p) for p in caught.value.problems]
    assert len(got) == len(expected)
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(f"{path}:{int(want.split(':')[0]) + 1}:{want.split(':')[1]}"), line
        assert want.split(": ", 1)[1] in line


def test_a_broken_rulebook_is_reported_by_the_test_file(tmp_path: Path):
    path = _write(tmp_path, PASSING, BOOK.replace("slo: s\n    severity: warning", "slo: t\n    severity: warning"))
    result = run_test_file(path)
    assert result.cases == () and not result.ok
    assert str(result.problems[0]).endswith(f"its rulebook {tmp_path / 'mini.yaml'} does not load")
    assert "unknown SLO 't'" in str(result.problems[1])


def test_find_test_files_accepts_folders_test_files_and_rulebooks(tmp_path: Path):
    path = _write(tmp_path, PASSING)
    (tmp_path / "lonely.yaml").write_text(BOOK)
    assert find_test_files([tmp_path]) == ((path,), ())
    found, problems = find_test_files([tmp_path / "mini.yaml", path, tmp_path / "lonely.yaml"])
    assert found == (path,)
    assert [p.message for p in problems] == ["no test file (lonely.test.yaml) beside it"]


def test_every_shipped_rule_has_a_firing_and_a_silent_case():
    files, problems = find_test_files([RULES])
    assert problems == ()
    rulebooks = sorted(p for p in RULES.glob("*.yaml") if not p.name.endswith(".test.yaml"))
    assert sorted(f.name for f in files) == sorted(p.name.replace(".yaml", ".test.yaml") for p in rulebooks)
    for path in files:
        rulebook, tests = load_pair(path)
        assert coverage(rulebook, tests) == Coverage(never_fired=(), never_silent=()), path


def test_coverage_names_rules_without_cases(tmp_path: Path):
    rulebook, tests = load_pair(_write(tmp_path, PASSING))
    assert coverage(rulebook, tests).never_fired == ("storm",)
    only_firing = load_test_file(_write(tmp_path, PASSING.split("  - name: stays silent")[0]), None)
    assert coverage(rulebook, only_firing).never_silent == ("frag", "storm")


def test_cli_prints_per_file_results_and_a_summary(tmp_path: Path):
    good = tmp_path / "good"
    bad = tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _write(good, PASSING)
    _write(bad, PASSING.replace('"FR 0.71 on node-7 GPU 3"', '"nope"'))
    ok = CliRunner().invoke(rules_test, [str(good)], catch_exceptions=False)
    assert ok.exit_code == 0
    assert ok.stdout.splitlines() == [f"{good / 'mini.test.yaml'}: ok (3 passed, 0 failed)",
                                      "ok: 1 test file, 3 cases: 3 passed, 0 failed"]
    failed = CliRunner().invoke(rules_test, [str(good), str(bad)], catch_exceptions=False)
    assert failed.exit_code == 1
    lines = failed.stdout.splitlines()
    assert f"{bad / 'mini.test.yaml'}: FAILED (2 passed, 1 failed)" in lines
    assert any(line.startswith("    exp: [") for line in lines) and any(line.startswith("    got: [") for line in lines)
    assert lines[-1] == "FAILED: 2 test files, 6 cases: 5 passed, 1 failed"


def test_pytest_collects_cases_and_fails_with_the_exp_got_text(tmp_path: Path):
    shutil.copy(RULES / "conftest.py", tmp_path / "conftest.py")
    _write(tmp_path, PASSING.replace('"FR 0.71 on node-7 GPU 3"', '"nope"'))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 2 passed" in run.stdout
    assert 'case "fires": FAILED' in run.stdout and 'summary contains "nope"' in run.stdout
    assert "FAILED mini.test.yaml::fires" in run.stdout
