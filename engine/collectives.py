"""Rank-mismatch analysis of a collective hang: which ranks timed out and which never joined.

In a hang the ranks that report an NCCL watchdog timeout are victims, waiting in a collective that one
or more ranks never entered; those ranks report nothing for that sequence number. Given the timeouts of
one job and its world size, the suspects are the ranks of the world missing from the timeouts.

The eBPF view (`nccl_progress` events of the NCCL probe) counts the collectives each rank entered on its
communicator: a rank whose count is behind the most advanced rank never entered the collective the others wait
in. It names the suspect beside the log's view, and alone when the logs are missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuslo.engine.events import Event

WORLD_SIZE_KEY = "world_size"  # an event label, set by whoever starts the probes beside the job


@dataclass(frozen=True)
class RankProgress:
    """A rank's last collective as the eBPF probe counted it."""

    rank: int
    op: str | None
    seq: int
    state: str | None
    host: str
    lag: int = 0  # behind the most advanced rank of the communicator on its host, as the probe saw it

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "op": self.op, "seq": self.seq, "state": self.state, "host": self.host,
                "lag": self.lag}


def ebpf_progress(events: Iterable[Event]) -> tuple[RankProgress, ...]:
    """Each rank's latest `nccl_progress` (by time), in rank order."""
    latest: dict[int, Event] = {}
    for event in events:
        rank = _rank(event)
        seq = _int(event.attrs.get("seq")) if event.kind == "nccl_progress" else None
        if rank is None or seq is None:
            continue
        if rank not in latest or (event.time, event.id) > (latest[rank].time, latest[rank].id):
            latest[rank] = event
    return tuple(RankProgress(r, _text(e.attrs, "op"), _int(e.attrs["seq"]) or 0, _text(e.attrs, "state"), e.host,
                              _int(e.attrs.get("lag")) or 0)
                 for r, e in sorted(latest.items()))


def _behind(progress: tuple[RankProgress, ...]) -> tuple[int, ...]:
    most = max((p.seq for p in progress), default=0)
    return tuple(p.rank for p in progress if p.seq < most or p.lag > 0)


def _ebpf_sentence(progress: tuple[RankProgress, ...]) -> str:
    if not progress:
        return ""
    seen = ", ".join(f"rank {p.rank} entered {p.op or 'collective'} #{p.seq}" for p in progress)
    behind = _behind(progress)
    if not behind:
        return f" eBPF: {seen}; no rank is behind."
    return (f" eBPF: {seen}; never entered the next collective: {_ranks(behind)} "
            f"({'the suspect' if len(behind) == 1 else 'the suspects'}, from eBPF).")


@dataclass(frozen=True)
class CollectiveHang:
    """One hung collective: its identity, the ranks that timed out and the suspects (None: world unknown)."""

    job: str | None
    op: str | None
    seq: int | None
    pg: str | None
    timed_out: tuple[int, ...]
    world_size: int | None
    suspects: tuple[int, ...] | None
    timeout_ms: int | None
    elapsed_ms: int | None
    ebpf: tuple[RankProgress, ...] = ()

    @property
    def ebpf_behind(self) -> tuple[int, ...]:
        """The ranks the eBPF counts show behind the most advanced one."""
        return _behind(self.ebpf)

    @property
    def sentence(self) -> str:
        """One or two sentences for the explanation: the log's view, then the eBPF view when there is one."""
        if self.seq is None:  # eBPF alone: no watchdog line
            return _ebpf_sentence(self.ebpf).strip()
        return self._log_sentence() + _ebpf_sentence(self.ebpf)

    def _log_sentence(self) -> str:
        where = f"{self.op or 'collective'} seq {self.seq}" + (f" (process group {self.pg})" if self.pg else "")
        head = f"Timed out in {where}: {_ranks(self.timed_out)}"
        if self.suspects is None:
            return (f"{head}; the world size is unknown (label {WORLD_SIZE_KEY}), so the rank that never joined "
                    "cannot be named: compare with the job's ranks.")
        if not self.suspects:
            return f"{head}; every rank of world size {self.world_size} timed out, none is missing from it."
        suspect = "the suspect" if len(self.suspects) == 1 else "the suspects"
        return f"{head}; never joined: {_ranks(self.suspects)} of world size {self.world_size} ({suspect})."

    def to_dict(self) -> dict[str, Any]:
        """Plain values for summary templates and JSON."""
        return {"job": self.job, "op": self.op, "seq": self.seq, "pg": self.pg, "timed_out": list(self.timed_out),
                "world_size": self.world_size, "timeout_ms": self.timeout_ms, "elapsed_ms": self.elapsed_ms,
                "suspects": None if self.suspects is None else list(self.suspects), "sentence": self.sentence,
                "ebpf": [p.to_dict() for p in self.ebpf], "ebpf_behind": list(self.ebpf_behind)}


