"""Event-time windows for correlations, counts and absences: the joins the engine cannot do safely, kept bounded.

Each window holds, per rule and `same:` key, the recent events of each pattern; events leave once the
watermark (the newest event time seen) has moved past their time + the rule's window + the allowed lateness.
An absence holds its last expected event (a heartbeat), or its armings until they are disarmed or fire.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence

from gpuslo.engine.events import Event
from gpuslo.engine.rulebook.model import Absence, Correlation, Count, Rule

_MAX_PER_PATTERN = 1000  # per rule and key: a burst beyond this keeps only the newest
Key = tuple[object, ...]


def same_key(event: Event, keys: Sequence[str]) -> tuple[object, ...] | None:
    """The values of the `same:` keys, or None when the event lacks one (it then cannot correlate)."""
    values = tuple(event.get(k) for k in keys)
    return None if any(v is None for v in values) else values


class Windows:
    """Correlation and count state of every windowed rule of one evaluator."""

    def __init__(self, lateness_s: float):
        self._lateness = lateness_s
        self._recent: dict[tuple[str, tuple[object, ...]], dict[str, deque[Event]]] = defaultdict(dict)
        self._counts: dict[tuple[str, tuple[object, ...]], deque[Event]] = defaultdict(deque)
        self._horizon: dict[str, float] = {}
        self._last_seen: dict[tuple[str, Key], tuple[Rule, Event, bool]] = {}
        # Armed absences: per rule and key, the arming events (by id) still waiting for their expected event,
        # and the expected events of the last `for` + lateness, for armings that arrive after them.
        self._armed: dict[tuple[str, Key], dict[str, tuple[Rule, Event]]] = {}
        self._expected: dict[tuple[str, Key], deque[Event]] = {}
        self._deadlines: list[tuple[float, int, str, Key, str]] = []  # heap: due time, tie-breaker, scope, key, id
        # Heap of (earliest expiry among a key's oldest events, tie-breaker, scope, key), pushed whenever a key
        # changes, so expire() visits only keys with something due instead of every key on every batch.
        self._expiries: list[tuple[float, int, str, tuple[object, ...]]] = []
        self._pushes = itertools.count()  # tie-breaker: keys of different types never get compared

    def held(self) -> int:
        """Events held in windows now (for tests and the memory benchmark)."""
        recent = sum(len(q) for by_alias in self._recent.values() for q in by_alias.values())
        armed = sum(len(a) for a in self._armed.values()) + sum(len(q) for q in self._expected.values())
        return recent + sum(len(q) for q in self._counts.values()) + armed

    def correlate(self, scope: str, rule: Rule, alias: str, event: Event) -> dict[str, Event] | None:
        """Add a pattern match; return alias → event when it completes the correlation within the window."""
        when = rule.when
        assert isinstance(when, Correlation)
        key = same_key(event, when.same)
        if key is None:
            return None
        self._horizon[scope] = when.within_s + self._lateness
        by_alias = self._recent[(scope, key)]
        found = _complete(when, by_alias, alias, event)
        queue = by_alias.setdefault(alias, deque(maxlen=_MAX_PER_PATTERN))
        queue.append(event)
        self._schedule(scope, key, by_alias.values())
        return found

    def count(self, scope: str, rule: Rule, event: Event) -> list[Event] | None:
        """Add a match of a count rule; return the events when `count` of them fall within the window."""
        when = rule.when
        assert isinstance(when, Count)
        key = same_key(event, when.same)
        if key is None:
            return None
        self._horizon[scope] = when.within_s + self._lateness
        window = self._counts[(scope, key)]
        window.append(event)
        inside = sorted((e for e in window if abs(e.timestamp - event.timestamp) <= when.within_s),
                        key=lambda e: (e.timestamp, e.id))
        if len(inside) < when.count:
            self._schedule(scope, key, (window,))
            return None
        window.clear()
        heapq.heappush(self._expiries, (-math.inf, next(self._pushes), scope, key))  # emptied: drop at next expire
        return inside

    def absence_event(self, scope: str, rule: Rule, alias: str, event: Event) -> None:
        """An event matched a pattern of an absence rule: the arming pattern (`alias` ARM_ALIAS) arms its key;
        the expected pattern re-arms a heartbeat, or disarms the armings it answers."""
        when = rule.when
        assert isinstance(when, Absence)
        key = same_key(event, when.same)
        if key is None:
            return
        if when.after is None:
            self._heartbeat(scope, rule, when, key, event)
        elif alias == when.after.alias:
            self._arm(scope, rule, when, key, event)
        else:
            self._disarm(scope, when, key, event)

    def _heartbeat(self, scope: str, rule: Rule, when: Absence, key: Key, event: Event) -> None:
        previous = self._last_seen.get((scope, key))
        if previous is None or previous[1].timestamp <= event.timestamp:
            self._last_seen[(scope, key)] = (rule, event, False)
            self._push_deadline(event.timestamp + when.for_s, scope, key, event.id)

    def _arm(self, scope: str, rule: Rule, when: Absence, key: Key, event: Event) -> None:
        """Arm the key, unless an expected event that answers this arming arrived before it (out of order)."""
        if any(_answers(expected, event, when.for_s) for expected in self._expected.get((scope, key), ())):
            return
        self._armed.setdefault((scope, key), {})[event.id] = (rule, event)
        self._push_deadline(event.timestamp + when.for_s, scope, key, event.id)

    def _disarm(self, scope: str, when: Absence, key: Key, expected: Event) -> None:
        """Drop the armings this expected event answers; keep it for `for` + lateness for armings still to come."""
        armings = self._armed.get((scope, key))
        if armings:
            for event_id in [i for i, (_rule, arming) in armings.items() if _answers(expected, arming, when.for_s)]:
                del armings[event_id]
            if not armings:
                del self._armed[(scope, key)]
        self._horizon[scope] = when.for_s + self._lateness
        queue = self._expected.setdefault((scope, key), deque(maxlen=_MAX_PER_PATTERN))
        queue.append(expected)
        self._schedule(scope, key, (queue,))

    def _push_deadline(self, due: float, scope: str, key: Key, event_id: str) -> None:
        heapq.heappush(self._deadlines, (due, next(self._pushes), scope, key, event_id))

    def absence_due(self, now: float) -> bool:
        """Whether `absent(now)` may return anything: a cheap test the engine makes before every event."""
        return bool(self._deadlines) and self._deadlines[0][0] < now

    def absent(self, now: float) -> list[tuple[str, Rule, Event, float]]:
        """Absences overdue at `now`: (scope, rule, last expected or arming event, silence). Each fires once."""
        due = []
        while self._deadlines and self._deadlines[0][0] < now:
            _deadline, _push, scope, key, event_id = heapq.heappop(self._deadlines)
            armings = self._armed.get((scope, key))
            if armings is not None and event_id in armings:
                rule, arming = armings.pop(event_id)
                if not armings:
                    del self._armed[(scope, key)]
                due.append((scope, rule, arming, now - arming.timestamp))
                continue
            current = self._last_seen.get((scope, key))
            if current is None or current[2] or current[1].id != event_id:
                continue  # re-armed by a newer event since, fired already, disarmed, or forgotten
            rule, event, _fired = current
            due.append((scope, rule, event, now - event.timestamp))
            self._last_seen[(scope, key)] = (rule, event, True)
        return due

    def _schedule(self, scope: str, key: tuple[object, ...], queues: Iterable[deque[Event]]) -> None:
        """Note when the oldest event of a key expires (its queues' fronts change on append and expiry)."""
        fronts = [queue[0].timestamp for queue in queues if queue]
        if fronts:
            due = min(fronts) + self._horizon.get(scope, 0.0)
            heapq.heappush(self._expiries, (due, next(self._pushes), scope, key))

    def expire(self, watermark: float) -> None:
        """Drop events no window can use any more.

        Every key with an event due has an entry in `_expiries` at or before that event's expiry, so visiting
        the keys whose entries are due (with a millisecond of slack for float rounding) drops exactly what a
        scan of every key would.
        """
        visit: set[tuple[str, tuple[object, ...]]] = set()
        while self._expiries and self._expiries[0][0] <= watermark + 1e-3:
            _due, _push, scope, key = heapq.heappop(self._expiries)
            visit.add((scope, key))
        for scope, key in visit:
            horizon = watermark - self._horizon.get(scope, 0.0)
            for store in (self._recent, self._counts, self._expected):
                value = store.get((scope, key))
                if value is None:
                    continue
                queues = list(value.values()) if isinstance(value, dict) else [value]
                for queue in queues:
                    while queue and queue[0].timestamp < horizon:
                        queue.popleft()
                if any(queues):
                    self._schedule(scope, key, queues)
                else:
                    del store[(scope, key)]

    def forget(self, scopes: set[str]) -> None:
        """Drop the state of rules that are no longer loaded."""
        for store in (self._recent, self._counts, self._last_seen, self._armed, self._expected):
            for (scope, key) in list(store):
                if scope in scopes:
                    del store[(scope, key)]
        self._expiries = [entry for entry in self._expiries if entry[2] not in scopes]
        heapq.heapify(self._expiries)


def _answers(expected: Event, arming: Event, for_s: float) -> bool:
    """Whether an expected event disarms an arming: another event of its key, at or after it, within `for_s`."""
    return expected.id != arming.id and arming.timestamp <= expected.timestamp <= arming.timestamp + for_s


def _complete(when: Correlation, by_alias: Mapping[str, deque[Event]], alias: str,
              event: Event) -> dict[str, Event] | None:
    """Find, for every other pattern, the event nearest in time that keeps window and order; None if none."""
    aliases = [p.alias for p in when.patterns]
    options: list[list[Event]] = []
    for other in aliases:
        if other == alias:
            options.append([event])
            continue
        near = [e for e in by_alias.get(other, ()) if abs(e.timestamp - event.timestamp) <= when.within_s]
        if not near:
            return None
        options.append(sorted(near, key=lambda e: abs(e.timestamp - event.timestamp))[:20])
    for combo in itertools.product(*options):
        times = [e.timestamp for e in combo]
        if max(times) - min(times) > when.within_s:
            continue
        if when.ordered and any(a > b for a, b in itertools.pairwise(times)):
            continue
        if len({e.id for e in combo}) != len(combo):
            continue
        return dict(zip(aliases, combo, strict=True))
    return None
