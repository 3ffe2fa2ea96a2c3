"""Where lines come from: followed files (rotation-safe, resumable), a byte stream, journald, /dev/kmsg."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.logs.parser import LogParser
from gpuslo.probes.logs.state import StateStore

CHUNK = 1 << 20
_HEAD = 4096  # bytes hashed to recognise a file again: its first line, up to this much


class LineAssembler:
    """Cuts a byte stream into lines for a parser: keeps the unterminated tail, caps huge lines to their head."""

    def __init__(self, parser: LogParser, max_line: int, start: int = 0):
        self.parser = parser
        self._max = max_line
        self._tail = b""
        self._tail_at = start  # offset of the first byte of _tail
        self._skipping = False  # inside a line longer than _max whose head was already parsed

    @property
    def committed(self) -> int:
        """Offset of the first byte not yet fully parsed (a resume point)."""
        pending = self.parser.pending_offset
        return min(self._tail_at, pending) if pending is not None else self._tail_at

    def push(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        if self._skipping:
            newline = data.find(b"\n")
            if newline < 0:
                self._tail_at += len(data)
                return events
            self._skipping = False
            self._tail_at += newline + 1
            data = data[newline + 1:]
        newline = data.find(b"\n") if self._tail else -1
        if newline >= 0:  # finish the carried line on its own: gluing it to the chunk would copy the chunk
            events.extend(self.parser.scan(self._tail + data[: newline + 1], self._tail_at))
            self._tail_at += len(self._tail)
            self._tail = b""
        buf = self._tail + data if self._tail else data
        events.extend(self.parser.scan(buf, self._tail_at, newline + 1))
        cut = buf.rfind(b"\n") + 1
        if cut > 0:
            self._tail_at += cut
            self._tail = buf[cut:]
        else:
            self._tail_at += newline + 1
            self._tail = buf[newline + 1:]
        if len(self._tail) > self._max:  # keep the head, drop the rest of this line
            events.extend(self.parser.feed(self._tail[: self._max], self._tail_at))
            self._tail_at += len(self._tail)
            self._tail = b""
            self._skipping = True
        return events

    def finish(self) -> list[Event]:
        """End of input: the unterminated last line counts, and any open incident closes."""
        events: list[Event] = []
        if self._tail:
            events.extend(self.parser.feed(self._tail, self._tail_at))
            self._tail_at += len(self._tail)
            self._tail = b""
        return events + self.parser.flush()

    def restart(self, start: int = 0) -> None:
        self.parser.forget()
        self._tail, self._tail_at, self._skipping = b"", start, False


def _head_hash(fd: int) -> str | None:
    head = os.pread(fd, _HEAD, 0)
    newline = head.find(b"\n")
    if newline < 0 and len(head) < _HEAD:
        return None  # the first line is still being written
    return hashlib.sha1(head[: newline + 1] if newline >= 0 else head).hexdigest()


class FileFollower:
    """Follows one file like `tail -F`: appends, rotation by rename, truncation, resume without repeats."""

    def __init__(self, path: Path, parser: LogParser, state: StateStore, max_line: int = 64 * 1024,
                 quiet_flush_s: float = 2.0):
        self.path = path
        self._state, self._key = state, f"file:{path.resolve()}"
        self._assembler = LineAssembler(parser, max_line)
        self._fd: int | None = None
        self._ino: int | None = None
        self._head: str | None = None
        self._quiet_flush_s = quiet_flush_s
        self._last_data = time.monotonic()

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise ProbeError(f"{self.path}: cannot read ({exc.strerror}); check permissions") from exc
        stat, head = os.fstat(fd), _head_hash(fd)
        saved = self._state.get(self._key) if self._fd is None and self._ino is None else None
        start = 0
        if saved and saved.get("inode") == stat.st_ino and saved.get("head") == head \
                and 0 <= int(saved.get("offset", 0)) <= stat.st_size:
            start = int(saved["offset"])
        self._fd, self._ino, self._head = fd, stat.st_ino, head
        os.lseek(fd, start, os.SEEK_SET)
        self._assembler.restart(start)
        return True

    def _drain(self) -> list[Event]:
        assert self._fd is not None
        events: list[Event] = []
        while data := os.read(self._fd, CHUNK):
            self._last_data = time.monotonic()
            events.extend(self._assembler.push(data))
        return events

    def poll(self) -> list[Event]:
        """Read what was appended since the last poll; handles rotation and truncation on the way."""
        if self._fd is None and not self._open():
            return []
        assert self._fd is not None
        events = self._drain()
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is not None and now.st_ino != self._ino:  # renamed away, a new file took the name
            events.extend(self._assembler.finish())
            os.close(self._fd)
            self._fd = None
            self._open()
            events.extend(self._drain())
        elif os.fstat(self._fd).st_size < self._assembler.committed or self._replaced_in_place():
            os.lseek(self._fd, 0, os.SEEK_SET)
            self._assembler.restart(0)
            self._head = _head_hash(self._fd)
            events.extend(self._drain())
        if self._assembler.parser.pending_offset is not None \
                and time.monotonic() - self._last_data > self._quiet_flush_s:
            events.extend(self._assembler.parser.flush())
        self._remember()
        return events

    def _replaced_in_place(self) -> bool:
        """copytruncate followed by new writes: same inode, different first line."""
        assert self._fd is not None
        head = _head_hash(self._fd)
        if self._head is None:
            self._head = head
            return False
        return head is not None and head != self._head

    def finish(self) -> list[Event]:
        """Read to the end and close any open incident (for --once)."""
        events = self.poll()
        if self._fd is not None:
            events.extend(self._assembler.finish())
            self._remember()
        return events

    def _remember(self) -> None:
        if self._fd is not None:
            self._state.put(self._key, {"inode": self._ino, "offset": self._assembler.committed,
                                        "head": self._head})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StreamSource:
    """A byte stream (stdin, a subprocess pipe) read on a thread so that polling never blocks."""

    def __init__(self, stream: BinaryIO, parser: LogParser, max_line: int = 64 * 1024):
        self._assembler = LineAssembler(parser, max_line)
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.done = False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: BinaryIO) -> None:
        try:
            while chunk := stream.read1(CHUNK) if hasattr(stream, "read1") else stream.read(CHUNK):
                self._chunks.put(chunk)
        finally:
            self._chunks.put(None)

    def poll(self, wait_s: float = 0.0) -> list[Event]:
        events: list[Event] = []
        deadline = time.monotonic() + wait_s
        while not self.done:
            try:
                chunk = self._chunks.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                break
            if chunk is None:
                self.done = True
                events.extend(self._assembler.finish())
            else:
                events.extend(self._assembler.push(chunk))
        return events


def journal_line(record: dict[str, object]) -> tuple[str, bytes] | None:
    """A `journalctl -o json` record as (cursor, line in short-iso form) so the usual prefixes apply."""
    message = record.get("MESSAGE")
    if isinstance(message, list):  # binary messages come as byte arrays
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    if not isinstance(message, str) or not isinstance(record.get("__CURSOR"), str):
        return None
    stamp = ""
    micros = record.get("__REALTIME_TIMESTAMP")
    if isinstance(micros, str) and micros.isdigit():
        stamp = datetime.fromtimestamp(int(micros) / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z "
    host = str(record.get("_HOSTNAME") or "localhost")
    ident = str(record.get("SYSLOG_IDENTIFIER") or record.get("_COMM") or "unknown")
    pid = record.get("_PID")
    origin = "kernel" if ident == "kernel" else f"{ident}[{pid}]" if pid else f"{ident}[0]"
    prefix = f"{stamp}{host} {origin}: " if stamp else ""
    return str(record["__CURSOR"]), (prefix + message).encode("utf-8", "replace")


class JournalSource:
    """`journalctl -f -o json`, resumed after the last cursor seen."""

    def __init__(self, parser: LogParser, state: StateStore, argv: list[str] | None = None, follow: bool = True):
        self._parser, self._state = parser, state
        cursor = (state.get("journal") or {}).get("cursor")
        if argv is None:  # without a cursor, following starts at the end; --once reads what is there
            argv = ["journalctl", "-o", "json", "--no-pager", *(["-f"] if follow else [])]
            argv += [f"--after-cursor={cursor}"] if cursor else (["-n", "0"] if follow else [])
        try:
            self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError as exc:
            raise ProbeError(f"cannot run {argv[0]} ({exc}); install systemd's journalctl or drop --journal") from exc
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._offset = 0
        self.done = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def poll(self, wait_s: float = 0.0) -> list[Event]:
        events: list[Event] = []
        deadline = time.monotonic() + wait_s
        while not self.done:
            try:
                raw = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                break
            if raw is None:
                self.done = True
                events.extend(self._parser.flush())
                break
            try:
                parsed = journal_line(json.loads(raw))
            except ValueError:
                continue
            if parsed is not None:
                cursor, line = parsed
                events.extend(self._parser.feed(line, self._offset, key=cursor))
                self._offset += len(line) + 1
                self._state.put("journal", {"cursor": cursor})
        return events

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def kmsg_line(record: bytes, boot_time: float) -> tuple[int, bytes] | None:
    """A /dev/kmsg record (`prio,seq,usec,flags;text`) as (seq, line with an ISO time prefix)."""
    head, sep, text = record.partition(b";")
    fields = head.split(b",")
    if not sep or len(fields) < 3 or not fields[1].isdigit() or not fields[2].isdigit():
        return None
    moment = datetime.fromtimestamp(boot_time + int(fields[2]) / 1e6, UTC)
    body = text.split(b"\n", 1)[0]  # continuation lines hold key=value dictionary entries
    return int(fields[1]), moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ ").encode() + body


class KmsgSource:
    """The kernel ring buffer from /dev/kmsg (NVRM Xid lines live here)."""

    def __init__(self, parser: LogParser, path: Path = Path("/dev/kmsg")):
        self._parser = parser
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise ProbeError(f"cannot read {path} ({exc.strerror}): run as root, set kernel.dmesg_restrict=0, "
                             "or read the kernel log through --journal") from exc
        boot_id = Path("/proc/sys/kernel/random/boot_id")
        self._boot = boot_id.read_text().strip() if boot_id.exists() else "boot"
        self._boot_time = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)

    def poll(self) -> list[Event]:
        events: list[Event] = []
        while True:
            try:
                record = os.read(self._fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records were overwritten before we read them
                continue
            if not record:
                break
            parsed = kmsg_line(record, self._boot_time)
            if parsed is not None:
                seq, line = parsed
                events.extend(self._parser.feed(line, seq * 1024, key=f"{self._boot}:{seq}"))
        return events + self._parser.flush()
