"""What the API, UI and /metrics show of each SLO group: window totals, budget, burn rates, causes.

Figures are as of the SLO's newest counted minute (the stream's clock, so a replayed incident reads as it
happened). A lookback of W sums the minutes m − W + 1 … m, the same buckets the engine's burn alerts sum;
windows longer than 1 h read whole hours from slo_hours and only their two partial hours from slo_buckets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from gpuslo.engine.slo.counter import _parse_key, window_start_minute
from gpuslo.engine.slo.maths import budget_remaining, burn_rate, exhaustion_s
from gpuslo.engine.slo.model import BUCKET_S, LOOKBACKS, Sli
from gpuslo.engine.store.models import SloBucketRow, SloCauseRow, SloHourRow, ViolationRow

_B, _H, _C, _V = (SloBucketRow.__table__.c, SloHourRow.__table__.c, SloCauseRow.__table__.c,
                  ViolationRow.__table__.c)
_RECENT_M = 60  # lookbacks up to 1 h are summed from minutes alone; longer ones from hours and two partial hours


def slo_group_id(slo_id: str, key: str) -> str:
    """A URL-safe id of one SLO group: the SLO id alone when it has no group_by."""
    return slo_id if key == "-" else f"{slo_id}~{hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:10]}"


@dataclass(frozen=True)
class Cause:
    rule_id: str
    violation_id: int
    group_key: str
    bad: int
    share: float  # of the window's error budget


@dataclass(frozen=True)
class SloGroup:
    """One SLO group's figures."""

    id: str
    sli: Sli
    group_key: str
    group: dict[str, Any]
    as_of_minute: int
    good: int
    total: int
    attributed: int
    lookbacks: dict[str, tuple[int, int]]
    causes: tuple[Cause, ...] = field(default=())

    @property
    def as_of(self) -> datetime:
        """The end of the newest counted minute."""
        return datetime.fromtimestamp((self.as_of_minute + 1) * BUCKET_S, UTC)

    @property
    def remaining(self) -> float:
        return budget_remaining(self.good, self.total, self.sli.target)

    @property
    def budget(self) -> float:
        return (1 - self.sli.target) * self.total

    def burn_rates(self) -> dict[str, float]:
        return {name: round(burn_rate(g, t, self.sli.target), 4) for name, (g, t) in self.lookbacks.items()}

    @property
    def exhaustion_s(self) -> float | None:
        return exhaustion_s(self.remaining, self.sli.window_s, burn_rate(*self.lookbacks["1h"], self.sli.target))

    @property
    def unattributed(self) -> float:
        """The share of the budget spent by bad requests no violation was open for."""
        bad = self.total - self.good - self.attributed
        return round(bad / self.budget, 4) if self.budget else 0.0

    def to_dict(self, *, causes: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "slo": self.sli.slo_id, "service": self.sli.service, "objective": self.sli.target,
            "description": self.sli.description, "window_s": self.sli.window_s, "calendar": self.sli.calendar,
            "group": self.group, "good": self.good, "total": self.total,
            "error_budget_remaining": round(self.remaining, 4), "burn_rates": self.burn_rates(),
            "exhaustion_s": None if self.exhaustion_s is None else round(self.exhaustion_s),
            "as_of": self.as_of_minute * BUCKET_S}
        if causes:
            out["causes"] = [{"rule_id": c.rule_id, "violation_id": c.violation_id, "group_key": c.group_key,
                              "bad": c.bad, "share": round(c.share, 4)} for c in self.causes]
            out["unattributed"] = self.unattributed
        return out


