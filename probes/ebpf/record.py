"""Python mirror of record.h's `struct gs_record` and its decoder."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

COMM_LEN = 16
FLAG_HAS_OUT = 1


class RawRecord(ctypes.Structure):
    """Byte-for-byte twin of `struct gs_record` (record.h); a test compiles the header and compares offsets."""

    _fields_ = [
        ("ts_ns", ctypes.c_uint64),
        ("duration_ns", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("out_value", ctypes.c_int64),
        ("pid", ctypes.c_uint32),
        ("tid", ctypes.c_uint32),
        ("ret", ctypes.c_int32),
        ("func_id", ctypes.c_uint32),
        ("depth", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("comm", ctypes.c_char * COMM_LEN),
    ]


RECORD_SIZE = ctypes.sizeof(RawRecord)


@dataclass(frozen=True)
class CallRecord:
    """One hooked call as the kernel saw it."""

    ts_ns: int
    duration_ns: int
    size: int
    out_value: int | None
    pid: int
    tid: int
    ret: int
    func_id: int
    depth: int
    comm: str


def decode_record(data: bytes) -> CallRecord:
    """Decode one ring-buffer record; raises ValueError when the bytes are too short."""
    if len(data) < RECORD_SIZE:
        raise ValueError(f"record of {len(data)} bytes, expected {RECORD_SIZE}")
    raw = RawRecord.from_buffer_copy(data[:RECORD_SIZE])
    return CallRecord(
        ts_ns=raw.ts_ns, duration_ns=raw.duration_ns, size=raw.size,
        out_value=raw.out_value if raw.flags & FLAG_HAS_OUT else None,
        pid=raw.pid, tid=raw.tid, ret=raw.ret, func_id=raw.func_id, depth=raw.depth,
        comm=raw.comm.decode("utf-8", "replace"),
    )
