"""Measured SLOs as read by people: budget and burn per group, the violations that spent it, the hourly burn, the
open burn alerts; and the retention job of the SLI buckets."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from gpuslo.engine.errors import GpusloError
from gpuslo.engine.housekeeping import RETENTION_INTERVAL_S
from gpuslo.engine.services.changes import utcnow
from gpuslo.engine.slo import report
from gpuslo.engine.slo import store as slo_store
from gpuslo.engine.slo.model import Sli, burn_rule_ids
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import ViolationFilter, ViolationView

log = logging.getLogger(__name__)

_OPEN = ("open", "acknowledged")


class Slos:
    """The SLOs of one core; `slis` says which SLIs the engine counts now."""

    def __init__(self, database: Database, slis: Callable[[], tuple[Sli, ...]]):
        self._database, self.slis = database, slis

    def burn_rules(self) -> list[str]:
        """The ids of the burn-rate alert rules the SLIs define."""
        return list(burn_rule_ids(self.slis()))

    def stored_buckets(self, sli: Sli) -> list[tuple[str, int, int, int]]:
        """The stored (group key, minute, good, total) of an SLI's window: the engine's seed at a load."""
        with self._database.session(readonly=True) as session:
            return list(slo_store.stored_buckets(session, sli))

    def groups(self) -> list[report.SloGroup]:
        with self._database.session(readonly=True) as session:
            return report.slo_groups(session, self.slis())

    def group(self, group_id: str) -> report.SloGroup | None:
        with self._database.session(readonly=True) as session:
            return report.slo_group(session, self.slis(), group_id)

    def causes(self, group: report.SloGroup, limit: int = 50) -> tuple[report.Cause, ...]:
        with self._database.session(readonly=True) as session:
            return report.causes_of(session, group, limit)

    def history(self, group: report.SloGroup) -> list[tuple[int, float]]:
        with self._database.session(readonly=True) as session:
            return report.hourly_burn(session, group)

    def violation_costs(self, violation_id: int) -> list[report.ViolationCost]:
        with self._database.session(readonly=True) as session:
            return report.violation_costs(session, self.slis(), violation_id)

    def open_burn_alerts(self) -> dict[tuple[str, str], list[ViolationView]]:
        """Unresolved burn-alert violations by (SLO, group key)."""
        rules = {sli.alert_rule_id(alert): sli.slo_id for sli in self.slis() for alert in sli.policy}
        found: dict[tuple[str, str], list[ViolationView]] = {}
        if not rules:
            return found
        with self._database.session(readonly=True) as session:
            for status in _OPEN:
                page = repository.list_violations(session, ViolationFilter(status=status), page=1, page_size=500)
                for view in page.items:
                    if view.rule_id in rules:
                        found.setdefault((rules[view.rule_id], view.group_key), []).append(view)
        return found

    def run_retention(self, now: datetime | None = None) -> int:
        """The periodic job: drop SLI buckets older than each SLO's window plus a day."""
        try:
            with self._database.session() as session:
                return slo_store.prune(session, self.slis(), now or utcnow())
        except GpusloError:
            log.exception("SLO retention failed; it runs again in %.0f s", RETENTION_INTERVAL_S)
            return 0
