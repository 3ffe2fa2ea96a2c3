"""Backtest: run recorded events (JSON Lines) through rulebooks without storing anything, and fold what
would have fired into violations with the store's transitions; compare what a changed rulebook adds and removes."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from gpuslo.engine import transitions
from gpuslo.engine.clock import BACKTEST, Feed
from gpuslo.engine.errors import EventError, GpusloError
from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.slo.counter import GroupFigures
from gpuslo.engine.transitions import ViolationState
from gpuslo.engine.violations import Match

_RECENT_IDS = 100_000  # duplicate ids are skipped as ingest would; bounded like the runtime's memory of ids
# orjson turns integers beyond 64 bits into floats where json.loads keeps them exact: such an integer has at
# least 19 digits in a row, which a translate and a substring search find in a fraction of a parse's time.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19


class BacktestError(GpusloError):
    """The recorded events could not be read."""


@dataclass(frozen=True)
class BadLine:
    """A line of the file that is not a valid event: 1-based line number and why."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class FoldedViolation:
    """What backtest reports of one violation the matches would have raised (a ViolationState of the fold)."""

    rule: str
    rulebook: str
    severity: str
    group: Mapping[str, Any]
    group_key: str
    summary: str  # of the latest match
    count: int
    first_seen: datetime
    last_seen: datetime

    @classmethod
    def of(cls, state: ViolationState) -> FoldedViolation:
        assert state.latest is not None  # every state of a fold of matches has its latest match
        return cls(state.rule_id, state.rulebook, state.latest.severity, state.group, state.group_key,
                   state.latest.summary, state.occurrences, state.first_seen, state.last_seen)

    @property
    def key(self) -> tuple[str, str]:
        return (self.rule, self.group_key)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "rulebook": self.rulebook, "severity": self.severity,
                "group": dict(self.group), "group_key": self.group_key, "summary": self.summary,
                "count": self.count, "first_seen": format_time(self.first_seen),
                "last_seen": format_time(self.last_seen)}


@dataclass(frozen=True)
class BacktestResult:
    """What one set of rulebooks would raise over a file, in order of first appearance."""

    events: int
    duplicates: int
    violations: tuple[FoldedViolation, ...]
    bad_lines: tuple[BadLine, ...]
    slos: tuple[GroupFigures, ...] = ()  # every measured SLO group's budget and burn at the end of the file

    @property
    def matches(self) -> int:
        return sum(v.count for v in self.violations)


@dataclass(frozen=True)
class Comparison:
    """Violations (by rule and group key) that the candidate rulebooks add and remove against the base."""

    added: tuple[FoldedViolation, ...]
    removed: tuple[FoldedViolation, ...]
    unchanged: int


class _Folder:
    """Folds matches into violations as the store does (transitions.apply_match), on event time."""

    def __init__(self) -> None:
        self.folded: OrderedDict[tuple[str, str], ViolationState] = OrderedDict()

    def add(self, match: Match) -> None:
        key = (match.rule_id, match.group_key)
        self.folded[key] = transitions.apply_match(self.folded.get(key), match, match.seen_at).after

    def violations(self) -> tuple[FoldedViolation, ...]:
        return tuple(FoldedViolation.of(state) for state in self.folded.values())


def read_events(stream: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> Iterator[Event | BadLine]:
    """Events of a JSON Lines stream in file order; blank lines are skipped, bad ones yielded as BadLine.
    `on_bytes` hears the bytes read every 1,024 lines and at the end (a progress bar's update per line cost
    more than a line's JSON decode)."""
    unreported = 0
    for number, raw in enumerate(stream, start=1):
        if on_bytes is not None:
            unreported += len(raw)
            if not number & 1023:
                on_bytes(unreported)
                unreported = 0
        if not raw.strip():
            continue
        try:
            obj = _loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            yield BadLine(number, f"not JSON: {exc}")
            continue
        try:
            yield parse_event(obj)
        except EventError as exc:
            yield BadLine(number, f"not a valid event: {exc}")
    if on_bytes is not None and unreported:
        on_bytes(unreported)


def _loads(raw: bytes) -> Any:
    """`json.loads(raw)`, through orjson where it gives the same value (~2x faster): a line it refuses (NaN, a
    BOM, UTF-16, lone surrogates, bad JSON) or one with a 19-digit run goes to json.loads, for its value or its
    error. Both keep the last of repeated keys."""
    if _LONG_DIGIT_RUN not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def backtest(path: Path, rulebook_sets: Sequence[Sequence[Rulebook]], *, lateness_s: float = 60.0,
             on_bytes: Callable[[int], None] | None = None) -> tuple[BacktestResult, ...]:
    """Read the file once and run its events through each set of rulebooks (one evaluator per set)."""
    evaluators = []
    for books in rulebook_sets:
        evaluator = RuleEvaluator(lateness_s=lateness_s, clock=BACKTEST)
        evaluator.load(books)
        evaluators.append(evaluator)
    feeds = [Feed(evaluator, BACKTEST) for evaluator in evaluators]
    folders = [_Folder() for _ in evaluators]
    bad: list[BadLine] = []
    recent: OrderedDict[str, None] = OrderedDict()
    events = duplicates = 0

    try:
        stream = Path(path).open("rb")
    except OSError as exc:
        raise BacktestError(f"{path}: cannot read events: {exc.strerror or exc}") from exc
    with stream:
        for item in read_events(stream, on_bytes):
            if isinstance(item, BadLine):
                bad.append(item)
                continue
            if item.id in recent:
                duplicates += 1
                continue
            recent[item.id] = None
            if len(recent) > _RECENT_IDS:
                recent.popitem(last=False)
            events += 1
            for feed, folder in zip(feeds, folders, strict=True):
                for match in feed.push(item):
                    folder.add(match)
    for feed, folder in zip(feeds, folders, strict=True):
        for match in feed.finish():
            folder.add(match)
    return tuple(BacktestResult(events, duplicates, f.violations(), tuple(bad), tuple(e.slo.figures()))
                 for f, e in zip(folders, evaluators, strict=True))


def compare(base: BacktestResult, candidate: BacktestResult) -> Comparison:
    """Which (rule, group key) violations the candidate raises that the base does not, and the reverse."""
    base_keys = {v.key for v in base.violations}
    candidate_keys = {v.key for v in candidate.violations}
    return Comparison(
        added=tuple(v for v in candidate.violations if v.key not in base_keys),
        removed=tuple(v for v in base.violations if v.key not in candidate_keys),
        unchanged=len(base_keys & candidate_keys),
    )