def _ranks(ranks: tuple[int, ...]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _rank(event: Event) -> int | None:
    return event.rank if event.rank is not None else _int(event.attrs.get("rank"))


def world_size_of(events: Iterable[Event]) -> int | None:
    """The world size stated by the events' `world_size` label; the largest if they disagree."""
    sizes = [_int(e.labels.get(WORLD_SIZE_KEY)) for e in events]
    known = [s for s in sizes if s is not None and s > 0]
    return max(known) if known else None


def analyze_hang(events: Iterable[Event], world_size: int | None = None) -> CollectiveHang | None:
    """The hung collective in the nccl_timeout events of one job (other kinds and timeouts without a seq
    are ignored): the (process group, seq) most ranks timed out on, the lowest seq on a tie. `world_size`
    overrides the one the events state. None when no timeout names a seq."""
    events = list(events)
    progress = ebpf_progress(events)
    timeouts = [e for e in events if e.kind == "nccl_timeout" and _int(e.attrs.get("seq")) is not None]
    if not timeouts:
        return _from_ebpf(events, progress, world_size) if progress else None
    by_collective: dict[tuple[str | None, int], list[Event]] = {}
    for event in timeouts:
        pg = event.attrs.get("pg")
        by_collective.setdefault((None if pg is None else str(pg), _int(event.attrs["seq"]) or 0), []).append(event)
    (pg, seq), group = min(by_collective.items(), key=lambda item: (-_rank_count(item[1]), item[0][1]))
    ranks = tuple(sorted({r for r in map(_rank, group) if r is not None}))
    world = world_size if world_size is not None else world_size_of(timeouts + [
        e for e in events if e.kind == "nccl_progress"])
    suspects = None if world is None else tuple(r for r in range(world) if r not in ranks)
    first = min(group, key=lambda e: (e.time, e.id))
    return CollectiveHang(
        job=first.job, op=_text(first.attrs, "op"), seq=seq, pg=pg, timed_out=ranks, world_size=world,
        suspects=suspects, timeout_ms=_int(first.attrs.get("timeout_ms")),
        elapsed_ms=max((v for v in (_int(e.attrs.get("elapsed_ms")) for e in group) if v is not None), default=None),
        ebpf=progress)


def _from_ebpf(events: list[Event], progress: tuple[RankProgress, ...], world_size: int | None) -> CollectiveHang:
    """The hang as the eBPF counts alone show it (no watchdog line): the suspects are the ranks behind."""
    world = world_size if world_size is not None else world_size_of(events)
    lead = max(progress, key=lambda p: p.seq)
    job = next((e.job for e in events if e.kind == "nccl_progress" and e.job), None)
    return CollectiveHang(job=job, op=lead.op, seq=None, pg=None, timed_out=(), world_size=world,
                          suspects=_behind(progress), timeout_ms=None, elapsed_ms=None, ebpf=progress)


def _rank_count(group: list[Event]) -> int:
    return len({r for r in map(_rank, group) if r is not None})


def _text(attrs: Mapping[str, Any], key: str) -> str | None:
    value = attrs.get(key)
    return None if value is None else str(value)
