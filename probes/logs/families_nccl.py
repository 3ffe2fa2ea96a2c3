"""NCCL and c10d families: the watchdog, heartbeat, communicator-abort, gloo and "NCCL error" lines,
ProcessGroupNCCL's other wordings across PyTorch versions, NCCL WARN network failures, c10d store timeouts,
JAX/XLA's NCCL operation failures."""

from __future__ import annotations

import re

from gpuslo.probes.logs.families_cuda import _cuda
from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _first_rank, _int, _pg

_NCCL_RESULTS = {  # ncclResult_t: the phrase PyTorch prints → (name, value)
    "unhandled cuda error": ("ncclUnhandledCudaError", 1), "unhandled system error": ("ncclSystemError", 2),
    "internal error": ("ncclInternalError", 3), "invalid argument": ("ncclInvalidArgument", 4),
    "invalid usage": ("ncclInvalidUsage", 5),
    "remote process exited or there was a network error": ("ncclRemoteError", 6),
}
_NCCL_CODES = {name: code for name, code in _NCCL_RESULTS.values()}


def _watchdog(text: str) -> Found:
    return Found("nccl_timeout", _clean({
        "op": op.group(1) if (op := re.search(r"OpType=(\w+)", text)) else None,
        "seq": _int(r"SeqNum=(\d+)", text), "timeout_ms": _int(r"Timeout\(ms\)=(\d+)", text),
        "elapsed_ms": _int(r"ran\s*for\s*(\d+)\s*milliseconds", text), "numel": _numel(text),
        "pg": _pg(text)}), rank=_first_rank(text))


def _numel(text: str) -> int | None:
    """NumelIn, unless it is the (size_t)-1 a coalesced op prints for "no one size" (NumelIn=18446744073709551615)."""
    numel = _int(r"NumelIn=(\d+)", text)
    return numel if numel is not None and numel < 2**63 else None


def _heartbeat(text: str) -> Found:
    stuck = _int(r"stuck\s*for\s*(\d+)\s*seconds", text)
    return Found("nccl_timeout", _clean({
        "op": "heartbeat_monitor", "timeout_ms": stuck * 1000 if stuck is not None else None, "pg": _pg(text)}),
        rank=_first_rank(text))


def _nccl_block(text: str) -> Found | None:
    last = re.search(r"Last error:\s*\n\s*([^\n]+)", text)
    detail = last.group(1).strip() if last else None
    if detail and "Cuda failure" in detail:
        found = _cuda(detail)
        if found:
            return Found(found.kind, found.attrs, rank=_first_rank(text))
    named = re.search(r"\b(nccl[A-Z]\w*Error)\b", text)
    name = named.group(1) if named else None
    if name is None:
        for phrase, (result, _) in _NCCL_RESULTS.items():
            if phrase in text:
                name = result
                break
    reason = re.search(r"NCCL error(?: in: [^,]*,)?:?\s*([^\n]+)", text)
    return Found("nccl_error", _clean({
        "error_name": name, "error_code": _NCCL_CODES.get(name or ""),
        "detail": (detail or (reason.group(1).strip() if reason else None) or "")[:1024] or None}),
        rank=_first_rank(text))


_CHECKED = re.compile(r"\bCUDA error (\d+) '([^']+)'")


def _nccl_warn(text: str) -> Found | None:
    rest = text.split("NCCL WARN", 1)[-1].strip()
    if "Cuda failure" in rest:
        return _cuda(rest)
    # transport code that checks a CUDA call itself: "Failed to bind NVLink SHARP (NVLS) Multicast memory of size N :
    # CUDA error 401 'the operation cannot be performed in the present state'"
    checked = _CHECKED.search(rest)
    if checked:
        found = _cuda(f"CUDA error: {checked.group(2)}")
        if found is not None:
            return Found(found.kind, {**found.attrs, "error_code": int(checked.group(1))})
    if re.search(r"Got completion from peer|Connection closed by remote peer|Connection reset by peer"
                 r"|remote process exited", rest):
        return Found("nccl_error", {"error_name": "ncclRemoteError", "error_code": 6, "detail": rest[:1024]})
    return None


_ALLOC_FAILED = r"Failed to CUDA [a-z ]*?(\d+) bytes"  # NCCL's alloc.h: "Failed to CUDA calloc 6291456 bytes"


def _nccl_cuda_failure(text: str) -> Found | None:
    """`NCCL WARN Cuda failure '...'`, with the size from the same thread's `Failed to CUDA calloc N bytes`."""
    head, _, follow = text.partition("\n")
    found = _nccl_warn(head)
    requested = _int(_ALLOC_FAILED, follow)
    if found is None or found.kind != "cuda_oom" or requested is None:
        return found
    return Found(found.kind, {**found.attrs, "requested_bytes": requested})


