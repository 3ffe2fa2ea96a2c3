"""Run rule test files: each case through a fresh evaluator; failures print `exp:` and `got:` (promtool style).

For every rule a case names in `expect`, the violations it raised must pair one-to-one with the expectations of
that rule; rules a case does not name are not checked, except under `not_expect` and `expect: []` (nothing at all
may fire).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuslo.engine.clock import RULE_TESTS, Feed
from gpuslo.engine.errors import GpusloError, Location, RulebookError, RulebookProblem
from gpuslo.engine.rule_tests.files import (
    BASE_TIME,
    Expectation,
    RuleTestCase,
    RuleTestFile,
    load_test_file,
    read_test_header,
)
from gpuslo.engine.rulebook import load_rulebook
from gpuslo.engine.rulebook.load import TEST_SUFFIX
from gpuslo.engine.rulebook.model import Rulebook, trigger_patterns
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.violations import Match

__all__ = [
    "CaseResult", "Coverage", "FileResult", "coverage", "find_test_files", "run_case", "run_test_file",
]


@dataclass(frozen=True)
class CaseResult:
    """A case, the matches it produced, and one text block per failed check (empty when it passed)."""

    case: RuleTestCase
    got: tuple[Match, ...]
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def message(self) -> str:
        """`file:line: case "name": FAILED` and the exp/got blocks; '' when it passed."""
        if self.passed:
            return ""
        return "\n".join([f'{self.case.location}: case "{self.case.name}": FAILED', *self.failures])


@dataclass(frozen=True)
class FileResult:
    """The results of one test file, or the problems that kept it from running."""

    path: Path
    cases: tuple[CaseResult, ...] = ()
    problems: tuple[RulebookProblem, ...] = ()

    @property
    def failed(self) -> int:
        return sum(not c.passed for c in self.cases)

    @property
    def ok(self) -> bool:
        return not self.problems and self.failed == 0


@dataclass(frozen=True)
class Coverage:
    """Rules of a rulebook without a case where they fire, or without one where they must stay silent."""

    never_fired: tuple[str, ...]
    never_silent: tuple[str, ...]


def _value_matches(expected: Any, got: Any) -> bool:
    return bool(expected == got) or str(expected) == str(got)


def _satisfies(match: Match, exp: Expectation) -> bool:
    if match.rule_id != exp.rule:
        return False
    if exp.group is not None and any(
        k not in match.group or not _value_matches(v, match.group[k]) for k, v in exp.group.items()
    ):
        return False
    if exp.summary_contains is not None and exp.summary_contains not in match.summary:
        return False
    texts = [c.text for c in match.explanation.conditions]
    if any(not any(want in text for text in texts) for want in exp.conditions):
        return False
    return exp.evidence_count is None or len(match.explanation.evidence) == exp.evidence_count


def _pairs(exps: Sequence[Expectation], gots: Sequence[Match], used: frozenset[int] = frozenset()) -> bool:
    """True when every expectation takes a distinct match that satisfies it (small backtracking search)."""
    if not exps:
        return True
    for i, match in enumerate(gots):
        if i not in used and _satisfies(match, exps[0]) and _pairs(exps[1:], gots, used | {i}):
            return True
    return False


def _show_exp(exp: Expectation) -> str:
    parts = []
    if exp.group is not None:
        parts.append(f"group: {_show_group(exp.group)}")
    if exp.summary_contains is not None:
        parts.append(f"summary contains {json.dumps(exp.summary_contains)}")
    if exp.conditions:
        parts.append(f"conditions: {json.dumps(list(exp.conditions))}")
    if exp.evidence_count is not None:
        parts.append(f"evidence_count: {exp.evidence_count}")
    return "{" + ", ".join(parts) + "}"


def _show_group(group: Any) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in group.items()) + "}"


def _show_got(match: Match, with_conditions: bool = False) -> str:
    parts = [f"group: {_show_group(match.group)}", f"summary: {json.dumps(match.summary)}",
             f"evidence_count: {len(match.explanation.evidence)}"]
    if with_conditions:
        parts.append(f"conditions: {json.dumps([c.text for c in match.explanation.conditions])}")
    return "{" + ", ".join(parts) + "}"


def _block(title: str, exp: str, got: Iterable[str]) -> str:
    return f"  {title}:\n    exp: {exp}\n    got: [{', '.join(got)}]"


def check_case(case: RuleTestCase, got: Sequence[Match]) -> tuple[str, ...]:
    """The failure blocks of a case given the matches its events produced."""
    failures: list[str] = []
    if case.silent and got:
        failures.append(_block("must not fire at all", "[]", (f"{m.rule_id} {_show_got(m)}" for m in got)))
    for rule in dict.fromkeys(e.rule for e in case.expect):
        exps = [e for e in case.expect if e.rule == rule]
        gots = [m for m in got if m.rule_id == rule]
        if len(exps) != len(gots) or not _pairs(exps, gots):
            detail = any(e.conditions for e in exps)
            failures.append(_block(f'rule "{rule}" ({exps[0].location})',
                                   "[" + ", ".join(_show_exp(e) for e in exps) + "]",
                                   (_show_got(m, detail) for m in gots)))
    for rule in case.not_expect:
        fired = [m for m in got if m.rule_id == rule]
        if fired:
            failures.append(_block(f'rule "{rule}" must not fire', "[]", (_show_got(m) for m in fired)))
    return tuple(failures)


def run_case(rulebook: Rulebook, case: RuleTestCase, *, lateness_s: float = 60.0) -> CaseResult:
    """Evaluate the case's events, in file order, with a fresh evaluator loaded with this one rulebook's rules
    (its SLIs' burn alerts are not part of rule tests).

    The clock (clock.RULE_TESTS) follows event time: before each event it ticks to that event's time (so a
    silence that one late event ends still counts for absence rules), and at the end to `until` when the case
    gives it."""
    evaluator = RuleEvaluator(lateness_s=lateness_s, measure_slos=False, clock=RULE_TESTS)  # tests/slo test SLIs
    evaluator.load([rulebook])
    feed = Feed(evaluator, RULE_TESTS)
    got: list[Match] = []
    for event in case.events:
        got += feed.push(event)
    got += feed.finish(None if case.until_s is None else (BASE_TIME + timedelta(seconds=case.until_s)).timestamp())
    return CaseResult(case, tuple(got), check_case(case, got))


def load_pair(test_path: Path, overrides_dir: Path | None = None) -> tuple[Rulebook, RuleTestFile]:
    """The rulebook a test file names (with its site override from `overrides_dir`, if given) and the checked
    test file (rule names checked against the shipped rules, so a rule an override disables fails its cases)."""
    rulebook_path = read_test_header(test_path)
    try:
        rulebook = load_rulebook(rulebook_path, overrides_dir=overrides_dir)
    except RulebookError as exc:
        note = RulebookProblem(Location(str(test_path)), f"its rulebook {rulebook_path} does not load")
        raise RulebookError([note, *exc.problems]) from exc
    return rulebook, load_test_file(test_path, {r.id for r in rulebook.rules} | set(rulebook.disabled))


def run_test_file(test_path: Path, *, lateness_s: float = 60.0, overrides_dir: Path | None = None) -> FileResult:
    """Run every case of one test file; a file or rulebook that does not load becomes `problems`."""
    try:
        rulebook, tests = load_pair(test_path, overrides_dir)
    except RulebookError as exc:
        return FileResult(test_path, problems=exc.problems)
    results = []
    for case in tests.cases:
        try:
            results.append(run_case(rulebook, case, lateness_s=lateness_s))
        except GpusloError as exc:  # e.g. the engine refusing the compiled rulebook
            results.append(CaseResult(case, (), (f"  error: {exc}",)))
    return FileResult(test_path, tuple(results))


def find_test_files(paths: Sequence[Path]) -> tuple[tuple[Path, ...], tuple[RulebookProblem, ...]]:
    """Test files of the given folders (`*.test.yaml`), test files, or rulebooks (their test file beside them)."""
    found: list[Path] = []
    problems: list[RulebookProblem] = []
    for path in map(Path, paths):
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TEST_SUFFIX)))
        elif path.name.endswith(TEST_SUFFIX) and path.is_file():
            found.append(path)
        elif path.suffix in (".yaml", ".yml") and path.is_file():
            beside = path.with_name(path.name[: -len(path.suffix)] + TEST_SUFFIX)
            if beside.is_file():
                found.append(beside)
            else:
                problems.append(RulebookProblem(Location(str(path)), f"no test file ({beside.name}) beside it"))
        else:
            problems.append(RulebookProblem(Location(str(path)), "no such test file, rulebook or directory"))
    return tuple(dict.fromkeys(found)), tuple(problems)


def coverage(rulebook: Rulebook, tests: RuleTestFile) -> Coverage:
    """Which rules never fire in any case and which are never shown silent (`not_expect`, or `expect: []`
    with an event of a kind the rule reads)."""
    fired = {e.rule for case in tests.cases for e in case.expect}
    silent = {rule for case in tests.cases for rule in case.not_expect}
    for rule in rulebook.rules:
        kinds = {p.kind for p in trigger_patterns(rule.when)}
        if any(case.silent and any(e.kind in kinds for e in case.events) for case in tests.cases):
            silent.add(rule.id)
    ids = [r.id for r in rulebook.rules]
    return Coverage(tuple(i for i in ids if i not in fired), tuple(i for i in ids if i not in silent))
