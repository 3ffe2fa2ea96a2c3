"""A saved stall-cause model (`gpuslo stalls cluster --model-out`) applied on the node: the nearest cluster's id
becomes the stall's `attribution.cluster`. The feature vector is engine/stall_clusters.features without the
fragmentation context (the node has no store); tests/engine/test_stall_clusters.py checks the two agree."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import ATTRIBUTION_LAYERS

_SEGMENTS = (*ATTRIBUTION_LAYERS, "unattributed")


def vector(attrs: Mapping[str, Any]) -> dict[str, float]:
    gap = float(attrs["gap_ms"]) or 1.0
    out = {f"{s}_share": float(attrs.get(f"attribution.{s}_ms", 0.0)) / gap for s in _SEGMENTS}
    for name in ("sm_active", "dram_bw", "other_sm_share"):
        out[name] = float(attrs.get(f"attribution.{name}", 0.0))
    return {**out, "fragmentation_ratio": 0.0, "alloc_retries": 0.0}


def load(path: str) -> dict[str, Any]:
    try:
        model = json.loads(Path(path).read_text())
        if not isinstance(model.get("clusters"), list) or "eps" not in model:
            raise ValueError("no clusters and eps")
    except (OSError, ValueError, AttributeError) as exc:
        raise ProbeError(f"attribution probe: clusters={path}: not a `gpuslo stalls cluster --model-out` file "
                         f"({exc})") from exc
    return model


def nearest(attrs: Mapping[str, Any], model: Mapping[str, Any]) -> str | None:
    """The id of the nearest cluster within the model's eps, or None."""
    v = vector(attrs)
    best, best_d = None, float(model["eps"])
    for c in model["clusters"]:
        if c["id"] == "noise":
            continue
        d = sum((v[f] - float(c["centroid"].get(f, 0.0))) ** 2 for f in v) ** 0.5
        if d <= best_d:
            best, best_d = c["id"], d
    return best