def _gloo_timeout(text: str) -> Found:
    # Gloo names the transport operation that waited (recv/send), not the collective, nor a sequence number.
    op = re.search(r"for\s*(\w+)\s*operation", text)
    return Found("nccl_timeout", _clean({"op": f"gloo:{op.group(1)}" if op else None,
                                         "timeout_ms": _int(r"waiting\s*(\d+)\s*ms", text)}),
                 rank=_first_rank(text))


def _comm_abort(text: str) -> Found | None:
    if "Watchdog caught" in text:
        return _watchdog(text)
    reason = re.search(r"Original reason for failure was:\s*(.+)", text)
    name = next((result for phrase, (result, _) in _NCCL_RESULTS.items() if reason and phrase in reason.group(1)),
                "ncclCommAborted")
    return Found("nccl_error", _clean({"error_name": name, "error_code": _NCCL_CODES.get(name),
                                       "detail": reason.group(1).strip()[:1024] if reason else None}),
                 rank=_int(r"aborted on rank (\d+)", text))


NCCL_BASE_FAMILIES: tuple[Family, ...] = (
    Family("nccl_watchdog", _c(r"Watchdog caught collective operation timeout"), _watchdog,
           complete=_c(r"before\s*timing\s*out"), max_lines=4),
    # the stuck-watchdog sentence is often hard-wrapped: take up to two more lines until "without making progress"
    Family("nccl_heartbeat", _c(r"Heartbeat monitor timed out|[Ww]atchdog got stuck for"), _heartbeat,
           complete=_c(r"without\s*making|monitor\s*timed\s*out"), max_lines=3),
    Family("nccl_comm_abort", _c(r"communicator was aborted on rank"), _comm_abort),
    Family("gloo_timeout", _c(r"Timed out waiting \d+ms for \w+ operation to complete"), _gloo_timeout),
    Family("nccl_error", _c(r"NCCL error(?: in:|:)"), _nccl_block, complete=_c(r"Last error:\s*\n\s*\S"),
           max_lines=5, joiner="\n", accept=_c(r"^\s*(?:nccl\w*\s*:|Last error:)")),
    Family("nccl_cuda_failure", _c(r"NCCL WARN Cuda failure"), _nccl_cuda_failure,
           complete=_c(_ALLOC_FAILED), max_lines=2, joiner="\n", accept=_c(r"NCCL WARN " + _ALLOC_FAILED),
           strict=True),
)


def _pg_rank(text: str) -> int | None:
    match = re.search(r"\[(?:PG [^\]]*?)?Rank\s*(\d+)\s*\]", text)
    return int(match.group(1)) if match else _first_rank(text)


def _with_watchdog(found: Found, text: str) -> Found:
    """The summary lines ("Timeout at NCCL work", "Some NCCL operations have failed") with the watchdog line that
    follows them a few lines on: one incident, with the collective the watchdog names."""
    caught = text.find("Watchdog caught collective operation timeout")
    if caught < 0:
        return found
    watchdog = _watchdog(text[caught:])
    return Found("nccl_timeout", {**watchdog.attrs, **found.attrs}, rank=found.rank)


def _pg_failed(text: str) -> Found:
    """"Some NCCL operations have failed or timed out" (every PyTorch since 1.8, with or without `[Rank N]`);
    no collective is named, so op and seq are unknown unless the watchdog's line follows."""
    return _with_watchdog(Found("nccl_timeout", _clean({"pg": _pg(text)}), rank=_pg_rank(text)), text)


def _completed(text: str) -> int | None:
    """The last completed work's sequence number; PyTorch prints -1 when none has completed (left out: the event
    schema's sequence numbers are never negative, and ingest would refuse the whole event)."""
    completed = _int(r"last\s*completed\s*(?:NCCL\s*)?work:\s*(-?\d+)", text)
    return completed if completed is not None and completed >= 0 else None


def _pg_work(text: str) -> Found:
    """"Timeout at NCCL work: N, last enqueued NCCL work: M, last completed NCCL work: K" (2.2-2.4) and
    "failure detected by watchdog at work sequence id: N PG status: last enqueued work: M, last completed work:
    K" (2.5+), with the watchdog's line when it follows."""
    return _with_watchdog(Found("nccl_timeout", _clean({
        "seq": _int(r"(?:NCCL\s*work|sequence\s*id|watchdog\s*at\s*work):\s*(\d+)", text),
        "last_enqueued_seq": _int(r"last\s*enqueued\s*(?:NCCL\s*)?work:\s*(\d+)", text),
        "last_completed_seq": _completed(text),
        "pg": _pg(text)}), rank=_pg_rank(text)), text)