def _ranges(sli: Sli, now: int) -> dict[str, int]:
    """First minute of each lookback and of the budget window, as of minute `now`."""
    firsts = {name: now - seconds // BUCKET_S + 1 for name, seconds in LOOKBACKS}
    firsts["window"] = window_start_minute(sli, now)
    return firsts


def _banded(session: Session, columns: Any, unit: Any, sli: Sli, lower: int, upper: int,
            thresholds: list[int]) -> dict[str, list[list[int]]]:
    """group key → per band [good, total, attributed] of the rows lower <= unit < upper, band i holding
    thresholds[i] <= unit < thresholds[i - 1] (thresholds descending): one CASE per row, not one per lookback."""
    band = case(*((unit >= t, i) for i, t in enumerate(thresholds)), else_=len(thresholds)).label("band")
    rows = session.execute(select(columns.group_key, band, func.sum(columns.good), func.sum(columns.total),
                                  func.sum(columns.attributed))
                           .where(columns.slo_id == sli.slo_id, unit >= lower, unit < upper)
                           .group_by(columns.group_key, band))
    found: dict[str, list[list[int]]] = {}
    for key, index, good, total, attributed in rows:
        bands = found.setdefault(key, [[0, 0, 0] for _ in range(len(thresholds) + 1)])
        bands[index] = [int(good), int(total), int(attributed)]
    return found


def _since(bands: list[list[int]], thresholds: list[int], first: int) -> list[int]:
    """The sum of the bands at or above `first` (a threshold)."""
    out = [0, 0, 0]
    for threshold, counts in zip(thresholds, bands, strict=False):
        if threshold < first:
            break
        for j in range(3):
            out[j] += counts[j]
    return out


def _figures(session: Session, sli: Sli, now: int) -> dict[str, dict[str, list[int]]]:
    """group key → range name → [good, total, attributed] as of minute `now`."""
    firsts = _ranges(sli, now)
    short = {n: f for n, f in firsts.items() if now - f < _RECENT_M}
    long = {n: f for n, f in firsts.items() if now - f >= _RECENT_M}
    tail = (now + 1) // 60 * 60  # the first minute of the hour `now` is in, when that hour is not complete
    found: dict[str, dict[str, list[int]]] = {}
    # Minutes of the last 6 h: the short lookbacks whole, and the trailing partial hour of the long ones.
    marks = sorted({*short.values(), tail}, reverse=True)
    for key, bands in _banded(session, _B, _B.minute, sli, now - _RECENT_M + 1, now + 1, marks).items():
        sums = found.setdefault(key, {})
        for name, first in short.items():
            sums[name] = _since(bands, marks, first)
        for name in long:
            sums[name] = _since(bands, marks, tail)
    if not long:
        return found
    # Whole hours [ceil(first / 60), tail / 60), nested for the long lookbacks: one banded pass over slo_hours.
    # A sum per head (GROUP BY group_key alone streams along the covering index: no sort).
    heads = {name: -(-first // 60) for name, first in long.items()}
    cols = [func.sum(case((_H.hour >= head, _H[c]), else_=0)) for head in heads.values()
            for c in ("good", "total", "attributed")]
    for key, *values in session.execute(select(_H.group_key, *cols).where(
            _H.slo_id == sli.slo_id, _H.hour >= min(heads.values()), _H.hour < tail // 60).group_by(_H.group_key)):
        sums = found.setdefault(key, {})
        for i, name in enumerate(heads):
            part = [int(v) for v in values[3 * i:3 * i + 3]]
            sums[name] = [a + b for a, b in zip(sums.get(name, [0, 0, 0]), part, strict=True)]
    # The leading partial hour of each long lookback: minutes [first, ceil(first / 60) * 60), each under an hour.
    for name, first in long.items():
        if first % 60 == 0:
            continue
        rows = session.execute(select(_B.group_key, func.sum(_B.good), func.sum(_B.total), func.sum(_B.attributed))
                               .where(_B.slo_id == sli.slo_id, _B.minute >= first, _B.minute < heads[name] * 60)
                               .group_by(_B.group_key))
        for key, good, total, attributed in rows:
            sums = found.setdefault(key, {})
            sums[name] = [a + int(b) for a, b in zip(sums.get(name, [0, 0, 0]), (good, total, attributed),
                                                     strict=True)]
    return found


def newest_minute(session: Session, slo_id: str) -> int | None:
    return session.execute(select(func.max(_B.minute)).where(_B.slo_id == slo_id)).scalar()


def slo_groups(session: Session, slis: Sequence[Sli]) -> list[SloGroup]:
    """Every group of every SLI, in SLI then group key order."""
    groups = []
    for sli in slis:
        now = newest_minute(session, sli.slo_id)
        if now is None:
            continue
        for key, sums in sorted(_figures(session, sli, now).items()):
            window = sums.get("window", [0, 0, 0])
            groups.append(SloGroup(slo_group_id(sli.slo_id, key), sli, key, _parse_key(key, sli.group_by), now,
                                   window[0], window[1], window[2],
                                   {name: tuple(sums.get(name, [0, 0])[:2]) for name, _ in LOOKBACKS})) # type: ignore[misc]
    return groups


def causes_of(session: Session, group: SloGroup, limit: int = 50) -> tuple[Cause, ...]:
    """Budget spent by cause over the group's window: per violation, its bad requests and share of the budget."""
    first = window_start_minute(group.sli, group.as_of_minute)
    rows = session.execute(
        select(_C.violation_id, _V.rule_id, _V.group_key, func.sum(_C.bad).label("bad"))
        .join(ViolationRow.__table__, _V.id == _C.violation_id)
        .where(_C.slo_id == group.sli.slo_id, _C.group_key == group.group_key, _C.minute >= first,
               _C.minute <= group.as_of_minute)
        .group_by(_C.violation_id, _V.rule_id, _V.group_key).order_by(func.sum(_C.bad).desc(), _C.violation_id)
        .limit(limit))
    budget = group.budget
    return tuple(Cause(r.rule_id, r.violation_id, r.group_key, int(r.bad), int(r.bad) / budget if budget else 0.0)
                 for r in rows)


def slo_group(session: Session, slis: Sequence[Sli], group_id: str) -> SloGroup | None:
    """One group with its causes, or None."""
    slo_id = group_id.split("~", 1)[0]
    for group in slo_groups(session, [s for s in slis if s.slo_id == slo_id]):
        if group.id == group_id:
            return SloGroup(**{**group.__dict__, "causes": causes_of(session, group)})
    return None


@dataclass(frozen=True)
class ViolationCost:
    """What one violation cost an SLO group: its bad requests and their share of the group's budget."""

    group_id: str
    slo_id: str
    bad: int
    share: float


def violation_costs(session: Session, slis: Sequence[Sli], violation_id: int) -> list[ViolationCost]:
    rows = session.execute(select(_C.slo_id, _C.group_key, func.sum(_C.bad)).where(_C.violation_id == violation_id)
                           .group_by(_C.slo_id, _C.group_key)).all()
    if not rows:
        return []
    groups = {(g.sli.slo_id, g.group_key): g for g in slo_groups(session, [s for s in slis
                                                                           if s.slo_id in {r[0] for r in rows}])}
    costs = []
    for slo_id, key, bad in rows:
        group = groups.get((slo_id, key))
        budget = group.budget if group else 0.0
        costs.append(ViolationCost(slo_group_id(slo_id, key), slo_id, int(bad), int(bad) / budget if budget else 0.0))
    return costs


def hourly_burn(session: Session, group: SloGroup) -> list[tuple[int, float]]:
    """(hour start in epoch seconds, burn rate of that hour) over the group's window, oldest first."""
    first = window_start_minute(group.sli, group.as_of_minute) // 60
    rows = session.execute(select(_H.hour, _H.good, _H.total).where(
        _H.slo_id == group.sli.slo_id, _H.group_key == group.group_key, _H.hour >= first,
        _H.hour <= group.as_of_minute // 60).order_by(_H.hour))
    return [(int(hour) * 3600, burn_rate(int(good), int(total), group.sli.target)) for hour, good, total in rows]
