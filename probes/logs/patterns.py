"""The message families GPU jobs print, as compiled patterns with field extraction.

Field regexes allow a lost or extra space between words (`\\s*`), because hard-wrapped messages are rejoined
without knowing whether the wrap ate a space.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuslo.engine.events import canonical_pci_bus
from gpuslo.probes.logs.units import CUBLAS_STATUS, GRAPH_CODES, SIZE, cuda_status, find_status, to_bytes


@dataclass(frozen=True)
class Found:
    """What a family read from an incident's text."""

    kind: str
    attrs: dict[str, Any]
    gpu: int | None = None
    rank: int | None = None
    pid: int | None = None
    gpu_uuid: str | None = None


@dataclass(frozen=True)
class Family:
    """One message family: how its incidents start, when they are complete, and how fields are read."""

    name: str
    start: re.Pattern[str]
    extract: Callable[[str], Found | None]
    complete: re.Pattern[str] | None = None  # None: the start line is the whole incident
    max_lines: int = 1
    joiner: str = ""  # "" rejoins hard-wrapped text; "\n" keeps a block's lines apart
    accept: re.Pattern[str] | None = None  # continuation lines a block takes even if they look like records
    # strict: only `accept` lines from the first line's printer (NCCL thread, syslog host) continue; blank
    # lines between are skipped (NCCL's follow-up WARN often comes after one)
    strict: bool = False
    # substrings one of which every match of `start` contains: a line with none skips the regex (catalog.py)
    needs: tuple[str, ...] = ()

    def starts(self, text: str) -> re.Match[str] | None:
        if self.needs and not any(need in text for need in self.needs):
            return None
        return self.start.search(text)


