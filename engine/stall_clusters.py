"""Clustering of stall causes: each attributed token_stall becomes a feature vector (layer shares, SM active, DRAM
bandwidth, the contending process's SM share, the fragmentation ratio and allocator retries seen on its GPU in
the minute before), scikit-learn's DBSCAN groups them, and each cluster is named by its dominant features.

Cluster ids are slugs of those names ("cpu-starvation", "gpu-contention", …; "-2" for a second cluster with the
same name, ordered by size): the same data give the same ids on every run, and a new run's cluster of the same
cause keeps its id. `assign` puts a stall into the nearest named cluster of a saved model (the agent's
`attribution.cluster`), so rules and SLO attribution can use it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuslo.engine.attribution import SEGMENTS
from gpuslo.engine.events import Event

FEATURES = (*(f"{s}_share" for s in SEGMENTS), "sm_active", "dram_bw", "other_sm_share", "fragmentation_ratio",
            "alloc_retries")
NAMES = {"scheduler": ("cpu-starvation", "CPU starvation of the engine thread"),
         "network": ("network-delay", "Network delay between server and client"),
         "kernel": ("kernel-io", "Blocking I/O or system calls in the serving thread"),
         "compute": ("engine-compute", "The serving thread's own work on the CPU"),
         "unattributed": ("unexplained", "No signal explains the stall")}
FR_WINDOW_S = 60.0


@dataclass(frozen=True)
class Cluster:
    """One named cause: how many stalls, their share of all stall time, the mean feature values, examples."""

    id: str
    name: str
    count: int
    stall_ms: float
    time_share: float
    centroid: Mapping[str, float]
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Clustering:
    clusters: tuple[Cluster, ...]
    labels: Mapping[str, str]          # stall id → cluster id ("noise" for DBSCAN's outliers)
    points: tuple[tuple[str, float, float], ...]  # (stall id, x, y) on the two principal components
    eps: float
    min_samples: int

    def to_dict(self) -> dict[str, Any]:
        return {"eps": self.eps, "min_samples": self.min_samples, "clusters": [asdict(c) for c in self.clusters],
                "labels": dict(self.labels)}


def features(stall: Event, context: Sequence[Event] = ()) -> dict[str, float]:
    """The feature vector of one attributed stall; `context` holds mem_fragmentation events for FR and retries."""
    a = stall.attrs
    gap = float(a["gap_ms"]) or 1.0
    out = {f"{s}_share": float(a.get(f"attribution.{s}_ms", 0.0)) / gap for s in SEGMENTS}
    for name in ("sm_active", "dram_bw", "other_sm_share"):
        out[name] = float(a.get(f"attribution.{name}", 0.0))
    before = [e for e in context if e.kind == "mem_fragmentation" and e.host == stall.host and e.gpu == stall.gpu
              and 0 <= stall.timestamp - e.timestamp <= FR_WINDOW_S]
    last = max(before, key=lambda e: e.timestamp, default=None)
    out["fragmentation_ratio"] = float(last.attrs["fragmentation_ratio"]) if last else 0.0
    out["alloc_retries"] = min(float(last.attrs.get("alloc_retries", 0)), 10.0) / 10.0 if last else 0.0
    return out


def name_of(centroid: Mapping[str, float]) -> tuple[str, str]:
    """(slug, name) of a cluster from its dominant features."""
    layer = max(SEGMENTS, key=lambda s: centroid[f"{s}_share"])
    if layer == "gpu":
        if centroid["other_sm_share"] >= 0.2:
            return "gpu-contention", "GPU contention by another process"
        return "gpu-busy", "GPU busy with the serving process's own work"
    if layer == "driver":
        if centroid["fragmentation_ratio"] > 0.65 or centroid["alloc_retries"] > 0:
            return "allocator-flush", "Allocator flush-and-retry after fragmentation"
        return "allocator-flush", "Allocator flush (blocking CUDA allocation and free calls)"
    return NAMES[layer]


def cluster(stalls: Iterable[Event], context: Sequence[Event] = (), *, eps: float = 0.2,
            min_samples: int = 3) -> Clustering:
    """DBSCAN over the attributed stalls' feature vectors; clusters named and ordered by stall time."""
    import numpy as np
    from sklearn.cluster import DBSCAN
    from sklearn.decomposition import PCA

    attributed = [s for s in stalls if s.kind == "token_stall" and "attribution.dominant" in s.attrs]
    if not attributed:
        return Clustering((), {}, (), eps, min_samples)
    matrix = np.array([[features(s, context)[f] for f in FEATURES] for s in attributed])
    raw = DBSCAN(eps=eps, min_samples=min_samples).fit_predict(matrix)
    coords = PCA(n_components=2).fit_transform(matrix) if len(attributed) >= 2 else np.zeros((1, 2))
    total_ms = sum(float(s.attrs["gap_ms"]) for s in attributed)
    groups: dict[int, list[int]] = {}
    for index, label in enumerate(raw):
        groups.setdefault(int(label), []).append(index)
    found: list[tuple[str, str, list[int], dict[str, float]]] = []
    for label, members in groups.items():
        centroid = {f: float(matrix[members, i].mean()) for i, f in enumerate(FEATURES)}
        slug, name = ("noise", "Unclustered stalls") if label == -1 else name_of(centroid)
        found.append((slug, name, members, centroid))
    found.sort(key=lambda c: -sum(float(attributed[i].attrs["gap_ms"]) for i in c[2]))
    seen: Counter[str] = Counter()
    clusters, labels = [], {}
    for slug, name, members, centroid in found:
        seen[slug] += 1
        cid = slug if seen[slug] == 1 else f"{slug}-{seen[slug]}"
        ms = sum(float(attributed[i].attrs["gap_ms"]) for i in members)
        biggest = sorted(members, key=lambda i: -float(attributed[i].attrs["gap_ms"]))[:3]
        clusters.append(Cluster(cid, name, len(members), round(ms, 3), round(ms / total_ms, 4),
                                {k: round(v, 4) for k, v in centroid.items()},
                                tuple(attributed[i].id for i in biggest)))
        labels.update({attributed[i].id: cid for i in members})
    points = tuple((s.id, float(coords[i][0]), float(coords[i][1])) for i, s in enumerate(attributed))
    return Clustering(tuple(clusters), labels, points, eps, min_samples)


def assign(stall: Event, model: Mapping[str, Any], context: Sequence[Event] = ()) -> str | None:
    """The id of the saved model's nearest cluster within its eps, or None."""
    vector = features(stall, context)
    best, best_d = None, float(model["eps"])
    for c in model["clusters"]:
        if c["id"] == "noise":
            continue
        d = sum((vector[f] - c["centroid"][f]) ** 2 for f in FEATURES) ** 0.5
        if d <= best_d:
            best, best_d = c["id"], d
    return best
