"""Root cause and cascade in one job's evidence: which incident started it and which followed from it.

The log probe labels every event it sends with `role` (root or cascade) and `signature`, from the registry in
probes/logs/signatures.py (other probes' events carry no role: an Xid from NVML and an OOM from eBPF count as
roots, the rest as cascades). Given the events of one job, the root is the earliest root; every cascade is
listed after it, so one page names the cause and the cascades ride along.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuslo.engine.events import Event

ROLE_KEY, SIGNATURE_KEY = "role", "signature"
# roots when an event has no role label
_ROOT_KINDS = frozenset({"gpu_xid", "gpu_fault", "gpu_health", "cuda_oom", "cuda_error", "loss_nonfinite"})
_DETAILS = ("xid", "fault", "error_name", "op", "seq", "requested_bytes", "metric", "step")


def role_of(event: Event) -> str:
    """`root` or `cascade`: the event's `role` label, else by kind."""
    role = event.labels.get(ROLE_KEY)
    if role in ("root", "cascade"):
        return role
    return "root" if event.kind in _ROOT_KINDS else "cascade"


def describe(event: Event) -> str:
    where = event.host + (f" rank {event.rank}" if event.rank is not None else "") + (
        f" GPU {event.gpu}" if event.gpu is not None else "")
    details = ", ".join(f"{k} {event.attrs[k]}" for k in _DETAILS if k in event.attrs)
    return f"{event.kind} on {where}" + (f" ({details})" if details else "")


@dataclass(frozen=True)
class Cascade:
    """The root of one job's incident and what followed from it (None: no root in the evidence)."""

    root: Event | None
    cascades: tuple[Event, ...]

    @property
    def sentence(self) -> str:
        followers = "; ".join(describe(e) for e in self.cascades[:8])
        more = f" and {len(self.cascades) - 8} more" if len(self.cascades) > 8 else ""
        if self.root is None:
            return f"No root cause among the evidence; cascades: {followers}{more}."
        head = f"Root cause: {describe(self.root)} at {self.root.time.strftime('%H:%M:%S.%f')[:12]} UTC"
        if not self.cascades:
            return head + "."
        count = len(self.cascades)
        noun = "cascade follows" if count == 1 else "cascades follow"
        return f"{head}; {count} {noun} from it: {followers}{more}."

    def to_dict(self) -> dict[str, Any]:
        return {"root": None if self.root is None else self.root.to_dict(),
                "cascades": [e.to_dict() for e in self.cascades], "sentence": self.sentence}


def analyze_cascade(events: Iterable[Event]) -> Cascade | None:
    """The earliest root and every cascade after or around it, in time order; None without events."""
    ordered = sorted(events, key=lambda e: (e.time, e.id))
    if not ordered:
        return None
    roots = [e for e in ordered if role_of(e) == "root"]
    root = roots[0] if roots else None
    return Cascade(root, tuple(e for e in ordered if e is not root and role_of(e) == "cascade"))