def _c(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _size(pattern: str, text: str) -> int | None:
    match = re.search(pattern.replace("SIZE", SIZE), text)
    return to_bytes(match.group(1), match.group(2)) if match else None


def _int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else None


def _first(*values: int | None) -> int | None:
    """The first value that is not None (0 bytes free is a value)."""
    return next((v for v in values if v is not None), None)


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


def _first_rank(text: str) -> int | None:
    match = re.search(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|on rank (\d+)", text)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _pg(text: str) -> str | None:
    match = re.search(r"PG GUID (\S+?)(?: Rank|\])", text) or re.search(r"\[PG (?:ID )?(\d+)", text)
    return match.group(1) if match else None


# ---- out of memory --------------------------------------------------------------------------------------


def _torch_oom(text: str) -> Found:
    allocated = _first(_size(r"(?:SIZE)\s*already\s*allocated", text),
                       _size(r"(?:SIZE)\s*is\s*allocated\s*by\s*PyTorch", text))
    unallocated = _size(r"(?:SIZE)\s*is\s*reserved\s*by\s*PyTorch\s*but\s*unallocated", text)
    reserved_total = _size(r"(?:SIZE)\s*reserved\s*in\s*total\s*by\s*PyTorch", text)
    if unallocated is None and reserved_total is not None and allocated is not None:
        unallocated = max(reserved_total - allocated, 0)
    # "Process N has X in use" names other processes when PyTorch recognises its own ("this process");
    # one lone "Process N" is the failing process itself, seen from the host's pid namespace.
    holders = re.findall(r"Process\s*(\d+)\s*has", text)
    pid = int(holders[0]) if len(holders) == 1 and "this process" not in text else None
    name = re.search(r"(torch(?:\.cuda)?\.OutOfMemoryError)", text)
    return Found("cuda_oom", _clean({
        "requested_bytes": _size(r"Tried\s*to\s*allocate\s*(?:SIZE)", text),
        "total_bytes": _first(_size(r"(?:SIZE)\s*total\s*capacity", text),
                              _size(r"capac\w*\s*of\s*(?:SIZE)", text)),
        "free_bytes": _first(_size(r"(?:SIZE)\s*free\b", text),
                             _size(r"of\s*which\s*(?:SIZE)\s*is\s*free", text)),
        "allocated_bytes": allocated, "reserved_unallocated_bytes": unallocated,
        "error_name": name.group(1) if name else "OutOfMemoryError"}),
        gpu=_gpu_any(text), pid=pid)


def _gpu_any(text: str) -> int | None:
    match = re.search(r"\(GPU\s*(\d+)\s*;|GPU\s*(\d+)\s*has\s*a\s*total|device:GPU:(\d+)|GPU_(\d+)_bfc"
                      r"|device\s*ordinal\s*(\d+)", text)
    if not match:
        return None
    return int(next(g for g in match.groups() if g is not None))


_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                "int32": 4, "int64": 8, "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "complex64": 8}


def _tf_oom(text: str) -> Found:
    shape = re.search(r"shape\s*\[([\d,\s]*)\]\s*and\s*type\s*(\w+)", text)
    requested = None
    if shape and shape.group(2) in _DTYPE_BYTES:
        requested = _DTYPE_BYTES[shape.group(2)]
        for dim in filter(None, (d.strip() for d in shape.group(1).split(","))):
            requested *= int(dim)
    return Found("cuda_oom", _clean({"requested_bytes": requested, "error_name": "RESOURCE_EXHAUSTED"}),
                 gpu=_gpu_any(text))


def _xla_oom(text: str) -> Found | None:
    if "not a failure" in text:  # BFC allocator's retry note: TF/XLA go on and succeed
        return None
    requested = _first(_int(r"allocat\w*\s*(\d+)\s*bytes", text), _int(r"rounded\s*to\s*(\d+)", text),
                       _int(r"\((\d+)B\)", text), _size(r"request\s*for\s*(?:SIZE)", text),
                       _size(r"trying\s*to\s*allocate\s*(?:SIZE)", text))
    return Found("cuda_oom", _clean({"requested_bytes": requested, "error_name": "RESOURCE_EXHAUSTED"}),
                 gpu=_gpu_any(text))


def _vllm_kv(text: str) -> Found:
    return Found("cuda_oom", _clean({
        "requested_bytes": _size(r"(?:SIZE)\s*KV\s*cache\s*is\s*needed", text),
        "free_bytes": _size(r"available\s*KV\s*cache\s*memory\s*\((?:SIZE)\)", text),
        "error_name": "InsufficientKVCacheMemory"}))


def _ray_oom(text: str) -> Found:
    # Ray's memory monitor kills workers when *host* memory runs out; api says so, rules can tell apart.
    usage = re.search(r"was\s*(\d+(?:\.\d+)?)GB\s*/\s*(\d+(?:\.\d+)?)GB", text)
    total = used = None
    if usage:
        used, total = to_bytes(usage.group(1), "GB"), to_bytes(usage.group(2), "GB")
    return Found("cuda_oom", _clean({
        "api": "host", "total_bytes": total,
        "free_bytes": (total - used) if total is not None and used is not None and total >= used else None,
        "error_name": "ray.OutOfMemoryError"}), pid=_int(r"pid=(\d+)", text))


# ---- CUDA status strings --------------------------------------------------------------------------------


def _kind_for(code: int | None) -> str:
    if code == 2:
        return "cuda_oom"
    if code is not None and code in GRAPH_CODES:
        return "cuda_graph_error"
    return "cuda_error"


_CUDA_TEXT = re.compile(
    r"CUDA [Ee]rror:\s*(?P<text>[^\n]+?)(?:\s*(?:when calling|\n|CUDA kernel errors|$))"
    r"|Cuda failure (?:\d+ )?'(?P<nccl>[^']+)'"
    r"|cuda runtime error \((?P<code>\d+)\) : (?P<old>[^\n]+?)(?: at |$)"
    r"|THCudaCheck FAIL[^\n]*?error=(?P<thcode>\d+) : (?P<thtext>[^\n]+)"
    # Gunrock/Warp/old ggml: "CUDA error 700 [file, 12]: ...", "CUDA error 2 at ggml-cuda.cu:359: out of memory"
    r"|CUDA error (?P<num>\d+)(?: \[[^\]]*\]| at [^\s:]+:\d+)?:\s*(?P<numtext>[^\n]+)"
    r"|CUDA failure (?P<ortnum>\d+): (?P<orttext>[^;\n]+)"  # ONNX Runtime: "CUDA failure 906: <text> ; GPU=0 ;"
    r"|Cuda Runtime \((?P<trt>[^)\n]+)\)"  # TensorRT: "Error Code 1: Cuda Runtime (out of memory)"
    r"|CUDA runtime error in (?P<trtllmapi>[:\w]+)\(.*?\): (?P<trtllm>[^\n(]+)"  # TensorRT-LLM
    r"|HIP error:\s*(?P<hip>[^\n]+?)(?:\s*$|\n)"
    r"|(?P<driver>CUDA_ERROR_[A-Z_]+)"
    r"|CUBLAS_STATUS_(?P<cublas>[A-Z_]+)")
_API = re.compile(
    r"when calling `(\w+)|call='(\w+)|expr=(\w+)|CUDA runtime error in (?:::)?(\w+)|on CUDA API call to (\w+)"
    r"|\b(cuda(?!Error)\w+) returned|^\s*(cu[A-Za-z]\w*)\(|\b(cu(?!daError)\w*Graph\w*|cudaStream(?:Begin|End)Capture"
    r"|cuMem\w+)\b", re.MULTILINE)
_STATED = ("text", "nccl", "old", "thtext", "numtext", "orttext", "trt", "trtllm", "hip", "driver")


def _api(text: str) -> str | None:
    match = _API.search(text)
    return next((g for g in match.groups() if g), None) if match else None


def _cuda_gpu(text: str) -> int | None:
    return _first(_int(r"current\s*device:\s*(\d+)", text), _int(r"\bGPU=(\d+)", text),
                  _int(r"\bon\s*device\s*(\d+)", text))


def _cuda(text: str) -> Found | None:
    match = _CUDA_TEXT.search(text)
    if not match:
        return None
    api_name = _api(text)
    if match.group("cublas"):
        status = match.group("cublas")
        if status == "SUCCESS":
            return None
        return Found("cuda_error", _clean({"error_name": "CUBLAS_STATUS_" + status,
                                           "error_code": CUBLAS_STATUS.get(status), "api": api_name}))
    stated = next(match.group(g) for g in _STATED if match.group(g))
    name, code = cuda_status(stated)
    if code is None:  # "CUDA error: Could not synchronize CUDA stream: CUDA_ERROR_ILLEGAL_ADDRESS: ..."
        name, code = find_status(text[match.start():]) or (name, code)
    number = match.group("code") or match.group("thcode") or match.group("num") or match.group("ortnum")
    if code is None and number:
        code = int(number)
    if name.startswith("CUBLAS_STATUS_"):
        return None  # "CUDA error: CUBLAS_STATUS_..." is read by the CUBLAS branch on a second search
    if match.group("nccl") and api_name is None:
        api_name = "nccl"
    kind = _kind_for(code)
    requested = _oom_bytes(text) if kind == "cuda_oom" else None
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": api_name,
                               "requested_bytes": requested}), gpu=_cuda_gpu(text))


