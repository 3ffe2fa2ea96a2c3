"""What the API, UI and /metrics show of each SLO group: window totals, budget, burn rates, causes.

Figures are as of the SLO's newest counted minute (the stream's clock, so a replayed incident reads as it
happened). A lookback of W sums the minutes m − W + 1 … m, the same buckets the engine's burn alerts sum, read
as whole days, whole hours and the edge minutes (engine/slo/ranges.py): a bounded number of rows per group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuslo.engine.slo.counter import parse_key, window_start_minute
from gpuslo.engine.slo.figures import figures
from gpuslo.engine.slo.maths import budget_remaining, burn_rate, exhaustion_s
from gpuslo.engine.slo.model import BUCKET_S, LOOKBACKS, Sli
from gpuslo.engine.store.models import SloBucketRow, SloCauseRow, SloHourRow, ViolationRow

_B, _H, _C, _V = (SloBucketRow.__table__.c, SloHourRow.__table__.c, SloCauseRow.__table__.c,
                  ViolationRow.__table__.c)


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
    stall_layer: str | None = None  # a stall violation's worst stall: its dominant layer
    stall_cluster: str | None = None  # and its cluster (`attribution.cluster`), where the node named one

    @property
    def stall_cause(self) -> str | None:
        """What budget-by-stall-cause groups this cause under: the stall's cluster, else its dominant layer."""
        return self.stall_cluster or (f"{self.stall_layer} (dominant layer)" if self.stall_layer else None)


def stall_of(explanation: Any) -> tuple[str | None, str | None]:
    """(dominant layer, cluster) of a stored explanation's worst stall attribution; (None, None) without one."""
    found = explanation.get("attribution") if isinstance(explanation, dict) else None
    if not isinstance(found, dict):
        return None, None
    features = found.get("features")
    layer, cluster = found.get("dominant"), features.get("cluster") if isinstance(features, dict) else None
    return (layer if isinstance(layer, str) else None), (cluster if isinstance(cluster, str) and cluster else None)


def by_stall_cause(causes: Sequence[Cause]) -> list[dict[str, Any]]:
    """Budget spent per stall cause, largest first: the causes that are stall violations, summed by stall_cause.
    A bad request charged to two violations counts in both (as in the causes themselves)."""
    found: dict[str, list[float]] = {}
    for cause in causes:
        if cause.stall_cause is not None:
            sums = found.setdefault(cause.stall_cause, [0, 0.0, 0])
            sums[0] += cause.bad
            sums[1] += cause.share
            sums[2] += 1
    return [{"stall_cause": name, "bad": int(bad), "share": round(share, 4), "violations": int(count)}
            for name, (bad, share, count) in sorted(found.items(), key=lambda kv: (-kv[1][1], kv[0]))]


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
                              "bad": c.bad, "share": round(c.share, 4), "stall_layer": c.stall_layer,
                              "stall_cluster": c.stall_cluster} for c in self.causes]
            out["by_stall_cause"] = by_stall_cause(self.causes)
            out["unattributed"] = self.unattributed
        return out


def slo_groups(session: Session, slis: Sequence[Sli]) -> list[SloGroup]:
    """Every group of every SLI, in SLI then group key order."""
    groups = []
    found = figures(session, slis)
    for sli in slis:
        if sli.slo_id not in found:
            continue
        now, sums_by_key = found[sli.slo_id]
        for key, sums in sorted(sums_by_key.items()):
            window = sums.get("window", [0, 0, 0])
            groups.append(SloGroup(slo_group_id(sli.slo_id, key), sli, key, parse_key(key, sli.group_by), now,
                                   window[0], window[1], window[2],
                                   {name: (sums.get(name, [0, 0])[0], sums.get(name, [0, 0])[1])
                                    for name, _ in LOOKBACKS}))
    return groups


def causes_of(session: Session, group: SloGroup, limit: int = 50) -> tuple[Cause, ...]:
    """Budget spent by cause over the group's window: per violation, its bad requests and share of the budget, and
    for a stall violation the dominant layer and cluster of its worst stall."""
    first = window_start_minute(group.sli, group.as_of_minute)
    rows = session.execute(
        select(_C.violation_id, _V.rule_id, _V.group_key, func.sum(_C.bad).label("bad"))
        .join(ViolationRow.__table__, _V.id == _C.violation_id)
        .where(_C.slo_id == group.sli.slo_id, _C.group_key == group.group_key, _C.minute >= first,
               _C.minute <= group.as_of_minute)
        .group_by(_C.violation_id, _V.rule_id, _V.group_key).order_by(func.sum(_C.bad).desc(), _C.violation_id)
        .limit(limit)).all()
    explanations: dict[int, Any] = {}
    if rows:
        for violation_id, explanation in session.execute(
                select(_V.id, _V.explanation).where(_V.id.in_([r.violation_id for r in rows]))):
            explanations[int(violation_id)] = explanation
    budget = group.budget
    return tuple(Cause(r.rule_id, r.violation_id, r.group_key, int(r.bad), int(r.bad) / budget if budget else 0.0,
                       *stall_of(explanations.get(r.violation_id)))
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
