"""Turn a decoded call record into a normalized Event (DESIGN.md kinds, source "ebpf")."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from gpuslo.engine.events import Event
from gpuslo.probes.ebpf.errors import error_name
from gpuslo.probes.ebpf.functions import Function, Role, classify
from gpuslo.probes.ebpf.record import CallRecord

SOURCE = "ebpf"
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    raise AssertionError("unreachable")


def _nccl_result(function: Function, record: CallRecord) -> tuple[int, str]:
    """The NCCL code to report and a sentence saying where it came from."""
    if function.role is Role.NCCL_ABORT:
        return record.ret, f"{function.symbol} was called (it returned {error_name('nccl', record.ret)})"
    if record.out_value:
        return record.out_value, f"{function.symbol} reported an asynchronous communicator error"
    return record.ret, f"{function.symbol} itself failed"


def _attrs_and_message(kind: str, function: Function, record: CallRecord) -> tuple[dict[str, Any], str]:
    duration_us = round(record.duration_ns / 1000, 3)
    if kind == "nccl_error":
        code, detail = _nccl_result(function, record)
        name = error_name("nccl", code)
        attrs = {"api": function.symbol, "error_code": code, "error_name": name, "detail": detail}
        return attrs, detail if function.role is Role.NCCL_ABORT else f"{detail}: {name} ({code})"
    name = error_name(function.api, record.ret)
    attrs = {"api": function.symbol, "error_code": record.ret, "error_name": name, "duration_us": duration_us}
    message = f"{function.symbol} failed with {name} ({record.ret}) after {duration_us:g} µs"
    if function.role is Role.ALLOC:
        message += f" requesting {record.size} bytes ({_human_bytes(record.size)})"
        if kind == "cuda_oom":
            attrs["requested_bytes"] = record.size
    return attrs, message


def to_event(record: CallRecord, function: Function, host: str, wall_offset_ns: int,
             gpu: int | None = None) -> Event | None:
    """The event for one call, or None when the call succeeded (successes are counted, not reported)."""
    kind = classify(function, record.ret, record.out_value or 0)
    if kind is None:
        return None
    wall_ns = record.ts_ns + wall_offset_ns
    attrs, message = _attrs_and_message(kind, function, record)
    return Event(
        id=f"ebpf-{_ID_UNSAFE.sub('_', host)}-{record.pid}-{record.tid}-{wall_ns}-{record.func_id}",
        kind=kind,
        time=datetime.fromtimestamp(wall_ns / 1e9, tz=UTC),
        host=host,
        gpu=gpu,
        pid=record.pid,
        labels=MappingProxyType({"comm": record.comm, "tid": str(record.tid), "depth": str(record.depth)}),
        source=SOURCE,
        attrs=MappingProxyType(attrs),
        message=f"{message}; pid {record.pid} ({record.comm}) thread {record.tid}",
    )