def _oom_bytes(text: str) -> int | None:
    return _first(_int(r"\((\d+)\s*bytes\)", text), _size(r"allocat\w*\s*(?:SIZE)", text),
                  _int(r"(\d+)\s*bytes", text))


def _cuda_or_cublas(text: str) -> Found | None:
    cublas = re.search(r"CUBLAS_STATUS_[A-Z_]+", text)
    return _cuda(cublas.group(0) + " " + text[cublas.end():]) if cublas else _cuda(text)


def _graph(text: str) -> Found:
    named = re.search(r"\b(cudaError(?:StreamCapture\w+|CapturedEvent|GraphExecUpdateFailure))\b", text)
    status = find_status(named.group(1)) if named else None
    return Found("cuda_graph_error", _clean({
        "error_name": named.group(1) if named else "CUDAGraphCaptureError",
        "error_code": status[1] if status else None, "api": _api(text)}))


# ---- NCCL -------------------------------------------------------------------------------------------------

_NCCL_RESULTS = {  # ncclResult_t: the phrase PyTorch prints → (name, value)
    "unhandled cuda error": ("ncclUnhandledCudaError", 1), "unhandled system error": ("ncclSystemError", 2),
    "internal error": ("ncclInternalError", 3), "invalid argument": ("ncclInvalidArgument", 4),
    "invalid usage": ("ncclInvalidUsage", 5),
    "remote process exited or there was a network error": ("ncclRemoteError", 6),
}
_NCCL_CODES = {name: code for name, code in _NCCL_RESULTS.values()}


def _watchdog(text: str) -> Found:
    return Found("nccl_timeout", _clean({
        "op": (re.search(r"OpType=(\w+)", text) or re.search(r"()", text)).group(1) or None,
        "seq": _int(r"SeqNum=(\d+)", text), "timeout_ms": _int(r"Timeout\(ms\)=(\d+)", text),
        "elapsed_ms": _int(r"ran\s*for\s*(\d+)\s*milliseconds", text), "numel": _int(r"NumelIn=(\d+)", text),
        "pg": _pg(text)}), rank=_first_rank(text))


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


def _nccl_warn(text: str) -> Found | None:
    rest = text.split("NCCL WARN", 1)[-1].strip()
    if "Cuda failure" in rest:
        return _cuda(rest)
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


# ---- driver ----------------------------------------------------------------------------------------------


def _pci(text: str) -> str | None:
    """The canonical PCI form of events (engine.events.canonical_pci_bus)."""
    return canonical_pci_bus(text)


def _xid(text: str) -> Found | None:
    match = re.search(r"NVRM: Xid \(([^)]*)\):\s*(\d+),?\s*(.*)", text)
    if not match:
        return None
    rest = match.group(3)
    pid = re.match(r"pid=(\d+)", rest)
    detail = re.sub(r"^(?:pid='?[^,]*'?,\s*)?(?:name=[^,]*,\s*)?", "", rest).strip()
    return Found("gpu_xid", _clean({"xid": int(match.group(2)), "pci_bus": _pci(match.group(1)),
                                    "detail": detail[:1024] or None}),
                 pid=int(pid.group(1)) if pid else None)


