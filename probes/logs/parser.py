"""Turns log lines into events: multi-line assembly, echo suppression, event building."""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from gpuslo.engine.events import MESSAGE_MAX, Event
from gpuslo.probes.logs.catalog import NEW_RECORD, TRIGGER, TRIGGER_WORDS, candidates
from gpuslo.probes.logs.patterns import Family, Found
from gpuslo.probes.logs.prefilter import Prefilter
from gpuslo.probes.logs.prefixes import Line, normalise, segments
from gpuslo.probes.logs.prose import has_log_structure, is_prose
from gpuslo.probes.logs.signatures import classify

# One incident is often printed again within a few lines (a C++ log line, then the Python exception, then
# torchrun's summary); these attrs say "same incident" when the copies are close and nothing that both name
# (rank, pid, gpu, log host) differs: NCCL lines of two processes or GPUs are two incidents.
_SAME_INCIDENT: dict[str, tuple[str, ...]] = {
    "cuda_oom": ("requested_bytes", "error_name"), "cuda_error": ("error_name",),
    "cuda_graph_error": ("error_name",), "nccl_timeout": ("op", "seq"), "nccl_error": ("error_name",),
    "gpu_xid": ("xid", "pci_bus"), "gpu_fault": ("fault", "pci_bus"),
    "loss_nonfinite": ("value", "metric"),  # a trainer prints the NaN loss every step: one incident
}
# Names a family gives when the line names no status; a copy with the real name is the same incident.
_UNNAMED = frozenset({"CUDAGraphCaptureError"})
# TensorFlow's GPU allocator retries a failed cuMemAlloc at 0.9 of the size it asked for, one "failed to allocate"
# line per try: a request between these fractions of the one before it is the same incident's retry
_RETRY_FRACTION = (0.85, 0.95)


def _agrees(key: str, mine: object, theirs: object) -> bool:
    """A field a later copy states agrees with the earlier copy's (None states nothing)."""
    if mine is None or mine == theirs:
        return True
    if key == "error_name" and isinstance(mine, str) and isinstance(theirs, str):
        # a re-raise names the class without its module (Ray's "RayTaskError(OutOfMemoryError)" after the
        # task's "torch.OutOfMemoryError"): the same error
        return mine.rpartition(".")[2] == theirs.rpartition(".")[2]
    if key == "requested_bytes" and isinstance(mine, int) and isinstance(theirs, int) and theirs > 0:
        low, high = _RETRY_FRACTION
        return low * theirs <= mine <= high * theirs
    return False


_WRAPPED = re.compile(r"[\])a-z,.;]")  # how a hard-wrapped remainder starts
_RECORD_HEAD = re.compile(r"[\w.]+(?:Error|Exception|Warning)\b|\w+\(\):")  # ... and a record never does
_INTERLEAVED = 4  # lines of other printers a strict block may skip (another NCCL thread's line between its two)
_TRIGGER_TEXT = re.compile(TRIGGER.pattern.decode())
# families whose start is only a marker ("CUDA"), so that reading nothing means an unknown wording, not a benign
# line (other families return nothing on purpose: TF's "not a failure" allocator warning, XLA's echoes)
_FALL_THROUGH = frozenset({"cuda_status"})
# families that relay another process's error by its class name only (Ray's "RayTaskError(OutOfMemoryError)")
_RELAYS = frozenset({"ray_task_oom"})
_PREFILTER = Prefilter(TRIGGER_WORDS, TRIGGER)  # immutable once built; sharing it between parsers is safe


@dataclass(frozen=True)
class ParserSettings:
    """Where the lines come from and the parser's limits."""

    host: str
    source: str  # path or source name; part of every event id
    job: str | None = None
    max_line_bytes: int = 64 * 1024  # longer lines keep their head
    dedupe_bytes: int = 32 * 1024  # how far apart two copies of one incident may be (a traceback or two)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Who:
    """Who an incident happened to, as far as the log says; None is unknown and agrees with anything."""

    rank: int | None
    pid: int | None
    gpu: int | None
    log_host: str | None

    def agrees(self, other: _Who) -> bool:
        return all(a is None or b is None or a == b for a, b in
                   ((self.rank, other.rank), (self.pid, other.pid), (self.gpu, other.gpu),
                    (self.log_host, other.log_host)))


