"""SLI counting in a fleet partition: what a new owner reads, with the partition's offset, to go on counting
exactly where the last owner's stored counts stand.

The partition's evaluator counts only the SLIs of its key space (routing.sli_space), and only groups whose field
value routes to this partition reach it. Their stored minute buckets are exactly the counts of the events up to
the stored offset (they are written in the offset's transaction), so a new owner seeds its running sums from them,
replays the stream without counting (routing.rulebooks_for, SloCounter.replaying) and marks firing the burn
alerts whose violations are open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuslo.engine.fleet.routing import Partition, slis_of, value_index
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.slo import model as slo_model
from gpuslo.engine.slo import store as slo_store
from gpuslo.engine.slo.counter import parse_key
from gpuslo.engine.slo.model import Sli
from gpuslo.engine.store.models import ViolationRow

Seeded = tuple[str, int, int, int]  # group key, minute, good, total (SloSeed's rows)
_V = ViolationRow.__table__.c


@dataclass(frozen=True)
class SliState:
    """A partition's SLI groups as stored: each SLI's buckets, and the (burn rule id, group key) firing."""

    buckets: dict[str, tuple[Seeded, ...]]
    firing: frozenset[tuple[str, str]]

    def seed(self, sli: Sli) -> tuple[Seeded, ...]:
        return self.buckets.get(sli.slo_id, ())


def burn_rule_ids(rulebooks: Sequence[Rulebook]) -> tuple[str, ...]:
    """Every burn alert's rule id of the rulebooks' SLIs."""
    return slo_model.burn_rule_ids(slis_of(rulebooks))


def owns_group(partition: Partition, sli: Sli, key: str) -> bool:
    """Whether a stored group key of `sli` routes to `partition` (its field's value, parsed back)."""
    return value_index(parse_key(key, sli.group_by).get(partition.space), partition.partitions) == partition.index


def read_state(session: Session, partition: Partition, rulebooks: Sequence[Rulebook]) -> SliState:
    """The stored buckets of the window and the open burn violations of this partition's SLIs and groups;
    `rulebooks` are the partition's own (routing.rulebooks_for: only its space's SLIs measured)."""
    buckets: dict[str, tuple[Seeded, ...]] = {}
    firing: set[tuple[str, str]] = set()
    slis = slis_of(rulebooks)
    for sli in slis:
        buckets[sli.slo_id] = tuple(row for row in slo_store.stored_buckets(session, sli)
                                    if owns_group(partition, sli, row[0]))
    rules = {sli.alert_rule_id(alert): sli for sli in slis for alert in sli.policy}
    if rules:
        rows = session.execute(select(_V.rule_id, _V.group_key)
                               .where(_V.rule_id.in_(sorted(rules)), _V.status.in_(("open", "acknowledged"))))
        firing = {(rule, key) for rule, key in rows if owns_group(partition, rules[rule], key)}
    return SliState(buckets, frozenset(firing))