def _fallen_off(text: str) -> Found:
    # The driver's code for this fault is Xid 79; the kernel sometimes logs only the sentence.
    return Found("gpu_xid", _clean({"xid": 79, "pci_bus": _pci(text),
                                    "detail": "GPU has fallen off the bus (no Xid number in the log)"}))


def _gpu_lost_block(text: str) -> Found | None:
    # "NVRM: The NVIDIA GPU <bdf>" also opens "... is not supported by the NVIDIA driver release": no incident
    return _fallen_off(text) if re.search(r"fallen\s*off\s*the\s*bus", text) else None


_RECORD = r"(?:Traceback|File \"|During handling|The above exception|terminate called|\[|\w[\w.]*(?:Error|Exception)\b)"
FAMILIES: tuple[Family, ...] = (
    Family("nvrm_xid", _c(r"NVRM: Xid \("), _xid),
    Family("fallen_off_bus", _c(r"(?:GPU has|has) fallen off the bus|: GPU is lost\b"), _fallen_off),
    # recent drivers split the sentence over "NVRM: " lines (dmesg indents them; journald prefixes each)
    Family("nvrm_gpu_lost", _c(r"NVRM: The NVIDIA GPU [0-9a-fA-F]{4,8}:"), _gpu_lost_block,
           complete=_c(r"fallen\s*off\s*the\s*bus"), max_lines=4, joiner="\n",
           accept=_c(r"^\s*NVRM: (?!Xid \(|The NVIDIA GPU )"), strict=True),
    Family("nccl_watchdog", _c(r"Watchdog caught collective operation timeout"), _watchdog,
           complete=_c(r"before\s*timing\s*out"), max_lines=4),
    Family("nccl_heartbeat", _c(r"Heartbeat monitor timed out|[Ww]atchdog got stuck for"), _heartbeat),
    Family("nccl_comm_abort", _c(r"communicator was aborted on rank"), _comm_abort),
    Family("gloo_timeout", _c(r"Timed out waiting \d+ms for \w+ operation to complete"), _gloo_timeout),
    Family("nccl_error", _c(r"NCCL error(?: in:|:)"), _nccl_block, complete=_c(r"Last error:\s*\n\s*\S"),
           max_lines=5, joiner="\n", accept=_c(r"^\s*(?:nccl\w*\s*:|Last error:)")),
    Family("nccl_cuda_failure", _c(r"NCCL WARN Cuda failure"), _nccl_cuda_failure,
           complete=_c(_ALLOC_FAILED), max_lines=2, joiner="\n", accept=_c(r"NCCL WARN " + _ALLOC_FAILED),
           strict=True),
    Family("nccl_warn", _c(r"NCCL WARN "), _nccl_warn),
    # a line cut before "CUDA out of memory." starts at "Tried to allocate"; a wrapped message may too
    Family("torch_oom", _c(r"CUDA out of memory|HIP out of memory|^\W{0,3}Tried to allocate \d"), _torch_oom,
           complete=_c(r"unallocated|by\s*PyTorch\)|cached\)|Memory\s*Management|\)\s*$"),
           max_lines=8, accept=_c(r"^\s*Tried\s*to\s*allocate")),
    Family("tf_oom", _c(r"OOM when allocating tensor"), _tf_oom),
    Family("xla_oom", _c(r"RESOURCE_EXHAUSTED:.{0,80}(?:[Oo]ut of memory|allocat)|Out of memory while trying to"
                         r"|ran out of memory trying to allocate"), _xla_oom),
    Family("vllm_kv_cache", _c(r"No available memory for the cache blocks|KV cache is needed"), _vllm_kv,
           complete=_c(r"engine|max_model_len"), max_lines=4),
    Family("ray_oom", _c(r"OutOfMemoryError: Task was killed"), _ray_oom,
           complete=_c(r"threshold"), max_lines=4),
    # ggml follows its "CUDA error: ..." with "  current device: N, in function ..." and the failed call
    Family("cuda_status", _c(r"CUDA [Ee]rror:|Cuda failure|cuda runtime error \(|THCudaCheck FAIL|CUDA_ERROR_[A-Z]"
                             r"|CUBLAS_STATUS_(?!SUCCESS)|CUDA error \d+|CUDA failure \d+:|Cuda Runtime \("
                             r"|CUDA runtime error in |HIP error:"), _cuda_or_cublas,
           complete=_c(r"current\s*device:\s*\d+[^\n]*\n\s*\S"), max_lines=3, joiner="\n",
           accept=_c(r"^\s*(?:current device: \d+|cu[A-Za-z]\w*\(.*\)\s*$)")),
    Family("cuda_graph", _c(r"during CUDA graph capture|cudaErrorStreamCapture|cudaErrorCapturedEvent"
                            r"|CUDA graph capture failed"), _graph),
)
NEW_RECORD = _c(r"^\s*(?:" + _RECORD + r"|\d{4}-\d\d-\d\d|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b|NCCL\b|$)")
