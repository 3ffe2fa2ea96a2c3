"""The "Stall causes" page (/stalls) and its JSON twin (/api/v1/stalls/clusters): the latest clustering of the
attributed token stalls (engine/stall_causes), with counts, share of stall time, examples and a scatter of the
stalls on their two principal components (inline SVG)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template
from werkzeug.wrappers import Response

from gpuslo.engine.attribution import SEGMENTS
from gpuslo.engine.events import format_time
from gpuslo.engine.stall_clusters import Clustering
from gpuslo.web.context import current_core

stalls_ui = Blueprint("stalls_ui", __name__)
WIDTH, HEIGHT, PAD = 600.0, 300.0, 12.0


def _layer_of(centroid: dict[str, float]) -> str:
    return max(SEGMENTS, key=lambda s: centroid.get(f"{s}_share", 0.0))


def scatter(result: Clustering) -> list[dict[str, Any]]:
    """The stalls as SVG points, scaled into the plot, coloured by their cluster's dominant layer."""
    if not result.points:
        return []
    xs, ys = [p[1] for p in result.points], [p[2] for p in result.points]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    layer = {c.id: _layer_of(dict(c.centroid)) for c in result.clusters}
    return [{"id": sid, "cluster": result.labels[sid], "layer": layer.get(result.labels[sid], "unattributed"),
             "x": PAD + (x - min(xs)) / span_x * (WIDTH - 2 * PAD),
             "y": HEIGHT - PAD - (y - min(ys)) / span_y * (HEIGHT - 2 * PAD)} for sid, x, y in result.points]


@stalls_ui.get("/stalls")
def stall_causes_page() -> str:
    at, result, _ = current_core().stall_causes.latest()
    clusters = [{**c.__dict__, "layer": _layer_of(dict(c.centroid))} for c in result.clusters]
    return render_template("stalls.html", at=format_time(at), clusters=clusters, points=scatter(result),
                           width=WIDTH, height=HEIGHT)


@stalls_ui.get("/api/v1/stalls/clusters")
def stall_clusters_api() -> Response:
    at, result, _ = current_core().stall_causes.latest()
    return jsonify({"computed_at": format_time(at), **result.to_dict()})
