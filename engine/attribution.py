"""A token stall's attribution as the explanation carries it: the `attribution.*` attributes the attribution probe
puts on a token_stall, gathered into one mapping the violation page draws as a stacked bar."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from gpuslo.engine.events import ATTRIBUTION_LAYERS, Event

PREFIX = "attribution."
SEGMENTS = (*ATTRIBUTION_LAYERS, "unattributed")


def _evidence(text: str) -> dict[str, str]:
    """`scheduler: thread 7 runnable …; gpu: …` → per layer (a layer's text may itself hold '; ')."""
    found: dict[str, str] = {}
    current = None
    for part in text.split("; "):
        head, sep, rest = part.partition(": ")
        if sep and head in SEGMENTS:
            current = head
            found[current] = rest
        elif current is not None:
            found[current] += "; " + part
    return found


def stall_attribution(event: Event) -> Mapping[str, Any] | None:
    """The attribution of one token_stall, or None when it has none."""
    attrs = event.attrs
    if event.kind != "token_stall" or f"{PREFIX}dominant" not in attrs:
        return None
    gap = float(attrs["gap_ms"])
    evidence = _evidence(str(attrs.get(f"{PREFIX}evidence", "")))
    segments = [{"layer": layer, "ms": float(attrs.get(f"{PREFIX}{layer}_ms", 0.0)),
                 "share": float(attrs.get(f"{PREFIX}{layer}_ms", 0.0)) / gap if gap > 0 else 0.0,
                 "evidence": evidence.get(layer, "")} for layer in SEGMENTS]
    features = {k[len(PREFIX):]: v for k, v in attrs.items() if k.startswith(PREFIX)
                and k[len(PREFIX):] not in {f"{s}_ms" for s in SEGMENTS} | {"dominant", "evidence", "coverage"}}
    return MappingProxyType({"event_id": event.id, "gap_ms": gap, "dominant": attrs[f"{PREFIX}dominant"],
                             "coverage": attrs.get(f"{PREFIX}coverage"), "segments": segments,
                             "features": features})


def worst_stall_attribution(events: Iterable[Event]) -> Mapping[str, Any] | None:
    """The attribution of the longest attributed stall among the events."""
    stalls = [e for e in events if stall_attribution(e) is not None]
    return stall_attribution(max(stalls, key=lambda e: e.attrs["gap_ms"])) if stalls else None
