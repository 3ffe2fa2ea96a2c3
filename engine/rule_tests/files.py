"""Rule test files (`<name>.test.yaml`): read and check them into frozen cases, every error with its line.

A test file names its rulebook (`rulebook: memory.yaml`, default: the same stem), optional `defaults` (envelope
fields every event gets) and `tests`: cases of input events in a compact form (`{at: 1.5s, kind: cuda_oom, ...}`)
with the violations they must raise (`expect`) and the rules that must stay silent (`not_expect`); `until`
moves the clock past the last event, so absence rules can fire.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpuslo.engine.errors import EventError, Location, RulebookError, RulebookProblem
from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.rulebook.load import TEST_SUFFIX
from gpuslo.engine.rulebook.marked_yaml import Document, Path_, decode, load_yaml
from gpuslo.engine.units import parse_duration

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)  # `at: 0s`; fixed so failures read the same on every run
_TOP = ("rulebook", "defaults", "tests")
_CASE = ("name", "events", "until", "expect", "not_expect")
_EXPECT = ("rule", "group", "summary_contains", "conditions", "evidence_count")
_ENVELOPE = ("id", "kind", "host", "gpu", "gpu_uuid", "pid", "job", "rank", "labels", "source", "attrs", "message")


@dataclass(frozen=True)
class Expectation:
    """One violation a case must raise; unset fields are not checked (`group` is matched as a subset)."""

    rule: str
    location: Location
    group: Mapping[str, Any] | None = None
    summary_contains: str | None = None
    conditions: tuple[str, ...] = ()
    evidence_count: int | None = None


@dataclass(frozen=True)
class RuleTestCase:
    """Events in arrival order, and what must (and must not) fire; `silent` is `expect: []`."""

    name: str
    location: Location
    events: tuple[Event, ...]
    expect: tuple[Expectation, ...]
    not_expect: tuple[str, ...]
    silent: bool
    until_s: float | None = None  # the clock after the last event, for absence rules (seconds after the start)


@dataclass(frozen=True)
class RuleTestFile:
    path: Path
    rulebook_path: Path
    cases: tuple[RuleTestCase, ...]


def rulebook_path_of(test_path: Path, named: str | None = None) -> Path:
    """The rulebook a test file checks: `named` relative to the test file, else `<stem>.yaml` beside it."""
    if named:
        return test_path.parent / named
    return test_path.with_name(test_path.name[: -len(TEST_SUFFIX)] + ".yaml")


def _hint(word: str, options: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f"did you mean '{close[0]}'?" if close else None


class _Reader:
    """Walks a test document, collecting every problem instead of stopping at the first."""

    def __init__(self, doc: Document, rule_ids: Collection[str] | None):
        self.doc = doc
        self.rule_ids = rule_ids
        self.problems: list[RulebookProblem] = []

    def problem(self, path: Path_, message: str, hint: str | None = None, *, key: bool = False) -> None:
        self.problems.append(RulebookProblem(self.doc.at(path, key=key), message, hint=hint))

    def mapping(self, path: Path_, obj: object, allowed: tuple[str, ...], what: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            self.problem(path, f"{what} must be a mapping, got {type(obj).__name__}")
            return {}
        for key in obj:
            if key not in allowed:
                self.problem((*path, key), f"unknown field '{key}' in {what}",
                             _hint(key, allowed) or f"allowed: {', '.join(allowed)}", key=True)
        return obj

    def text(self, path: Path_, value: object, what: str) -> str | None:
        if isinstance(value, str) and value:
            return value
        self.problem(path, f"'{what}' must be a non-empty string, got {value!r}")
        return None

    def rule_id(self, path: Path_, value: object) -> str | None:
        rule = self.text(path, value, "rule")
        if rule is not None and self.rule_ids is not None and rule not in self.rule_ids:
            self.problem(path, f"unknown rule '{rule}' (not in the rulebook)", _hint(rule, self.rule_ids))
        return rule

    def at(self, path: Path_, value: object) -> float | None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                self.problem(path, f"'{path[-1]}': {exc}")
                return None
        if seconds < 0:
            self.problem(path, f"'{path[-1]}' must not be negative, got {value!r}")
            return None
        return seconds

    def event(self, path: Path_, obj: object, defaults: Mapping[str, Any], ident: str) -> Event | None:
        fields = self.mapping(path, obj, ("at", *_ENVELOPE), "an event")
        if not fields:
            return None
        if "at" not in fields:
            self.problem(path, "an event needs 'at' (its time after the test's start, e.g. 1.5s)")
            return None
        seconds = self.at((*path, "at"), fields["at"])
        if seconds is None:
            return None
        body = {**defaults, **{k: v for k, v in fields.items() if k in _ENVELOPE}}  # unknown keys: reported above
        body.setdefault("id", ident)
        body["time"] = format_time(BASE_TIME + timedelta(seconds=seconds))
        try:
            return parse_event(body)
        except EventError as exc:
            for field_problem in exc.problems:
                where = tuple(p for p in field_problem.path.split(".") if p)
                target = (*path, *where) if (*path, *where) in self.doc.marks else path
                self.problem(target, f"bad event: {field_problem}")
            return None

    def expectation(self, path: Path_, obj: object) -> Expectation | None:
        fields = self.mapping(path, obj, _EXPECT, "an expectation")
        if "rule" not in fields:
            if fields:
                self.problem(path, "an expectation needs 'rule'")
            return None
        rule = self.rule_id((*path, "rule"), fields["rule"])
        group = fields.get("group")
        if group is not None and not isinstance(group, dict):
            self.problem((*path, "group"), "'group' must be a mapping of group_by values")
            group = None
        summary = fields.get("summary_contains")
        if summary is not None:
            summary = self.text((*path, "summary_contains"), summary, "summary_contains")
        conditions = fields.get("conditions", [])
        if not isinstance(conditions, list) or not all(isinstance(c, str) for c in conditions):
            self.problem((*path, "conditions"), "'conditions' must be a list of strings")
            conditions = []
        count = fields.get("evidence_count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
            self.problem((*path, "evidence_count"), f"'evidence_count' must be a positive integer, got {count!r}")
            count = None
        if rule is None:
            return None
        frozen_group = MappingProxyType(dict(group)) if group is not None else None
        return Expectation(rule, self.doc.at(path), frozen_group, summary, tuple(conditions), count)

    def case(self, i: int, obj: object, defaults: Mapping[str, Any], names: set[str]) -> RuleTestCase | None:
        path: Path_ = ("tests", i)
        fields = self.mapping(path, obj, _CASE, "a test case")
        name = self.text((*path, "name"), fields.get("name"), "name") if fields else None
        if name is not None and name in names:
            self.problem((*path, "name"), f"duplicate test name '{name}'")
        names.add(name or "")
        events_obj = fields.get("events")
        if not isinstance(events_obj, list) or not events_obj:
            self.problem((*path, "events") if "events" in fields else path, "a test case needs a list of 'events'")
            events_obj = []
        events = [self.event((*path, "events", j), e, defaults, f"t{i + 1}-e{j + 1}")
                  for j, e in enumerate(events_obj)]
        if fields and "expect" not in fields and "not_expect" not in fields:
            self.problem(path, "a test case needs 'expect' (use [] for 'must not fire') or 'not_expect'")
        expect_obj = fields.get("expect", [])
        if not isinstance(expect_obj, list):
            self.problem((*path, "expect"), "'expect' must be a list of expected violations")
            expect_obj = []
        expect = [self.expectation((*path, "expect", j), e) for j, e in enumerate(expect_obj)]
        not_expect_obj = fields.get("not_expect", [])
        if not isinstance(not_expect_obj, list):
            self.problem((*path, "not_expect"), "'not_expect' must be a list of rule ids")
            not_expect_obj = []
        not_expect = [self.rule_id((*path, "not_expect", j), r) for j, r in enumerate(not_expect_obj)]
        until = self.at((*path, "until"), fields["until"]) if "until" in fields else None
        if name is None or None in events or None in expect or None in not_expect:
            return None
        return RuleTestCase(name, self.doc.at(path), tuple(e for e in events if e),
                            tuple(e for e in expect if e), tuple(r for r in not_expect if r),
                            silent="expect" in fields and not expect_obj, until_s=until)


def parse_test_text(text: str, path: Path, rule_ids: Collection[str] | None = None) -> RuleTestFile:
    """Check a test file's text; raises RulebookError listing every problem (file:line:col) in file order."""
    doc = load_yaml(text, str(path))
    reader = _Reader(doc, rule_ids)
    top = reader.mapping((), doc.data, _TOP, "a rule test file")
    named = top.get("rulebook")
    if named is not None and not isinstance(named, str):
        reader.problem(("rulebook",), "'rulebook' must be a file name relative to the test file")
        named = None
    defaults = top.get("defaults", {})
    if not isinstance(defaults, dict) or set(defaults) - set(_ENVELOPE):
        reader.problem(("defaults",), f"'defaults' must map envelope fields ({', '.join(_ENVELOPE)}) to values")
        defaults = {}
    tests = top.get("tests")
    if top and (not isinstance(tests, list) or not tests):
        reader.problem(("tests",) if "tests" in top else (), "a rule test file needs a non-empty list 'tests'")
        tests = []
    names: set[str] = set()
    cases = [reader.case(i, obj, defaults, names) for i, obj in enumerate(tests or [])]
    if reader.problems:
        raise RulebookError(sorted(reader.problems, key=lambda p: (p.location.line or 0, p.location.col or 0)))
    return RuleTestFile(path, rulebook_path_of(path, named), tuple(c for c in cases if c))


def read_test_header(path: Path) -> Path:
    """The rulebook path a test file names (cheap pre-read, so the rulebook can be loaded first)."""
    doc = load_yaml(_read(path), str(path))
    named = doc.data.get("rulebook") if isinstance(doc.data, dict) else None
    return rulebook_path_of(path, named if isinstance(named, str) else None)


def load_test_file(path: Path, rule_ids: Collection[str] | None = None) -> RuleTestFile:
    """Read and check one test file; `rule_ids` (the rulebook's) lets unknown rule names be reported."""
    return parse_test_text(_read(path), path, rule_ids)


def _read(path: Path) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RulebookError([RulebookProblem(Location(str(path)), f"cannot read file: {exc.strerror or exc}")]) from exc
    return decode(raw, str(path))
