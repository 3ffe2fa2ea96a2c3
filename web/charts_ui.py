"""Chart pages: the token-latency heatmap and the fragmentation timeline per GPU, each above its table."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from flask import Blueprint, render_template, request

from gpuslo.engine.events import Event
from gpuslo.engine.store.charts import EventSeries
from gpuslo.engine.store.read_models import ViolationFilter
from gpuslo.web.chart_data import memory_timeline, token_heatmap, token_series_key
from gpuslo.web.context import current_core
from gpuslo.web.filters import ChartFilter, chart_filter

charts_ui = Blueprint("charts_ui", __name__)

TOKEN_KINDS = ("token_latency", "token_stall")
MEMORY_KINDS = ("mem_fragmentation",)
MARKER_KINDS = ("cuda_oom", "token_stall")
MAX_GPU_CHARTS = 16
MAX_SERIES_CHARTS = 8


def _series(kinds: tuple[str, ...], chosen: ChartFilter) -> EventSeries:
    return current_core().queries.event_series(kinds, host=chosen.host, gpu=chosen.gpu, since=chosen.since,
                                               until=chosen.until)


def _places(kinds: tuple[str, ...]) -> list[tuple[str, int | None]]:
    return current_core().queries.event_places(kinds)


def _span(key: tuple[str, str, str, str], events: list[Event]) -> ViolationFilter:
    """The violations to mark on one token series: its host and GPU over its time span."""
    host, gpu, _, _ = key
    return ViolationFilter(host=host, gpu=int(gpu) if gpu else None, since=events[0].time, until=events[-1].time)


@charts_ui.get("/charts/tokens")
def tokens() -> str:
    chosen = chart_filter(request.args)
    series = _series(TOKEN_KINDS, chosen)
    by_key: dict[tuple[str, str, str, str], list[Event]] = defaultdict(list)
    for event in series.events:
        by_key[token_series_key(event)].append(event)
    keys = sorted(by_key)
    shown = [k for k in keys if (chosen.endpoint is None or k[2] == chosen.endpoint)
             and (chosen.model is None or k[3] == chosen.model)]
    charted = shown[:MAX_SERIES_CHARTS]
    marked = current_core().queries.violation_marks(*(_span(key, by_key[key]) for key in charted))
    panels = [{"host": host, "gpu": gpu, "endpoint": endpoint, "model": model,
               "heatmap": token_heatmap(by_key[host, gpu, endpoint, model], [m for m in marks if m.host == host])}
              for (host, gpu, endpoint, model), marks in zip(charted, marked, strict=True)]
    return render_template("charts_tokens.html", chosen=chosen, args=request.args, panels=panels,
                           places=_places(TOKEN_KINDS), endpoints=sorted({k[2] for k in keys if k[2]}),
                           models=sorted({k[3] for k in keys if k[3]}), truncated=series.truncated,
                           more=len(shown) > MAX_SERIES_CHARTS, charts_on_page=bool(panels))


@charts_ui.get("/charts/memory")
def memory() -> str:
    chosen = chart_filter(request.args)
    series = _series(MEMORY_KINDS, chosen)
    markers = _series(MARKER_KINDS, chosen)
    gpus: dict[tuple[str, int | None], list[Event]] = defaultdict(list)
    for event in series.events:
        gpus[event.host, event.gpu].append(event)
    panels: list[dict[str, Any]] = []
    for (host, gpu), samples in sorted(gpus.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
        if len(panels) == MAX_GPU_CHARTS:
            break
        near = [m for m in markers.events if m.host == host and (m.gpu is None or m.gpu == gpu)]
        panels.append({"host": host, "gpu": gpu, "samples": samples,
                       "data": memory_timeline(samples, near), "markers": near})
    return render_template("charts_memory.html", chosen=chosen, args=request.args, panels=panels,
                           places=_places(MEMORY_KINDS), more=len(gpus) > MAX_GPU_CHARTS,
                           truncated=series.truncated, charts_on_page=True)