def _pg_dump_signal(text: str) -> Found:
    """"Received a dump signal due to a collective timeout from this local rank (or: from rank N) and we will try our
    best to dump the debug info. Last enqueued NCCL work: M, last completed NCCL work: K." A timeout seen by
    ProcessGroupNCCL's heartbeat monitor; the collective is not named."""
    return Found("nccl_timeout", _clean({
        "last_enqueued_seq": _int(r"last\s*enqueued\s*(?:NCCL\s*)?work:\s*(\d+)", text),
        "last_completed_seq": _completed(text),
        "pg": _pg(text)}), rank=_pg_rank(text))


def _store_timeout(text: str) -> Found:
    """c10d's TCPStore: a client that cannot connect, a wait for keys or for workers that times out."""
    ms = _int(r"after\s*(\d+)\s*ms", text)
    seconds = _int(r"after\s*(\d+)\s*seconds", text)
    if re.search(r"waiting\s*for\s*(?:clients|workers)|(?:clients|workers)\s*joined", text):
        op = "store:wait_for_workers"
    elif re.search(r"trying\s*to\s*connect|connect", text):
        op = "store:connect"
    else:
        op = "store:wait"
    return Found("nccl_timeout", _clean({
        "op": op, "timeout_ms": ms if ms is not None else (seconds * 1000 if seconds is not None else None)}),
        rank=_first_rank(text))


# NCCL WARN text → ncclResult_t. A peer that went away is ncclRemoteError; a connect, socket or verbs call
# that failed here is ncclSystemError. WARNs not listed (plugin not found, settings) are not incidents.
_WARN_RESULTS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), name) for p, name in (
    (r"Got completion from peer|Connection closed by remote peer|Connection reset by peer|Broken pipe"
     r"|remote process exited|remote hang ?up|peer .{0,40}(?:closed|disconnected)", "ncclRemoteError"),
    # NCCL before 2.12 worded a failed IB work completion without the peer ("Got completion with error 12")
    (r"Got completion with error \d|socket\w*Connect\w*:?.{0,120}(?:failed|timed out|refused|no POLLOUT)"
     r"|Connect to \S+ failed"
     r"|Connection (?:timed out|refused)|Socket recv failed|Call to (?:recv|send|connect|accept)\b.{0,80}failed"
     r"|\bibv_\w+ failed|NET/IB ?: .{0,60}(?:failed|port error|catastrophic)|Got async event : (?:port error|local "
     r"catastrophic)|failed to extend /dev/shm|posix_fallocate failed|Bootstrap.{0,40}(?:failed|timed out)"
     r"|Error while (?:creating|attaching to) shared memory segment"
     r"|Timeout waiting", "ncclSystemError"),
    # enqueue's "Error : no algorithm/protocol available" (NCCL_ALGO/NCCL_PROTO left no way to run the collective)
    (r"socketFinalizeAccept|wrong type \d+ != \d+|[Ii]nternal error|no algorithm/protocol available",
     "ncclInternalError"),
    # a proxy's report of a failure its peer thread already WARNed about: the same incident, name unknown
    (r"Failed to execute operation|Proxy Call to rank \d+ failed", ""),
))


def nccl_warn_result(rest: str) -> tuple[str, int | None] | None:
    """The ncclResult_t a NCCL WARN message stands for, or None for a WARN that is not an incident."""
    retcode = re.search(r"retcode (\d+)", rest)
    for pattern, name in _WARN_RESULTS:
        if pattern.search(rest):
            if retcode:
                code = int(retcode.group(1))
                name = next((n for n, c in _NCCL_RESULTS.values() if c == code), name)
            return name, _NCCL_CODES.get(name)
    return None


def _nccl_op_failed(text: str) -> Found:
    """JAX/XLA: "NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error"."""
    api = re.search(r"NCCL operation (\w+)", text)
    reason = re.search(r"\)\s*failed:\s*([^\n(]+)", text)
    name = next((result for phrase, (result, _) in _NCCL_RESULTS.items() if reason and phrase in reason.group(1)),
                None)
    return Found("nccl_error", _clean({"api": api.group(1) if api else None, "error_name": name,
                                       "error_code": _NCCL_CODES.get(name or ""),
                                       "detail": reason.group(1).strip()[:1024] if reason else None}))


def _nccl_error_number(text: str) -> Found:
    """PyTorch 1.x: "RuntimeError: NCCL Error 2: unhandled system error"."""
    code = _int(r"NCCL Error (\d+):", text)
    name = next((n for n, c in _NCCL_RESULTS.values() if c == code), None)
    detail = text.split(":", 2)[-1].strip() if text.count(":") >= 2 else None
    return Found("nccl_error", _clean({"error_name": name, "error_code": code,
                                       "detail": (detail or "")[:1024] or None}), rank=_first_rank(text))


