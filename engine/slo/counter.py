"""The engine side of measured SLOs: count each request event into its SLO group, raise and clear burn alerts.

Runs on the evaluator's thread, inside its batch: the bucket deltas and bad requests of a batch go to the
store in the batch's transaction (`SliBatch`), so a batch is counted exactly when its events are marked
processed. Every event is counted once: ingest drops duplicate ids and the runtime evaluates an event once.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuslo.engine.events import Event
from gpuslo.engine.explain import group_key
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.slo.build import compile_sli
from gpuslo.engine.slo.burn import BurnState, burn_match, figures
from gpuslo.engine.slo.maths import burn_rate
from gpuslo.engine.slo.model import BUCKET_S, LOOKBACKS, BurnAlert, CompiledSli, Sli
from gpuslo.engine.slo.ring import GroupRing
from gpuslo.engine.violations import Clear, Match

Bucket = tuple[str, str, int]  # slo id, group key, minute
# Groups per SLI the engine keeps windows for (about 1 MB each for a 28-day window): group_by values come from
# events, so a flood of new endpoints must not grow memory without bound.
MAX_GROUPS = 500
SloSeed = Callable[[Sli], Iterable[tuple[str, int, int, int]]]  # the stored (group key, minute, good, total)


@dataclass(frozen=True)
class BadRequest:
    """A request event the good condition called bad: the store charges it to the violations open for it."""

    slo_id: str
    group_key: str
    minute: int
    event: Event


@dataclass(frozen=True)
class SliBatch:
    """What one batch adds to the bucket tables: good/total per bucket, and the bad requests."""

    deltas: dict[Bucket, list[int]] = field(default_factory=dict)
    bad: tuple[BadRequest, ...] = ()

    @staticmethod
    def merge(batches: Iterable[SliBatch | None]) -> SliBatch | None:
        """Several batches' counts as one, in new lists (storing adds the attributed counts to them: a retried
        transaction must start from the counts as evaluated); None when none counted anything."""
        deltas: dict[Bucket, list[int]] = {}
        bad: list[BadRequest] = []
        for batch in batches:
            if batch is None:
                continue
            for bucket, counts in batch.deltas.items():
                found = deltas.setdefault(bucket, [0, 0])
                found[0] += counts[0]
                found[1] += counts[1]
            bad += batch.bad
        return SliBatch(deltas, tuple(bad)) if deltas else None


@dataclass(frozen=True)
class GroupFigures:
    """One SLO group as of its newest minute: window totals and the counts of each reported lookback."""

    sli: Sli
    group_key: str
    group: dict[str, Any]
    as_of_minute: int
    good: int
    total: int
    lookbacks: dict[str, tuple[int, int]]


def window_start_minute(sli: Sli, now_minute: int) -> int:
    """The first minute of the budget's window as of `now_minute`: rolling, or the calendar month's start."""
    if sli.calendar == "month":
        moment = datetime.fromtimestamp(now_minute * BUCKET_S, UTC)
        return calendar.timegm((moment.year, moment.month, 1, 0, 0, 0)) // BUCKET_S
    return now_minute - sli.window_s // BUCKET_S + 1


class _Group:
    __slots__ = ("firing", "group", "key", "last", "last_s", "ring")

    def __init__(self, key: str, group: dict[str, Any], ring: GroupRing):
        self.key, self.group, self.ring = key, group, ring
        self.firing: set[str] = set()
        self.last: Event | None = None
        self.last_s = float("-inf")  # the last event's timestamp (Event.timestamp is a locked cached_property)


class _Tracked:
    """One loaded SLI, its groups and where each lookback sits in the rings' sums."""

    def __init__(self, rulebook: Rulebook, compiled: CompiledSli):
        self.rulebook, self.compiled, self.sli = rulebook, compiled, compiled.sli
        self.lookbacks_m = tuple(s // BUCKET_S for s in self.sli.lookbacks_s())
        self.index = {m * BUCKET_S: i for i, m in enumerate(self.lookbacks_m)}
        self.size = max(self.lookbacks_m[-1], (31 * 86400 if self.sli.calendar else self.sli.window_s) // BUCKET_S) + 1
        self.groups: dict[str, _Group] = {}
        # Per alert: (rate, index of the long window, index of the short one) for the hot path.
        self.pairs = tuple((alert, tuple((p.burn, self.index[p.long_s], self.index[p.short_s]) for p in alert.pairs))
                           for alert in self.sli.policy)
        self.keys: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}  # group values → key (bounded below)

    def key_of(self, event: Event) -> tuple[str, dict[str, Any]]:
        """The group key and mapping of a request, cached by its group values."""
        values = tuple(event.get(name) for name in self.sli.group_by)
        found = self.keys.get(values)
        if found is None:
            mapping = dict(zip(self.sli.group_by, values, strict=True))
            found = (group_key(mapping), mapping)
            if len(self.keys) < 10_000:
                self.keys[values] = found
        return found

    def group(self, event: Event | None, key: str, values: dict[str, Any], minute: int) -> _Group | None:
        """The group's state; None beyond MAX_GROUPS (a window of arrays each): such a group is still counted in
        the stored buckets, only its burn alerts are not evaluated."""
        found = self.groups.get(key)
        if found is None:
            if len(self.groups) >= MAX_GROUPS:
                return None
            found = self.groups[key] = _Group(key, values, GroupRing(self.size, self.lookbacks_m, minute))
        return found

    def state(self, group: _Group, alert: BurnAlert) -> BurnState:
        """What the alert's pairs see now, with the budget over the window: the figures of an explanation."""
        ring, target = group.ring, self.sli.target
        pairs = []
        for pair in alert.pairs:
            pairs.append((pair, figures(*ring.lookback(self.index[pair.long_s]), pair.long_s, target),
                          figures(*ring.lookback(self.index[pair.short_s]), pair.short_s, target)))
        return BurnState(tuple(pairs), *self.window(ring))

    def window(self, ring: GroupRing) -> tuple[int, int]:
        """good/total over the budget's window: a running sum, or summed from the month's start."""
        if self.sli.calendar:
            return ring.since(window_start_minute(self.sli, ring.now))
        return ring.lookback(self.index[self.sli.window_s])


def _fingerprint(sli: Sli) -> tuple[Any, ...]:
    return (sli.slo_id, sli.requests, sli.good, sli.target, sli.window_s, sli.calendar, sli.group_by, sli.policy)


class SloCounter:
    """Counts request events of every loaded SLI; burn alerts come out as matches and clears."""

    def __init__(self, *, enabled: bool = True) -> None:
        self._enabled = enabled
        self._by_kind: dict[str, tuple[_Tracked, ...]] = {}
        self._tracked: dict[tuple[Any, ...], _Tracked] = {}
        self._deltas: dict[Bucket, list[int]] = {}
        self._bad: list[BadRequest] = []
        self._replaying = False
        self.capped = 0  # requests of groups beyond MAX_GROUPS (counted in the store, no burn alerts)

    @property
    def slis(self) -> tuple[Sli, ...]:
        return tuple(t.sli for t in self._tracked.values())

    def load(self, rulebooks: Sequence[Rulebook], seed: SloSeed | None = None) -> None:
        """Track the SLIs of the rulebooks; an unchanged SLI keeps its groups, a new one is seeded from
        `seed(sli)` → (group key, minute, good, total) rows (the stored buckets of its window)."""
        tracked: dict[tuple[Any, ...], _Tracked] = {}
        for rulebook in rulebooks if self._enabled else ():
            for slo in rulebook.slos.values():
                if slo.indicator is None or any(k[0] == slo.id for k in tracked):
                    continue  # one SLI per SLO id: the first rulebook (in load order) that measures it
                fingerprint = _fingerprint(slo.indicator)
                kept = self._tracked.get(fingerprint)
                if kept is None:
                    kept = _Tracked(rulebook, compile_sli(slo.indicator))
                    if seed is not None:
                        self._seed(kept, seed)
                kept.rulebook = rulebook
                tracked[fingerprint] = kept
        by_kind: dict[str, list[_Tracked]] = {}
        for item in tracked.values():
            by_kind.setdefault(item.sli.kind, []).append(item)
        self._tracked = tracked
        self._by_kind = {kind: tuple(items) for kind, items in by_kind.items()}

    def seed(self, seed: SloSeed) -> None:
        """Add `seed(sli)`'s stored buckets to every tracked SLI (a fleet partition's new owner, before its
        first event: the running sums as stored at its offset)."""
        for tracked in self._tracked.values():
            self._seed(tracked, seed)

    def replaying(self, on: bool) -> None:
        """While on, requests count nothing and fire nothing (their counts are stored and seeded already); each
        group only learns its last request, which a quiet group's catch-up evaluates with."""
        self._replaying = on

    def restore_firing(self, firing: Iterable[tuple[str, str]]) -> None:
        """Mark the burn alerts whose violations are open, as (alert rule id, group key), firing again in the
        groups this counter holds, so that the next evaluation clears them or keeps them (never opens twice)."""
        wanted = set(firing)
        for tracked in self._tracked.values():
            for alert in tracked.sli.policy:
                rule_id = tracked.sli.alert_rule_id(alert)
                for key, group in tracked.groups.items():
                    if (rule_id, key) in wanted:
                        group.firing.add(alert.name)

    def _seed(self, tracked: _Tracked, seed: SloSeed) -> None:
        rows = sorted(seed(tracked.sli), key=lambda row: row[1])
        for key, minute, good, total in rows:
            group = tracked.group(None, key, parse_key(key, tracked.sli.group_by), minute)
            if group is not None:
                group.ring.add(minute, good, total)

    def observe(self, event: Event, timestamp: float, clears: list[Clear]) -> list[Match]:
        """Count one event into every SLI that takes it as a request; the burn alerts it starts firing."""
        tracked_list = self._by_kind.get(event.kind)
        if not tracked_list:
            return []
        matches: list[Match] = []
        minute = int(timestamp // BUCKET_S)
        for tracked in tracked_list:
            compiled = tracked.compiled
            if not compiled.is_request(event):
                continue
            if self._replaying:
                self._replayed(tracked, event, timestamp, minute)
                continue
            good = compiled.is_good(event)
            key, values = tracked.key_of(event)
            bucket = (tracked.sli.slo_id, key, minute)
            delta = self._deltas.get(bucket)
            if delta is None:
                delta = self._deltas[bucket] = [0, 0]
            delta[1] += 1
            if good:
                delta[0] += 1
            else:
                self._bad.append(BadRequest(tracked.sli.slo_id, key, minute, event))
            group = tracked.groups.get(key) or tracked.group(event, key, values, minute)
            if group is None:
                self.capped += 1
                continue
            moved = minute > group.ring.now
            group.ring.add(minute, 1 if good else 0, 1)
            if timestamp >= group.last_s:
                group.last, group.last_s = event, timestamp
            # A good request in the same minute only lowers every ratio: nothing can start firing, and only a
            # firing alert can clear.
            can_start = not good or moved
            if can_start or group.firing:
                matches += self._evaluate(tracked, group, event, clears, can_start)
        return matches

    @staticmethod
    def _replayed(tracked: _Tracked, event: Event, timestamp: float, minute: int) -> None:
        key, values = tracked.key_of(event)
        group = tracked.groups.get(key) or tracked.group(event, key, values, minute)
        if group is not None and timestamp >= group.last_s:
            group.last, group.last_s = event, timestamp

    def catch_up(self, watermark: float, clears: list[Clear]) -> list[Match]:
        """At a batch's end: groups with firing alerts move on to the stream's time, so a quiet group resolves."""
        matches: list[Match] = []
        minute = int(watermark // BUCKET_S)
        for tracked in self._tracked.values():
            for group in tracked.groups.values():
                if group.firing and minute > group.ring.now and group.last is not None:
                    group.ring.advance(minute)
                    matches += self._evaluate(tracked, group, group.last, clears)
        return matches

    def _evaluate(self, tracked: _Tracked, group: _Group, event: Event, clears: list[Clear],
                  can_start: bool = True) -> list[Match]:
        """Start or clear each burn alert of the group; the explanation is built only when one starts."""
        matches = []
        ring, target = group.ring, tracked.sli.target
        for alert, pairs in tracked.pairs:
            if alert.name not in group.firing:
                if not can_start:
                    continue
                for rate, long_i, short_i in pairs:
                    if burn_rate(*ring.lookback(long_i), target) >= rate:
                        if burn_rate(*ring.lookback(short_i), target) >= rate:
                            group.firing.add(alert.name)
                            state = tracked.state(group, alert)
                            matches.append(burn_match(tracked.rulebook, tracked.sli, alert, state, group.group,
                                                      group.key, event))
                            break
            elif all(burn_rate(*ring.lookback(short_i), target) < rate for rate, _long, short_i in pairs):
                group.firing.discard(alert.name)
                clears.append(Clear(tracked.sli.alert_rule_id(alert), tracked.rulebook.name, group.key, event))
        return matches

    def drain(self) -> SliBatch | None:
        """The batch's bucket deltas and bad requests (None when it counted nothing); starts the next batch."""
        if not self._deltas:
            return None
        batch = SliBatch(self._deltas, tuple(self._bad))
        self._deltas, self._bad = {}, []
        return batch

    def figures(self) -> list[GroupFigures]:
        """Every group's figures as of its newest minute (the backtest's budget report)."""
        found = []
        for tracked in self._tracked.values():
            for group in tracked.groups.values():
                ring = group.ring
                good, total = tracked.window(ring)
                lookbacks = {name: ring.lookback(tracked.index[seconds]) for name, seconds in LOOKBACKS}
                found.append(GroupFigures(tracked.sli, group.key, dict(group.group), ring.now, good, total,
                                          lookbacks))
        return found


def parse_key(key: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The group mapping back from its key (`endpoint=http://x,model=m`), knowing the names in order."""
    if not names:
        return {}
    values: dict[str, Any] = {}
    rest = key
    for i, name in enumerate(names):
        rest = rest[len(name) + 1:]
        if i + 1 < len(names):
            marker = f",{names[i + 1]}="
            cut = rest.rfind(marker) if marker in rest else len(rest)
            values[name], rest = rest[:cut] or None, rest[cut + 1:]
        else:
            values[name] = rest or None
    return values
