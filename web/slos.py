"""Measured SLOs: GET /api/v1/slos[/<id>] and the /slos pages (budget, burn rates, open burn alerts, causes)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, render_template

from gpuslo.engine.slo.model import LOOKBACKS
from gpuslo.engine.slo.report import SloGroup
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.slo_chart import burn_chart

slos_api = Blueprint("slos_api", __name__, url_prefix="/api/v1")
slos_ui = Blueprint("slos_ui", __name__)


def _group_or_404(group_id: str) -> SloGroup:
    group = current_core().slos.group(group_id)
    if group is None:
        raise RequestError(404, "not_found", f"No SLO group with id {group_id!r}.")
    return group


@slos_api.get("/slos")
def list_slos() -> Response:
    return jsonify({"items": [group.to_dict() for group in current_core().slos.groups()]})


@slos_api.get("/slos/<group_id>")
def get_slo(group_id: str) -> Response:
    return jsonify(_group_or_404(group_id).to_dict(causes=True))


def _open_burn_alerts() -> dict[tuple[str, str], list[ViolationView]]:
    """Unresolved burn-alert violations by (SLO, group key)."""
    return current_core().slos.open_burn_alerts()


@slos_ui.get("/slos")
def slos_page() -> str:
    slos = current_core().slos
    groups = slos.groups()
    causes = {group.id: slos.causes(group, limit=3) for group in groups}
    return render_template("slos.html", groups=groups, causes=causes, alerts=_open_burn_alerts(),
                           lookbacks=[name for name, _ in LOOKBACKS], slis=slos.slis())


@slos_ui.get("/slos/<group_id>")
def slo_page(group_id: str) -> str:
    group = _group_or_404(group_id)
    history = current_core().slos.history(group)
    thresholds = sorted({pair.burn for alert in group.sli.policy for pair in alert.pairs})
    return render_template("slo.html", g=group, chart=burn_chart(history, thresholds),
                           alerts=_open_burn_alerts().get((group.sli.slo_id, group.group_key), []),
                           lookbacks=[name for name, _ in LOOKBACKS])