def _nccl_failure_text(text: str) -> Found:
    """XGBoost's dh::safe_nccl: "NCCL failure :unhandled system error .../src/common/device_helpers.cu(67)", the text
    of ncclGetErrorString after the colon."""
    rest = text.split("NCCL failure :", 1)[-1].strip()
    name = next((result for phrase, (result, _) in _NCCL_RESULTS.items() if rest.startswith(phrase)), None)
    return Found("nccl_error", _clean({"error_name": name, "error_code": _NCCL_CODES.get(name or ""),
                                       "detail": rest.split("\\n", 1)[0][:1024] or None}), rank=_first_rank(text))


def _nccl_tests_failure(text: str) -> Found | None:
    """nccl-tests: "Test NCCL failure common.cu:343 'unhandled cuda error'" and "Test CUDA failure common.cu:N
    'out of memory'" (the text is ncclGetErrorString's or cudaGetErrorString's)."""
    match = re.search(r"Test (NCCL|CUDA) failure \S+ '([^']+)'", text)
    if not match:
        return None
    if match.group(1) == "CUDA":
        return _cuda(f"CUDA error: {match.group(2)}")
    # newer nccl-tests add the last error: 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '
    name = next((result for phrase, (result, _) in _NCCL_RESULTS.items() if phrase in match.group(2).lower()), None)
    return Found("nccl_error", _clean({"error_name": name, "error_code": _NCCL_CODES.get(name or ""),
                                       "detail": match.group(2)[:1024]}))


# (a line that goes on past "taking the entire process down." holds another incident: a pasted log)
_PG_FOLLOWS = _c(r"Some NCCL operations have failed or timed out|To avoid data inconsistency, we are taking the entire"
                 r" process down\.?\s*$|Watchdog caught collective operation timeout")

NCCL_FAMILIES: tuple[Family, ...] = (
    Family("nccl_tests_failure", _c(r"Test (?:NCCL|CUDA) failure \S+ (?=')"), _nccl_tests_failure),
    Family("nccl_error_number", _c(r"NCCL Error \d+: "), _nccl_error_number),
    Family("nccl_failure_text", _c(r"NCCL failure :\s?(?=[a-z])"), _nccl_failure_text),
    # the summary lines wait a few lines for the watchdog's, which names the collective (PyTorch 2.2+ prints
    # "Timeout at NCCL work", "Some NCCL operations ...", "To avoid data inconsistency ..." and then it)
    Family("pg_failed", _c(r"Some NCCL operations have failed or timed out"), _pg_failed,
           complete=_c(r"before\s*timing\s*out"), max_lines=4, accept=_PG_FOLLOWS),
    Family("pg_work", _c(r"Timeout at NCCL work: \d|failure detected by watchdog at work sequence id"
                         r"|detected by watchdog at work: \d"), _pg_work,
           complete=_c(r"before\s*timing\s*out"), max_lines=5, accept=_PG_FOLLOWS),
    # PyTorch 2.4+ (flight recorder): a rank told to dump its debug info because a collective timed out
    Family("pg_dump_signal", _c(r"Received a dump signal due to a collective timeout"), _pg_dump_signal,
           complete=_c(r"last\s*completed\s*(?:NCCL\s*)?work:\s*-?\d"), max_lines=2),
    Family("store_timeout", _c(r"client socket has timed out after \d+ms|DistStoreError: (?:Timed out after \d+ "
                               r"seconds|wait timeout after \d+ms)|Socket Timeout"), _store_timeout),
    Family("nccl_op_failed", _c(r"NCCL operation \w+\(.*\) failed:"), _nccl_op_failed),
)


def _warn(text: str) -> Found | None:
    """`NCCL WARN <message>`; the `[N]` before it (NCCL's cudaDev) is the GPU when no prefix gave one."""
    head, _, rest = text.partition("NCCL WARN")
    rest = rest.strip()
    gpu = _int(r"\[(\d+)\]\s*(?:[\w./-]+:\d+\s*)?(?:\(\w+\)\s*)?$", head)  # 2.2x: "nvls.cc:379 (nvlsAllocateMem)"
    if "Cuda failure" in rest or _CHECKED.search(rest):
        found = _nccl_warn(rest)
        return Found(found.kind, found.attrs, gpu=gpu) if found else None
    result = nccl_warn_result(rest)
    if result is None:
        return None
    name, code = result
    return Found("nccl_error", _clean({"error_name": name or None, "error_code": code, "detail": rest[:1024]}), gpu=gpu,
                 pid=_int(r"pid=(\d+)", head))


NCCL_WARN = Family("nccl_warn", _c(r"NCCL WARN "), _warn)