@dataclass
class _Pending:
    family: Family
    lines: list[Line]
    offset: int
    key: str
    skipped: int = 0


class LogParser:
    """Feed lines (bytes with their byte offset); get events. One parser per source."""

    def __init__(self, settings: ParserSettings, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 prefilter: Prefilter | None = None):
        self._settings = settings
        self._clock = clock
        self._prefilter = prefilter or _PREFILTER
        self._pending: _Pending | None = None
        self._recent: deque[tuple[int, _Who, tuple[Any, ...], bool]] = deque()  # ..., whether a relay
        self._previous: Line | None = None
        self._skipped_line: bytes | None = None  # the physical line before a line the scan jumped to

    @property
    def pending_offset(self) -> int | None:
        """Offset of the first line of an incident still being assembled, if any."""
        return self._pending.offset if self._pending else None

    def feed(self, raw: bytes | str, offset: int, key: str | None = None, may_start: bool = True) -> list[Event]:
        """One physical line (without or with its newline) that starts at byte `offset`; `may_start` False: the
        prefilter found no trigger word in it, so it can only continue an incident."""
        if isinstance(raw, bytes):
            raw = raw[: self._settings.max_line_bytes].decode("utf-8", errors="replace")
        else:
            raw = raw[: self._settings.max_line_bytes]
        events: list[Event] = []
        for index, part in enumerate(segments(raw.rstrip("\r\n"))):
            where = key if key is not None else str(offset)
            line = self._unwrap(normalise(part, self._clock))
            events.extend(self._line(line, offset, where if index == 0 else f"{where}.{index}", may_start))
        return events

    def _unwrap(self, line: Line) -> Line:
        """A line a terminal or a paste hard-wrapped has no prefix of its own and starts mid-sentence (`] Watch
        dog caught ...`, `onds without ...`): it is still the previous line's rank, pid and GPU."""
        previous, self._previous = self._previous, line
        if line.text != line.raw or not _WRAPPED.match(line.text) or _RECORD_HEAD.match(line.text):
            self._skipped_line = None
            return line
        if self._skipped_line is not None:  # the scan jumped here: the line before was not fed
            previous = normalise(self._skipped_line.decode("utf-8", errors="replace").rstrip("\r\n"), self._clock)
        self._skipped_line = None
        if previous is None:
            return line
        self._previous = line = replace(line, time=line.time or previous.time, rank=previous.rank,
                                        pid=previous.pid, gpu=previous.gpu, log_host=previous.log_host,
                                        origin=previous.origin)
        return line

    def scan(self, buf: bytes, base: int, start: int = 0) -> list[Event]:
        """Every newline-terminated line of `buf[start:]` (`buf` starts at offset `base`), skipping lines that
        no family could start with; the caller keeps any unterminated tail."""
        events: list[Event] = []
        pos, end = start, buf.rfind(b"\n") + 1
        starts = self._prefilter.starts(buf, start, end)
        while pos < end:
            index = bisect_left(starts, pos)
            if self._pending is None:
                if index == len(starts):
                    break
                jump = max(pos, buf.rfind(b"\n", pos, starts[index]) + 1)
                self._skipped_line = buf[buf.rfind(b"\n", 0, jump - 1) + 1:jump] if jump > pos else None
                pos = jump
            stop = buf.find(b"\n", pos, end) + 1
            hit = index < len(starts) and starts[index] < stop
            events.extend(self.feed(buf[pos:stop], base + pos, may_start=hit))
            pos = stop
        return events

    def flush(self) -> list[Event]:
        """Close an incident still being assembled (end of input, or the source went quiet)."""
        pending, self._pending = self._pending, None
        return self._emit(pending) if pending else []

    def forget(self) -> None:
        """Drop pending and recent state: the file was truncated or replaced."""
        self._pending = None
        self._previous = self._skipped_line = None
        self._recent.clear()

    # ---- assembly ----

    def _line(self, line: Line, offset: int, key: str, may_start: bool = True) -> list[Event]:
        events: list[Event] = []
        if self._pending is not None:
            pending = self._pending
            if pending.family.strict and not line.text.strip():
                return []
            if self._interleaved(pending, line):
                family = self._family_of(line) if may_start else None
                if family is None or family.complete is None:
                    pending.skipped += 1  # another printer's line, at most a one-line incident of its own
                    return self._start(line, offset, key) if family else []
            if self._continues(pending, line):
                pending.lines.append(line)
                if self._complete(pending) or len(pending.lines) >= pending.family.max_lines:
                    return self.flush()
                return []
            events.extend(self.flush())
        return events + self._start(line, offset, key) if may_start else events

    @staticmethod
    def _family_of(line: Line) -> Family | None:
        """The first family whose start the line has, unless the start sits in prose (probes/logs/prose.py); a
        generic family's start also needs log structure in front of it."""
        for family in candidates(line.text):
            match = family.start.search(line.text)
            if match:
                if is_prose(line, match.start(), match.end()) or not _TRIGGER_TEXT.search(line.text):
                    return None  # prose, or a line without a trigger word (which the fast scan never feeds as a
                    # start: line feeding finds what the fast scan finds)
                if family.structured and not has_log_structure(line, match.start()):
                    return None  # a generic wording counts only with log structure
                return family
        return None

    @staticmethod
    def _generic(line: Line) -> Found | None:
        """What the generic families read on a line whose specific family read nothing ("CUDA error (transport
        table): too many resources requested for launch" starts the CUDA status family, which needs
        "CUDA error: <text>"): the first generic start with log structure in front whose reader finds a status."""
        for family in candidates(line.text):
            if not family.structured:
                continue
            match = family.start.search(line.text)
            if match and not is_prose(line, match.start(), match.end()) and has_log_structure(line, match.start()):
                found = family.extract(line.text)
                if found is not None:
                    return found
        return None

    def _start(self, line: Line, offset: int, key: str) -> list[Event]:
        """A line that may open an incident."""
        family = self._family_of(line)
        if family is None:
            return []
        pending = _Pending(family, [line], offset, key)
        if family.complete is not None and not self._complete(pending):
            self._pending = pending
            return []
        return self._emit(pending)

    @staticmethod
    def _interleaved(pending: _Pending, line: Line) -> bool:
        """Another NCCL thread's (or the same thread's INFO) line inside a strict block: skipped, not an end."""
        if not pending.family.strict or pending.skipped >= _INTERLEAVED or pending.family.accept is None:
            return False
        if pending.family.accept.search(line.text):
            return False
        first = pending.lines[0]
        if first.origin is None:
            return False
        return line.origin is not None and (line.origin != first.origin or " NCCL INFO " in f" {line.text}")

    @staticmethod
    def _text(pending: _Pending) -> str:
        return pending.family.joiner.join(line.text for line in pending.lines)

    def _complete(self, pending: _Pending) -> bool:
        assert pending.family.complete is not None
        return bool(pending.family.complete.search(self._text(pending)))

    @staticmethod
    def _continues(pending: _Pending, line: Line) -> bool:
        family, text = pending.family, line.text
        if None not in (line.rank, pending.lines[0].rank) and line.rank != pending.lines[0].rank:
            return False  # another rank's line is another rank's incident
        if family.strict:
            first = pending.lines[0]
            return (line.origin, line.log_host) == (first.origin, first.log_host) and bool(
                family.accept and family.accept.search(text))
        if family.accept is not None and family.accept.search(text):
            return True
        if family.joiner == "\n":  # a block takes the line after "Last error:" and nothing unannounced
            return pending.lines[-1].text.rstrip().endswith(":") and bool(text.strip())
        if NEW_RECORD.match(text) or any(f.start.search(text) for f in candidates(text)):
            return False
        return True

    # ---- events ----

    def _emit(self, pending: _Pending) -> list[Event]:
        found = pending.family.extract(self._text(pending))
        if found is None and pending.family.name in _FALL_THROUGH and len(pending.lines) == 1:
            found = self._generic(pending.lines[0])  # a CUDA line in a wording the status family cannot read
        if found is None:
            return []
        first = pending.lines[0]
        # the launcher's "[rankN]:" is the global rank; a "[PG ID 13 ... Rank 0]" inside the message is the rank in
        # one process group, and the message's own rank counts only when no prefix named one
        who = _Who(rank=first.rank if first.rank is not None else found.rank,
                   pid=found.pid if found.kind == "gpu_xid" or first.pid is None else first.pid,
                   gpu=found.gpu if found.gpu is not None else first.gpu, log_host=first.log_host)
        # a driver or fabric fault is the device's, whichever daemon's pid the syslog line carries
        if self._echo(found, pending.offset, replace(who, pid=None) if found.kind == "gpu_fault" else who,
                      relay=pending.family.name in _RELAYS):
            return []
        return [self._event(found, pending, who)]

    def _echo(self, found: Found, offset: int, who: _Who, *, relay: bool = False) -> bool:
        """True when the same incident was reported a short way back in this source: same kind, and every field
        of the signature this copy states agrees (a copy that states less, such as "Some NCCL operations have
        failed" after the watchdog's line, is an echo; one that states more is not; an allocator's retry at 0.9 of
        the size before it is the same incident)."""
        signature = (found.kind, *(None if found.attrs.get(k) in _UNNAMED else found.attrs.get(k)
                                   for k in _SAME_INCIDENT.get(found.kind, ())))
        while self._recent and offset - self._recent[0][0] > self._settings.dedupe_bytes:
            self._recent.popleft()
        keys = _SAME_INCIDENT.get(found.kind, ())
        for _, seen_who, seen, seen_relay in self._recent:
            if seen[0] != signature[0] or not seen_who.agrees(who):
                continue
            pairs = list(zip(keys, signature[1:], seen[1:], strict=True))
            if seen_relay and not relay:
                # the original after its relay (Ray printed the re-raise first): the relay names only the class,
                # so the class must agree and whatever more the original states is the same incident's
                named = [(key, theirs, mine) for key, mine, theirs in pairs if key == "error_name"]
                if all(_agrees(*pair) for pair in named):
                    return True
                continue
            if all(_agrees(*pair) for pair in pairs):
                if any(key == "requested_bytes" and mine not in (None, theirs) for key, mine, theirs in pairs):
                    self._recent.append((offset, who, signature, relay))  # a retry: the next asks 0.9 of this one
                return True
        self._recent.append((offset, who, signature, relay))
        return False

    def _event(self, found: Found, pending: _Pending, who: _Who) -> Event:
        settings, first = self._settings, pending.lines[0]
        digest = hashlib.sha1(f"{settings.host}|{settings.source}|{pending.key}".encode()).hexdigest()
        # A NUL in a log line would make ingest refuse the event (no database stores it as text): U+FFFD.
        message = "\n".join(line.raw for line in pending.lines)[:MESSAGE_MAX].replace("\x00", "\ufffd")
        # `host` stays the probe's host (where the log was read, what rules group by); a host named inside
        # the line (syslog, NCCL) may be another machine's when logs are collected centrally: a label.
        logged = {"log_host": who.log_host[:256]} if who.log_host else {}
        role = classify(found, pending.family.name)
        labels = {"family": pending.family.name, "log": settings.source[-256:], "signature": role.signature,
                  "role": role.role, **logged, **settings.labels}
        return Event(
            id=f"log:{digest}", kind=found.kind, time=first.time or self._clock(), host=settings.host,
            gpu=who.gpu, gpu_uuid=found.gpu_uuid, pid=who.pid, job=settings.job, rank=who.rank,
            labels=MappingProxyType(labels), source="logs", attrs=MappingProxyType(dict(found.attrs)),
            message=message)
