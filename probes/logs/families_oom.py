"""Out-of-memory families: PyTorch's CUDA/HIP OOM (also cut before "CUDA out of memory."), TensorFlow's and
XLA's resource exhaustion, vLLM's KV cache that does not fit, Ray's memory monitor."""

from __future__ import annotations

import re

from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _first, _gpu_any, _int, _size
from gpuslo.probes.logs.units import to_bytes


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


def _kv_alloc(text: str) -> Found:
    """vllm.rs: "KVCache allocation failed: Insufficient GPU memory for KVCache allocation." then "Available: N MB,
    Required: M MB, Reserved: K MB."."""
    return Found("cuda_oom", _clean({
        "requested_bytes": _size(r"Required:\s*(?:SIZE)", text), "free_bytes": _size(r"Available:\s*(?:SIZE)", text),
        "error_name": "InsufficientKVCacheMemory"}))


def _startup_free(text: str) -> Found:
    """vLLM: "Free memory on device (67.24/79.25 GiB) on startup is less than desired GPU memory utilization (0.9,
    71.33 GiB)": the engine refuses to start."""
    match = re.search(r"Free\s*memory\s*on\s*device(?:\s*[\w:]+)?\s*\((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)\s*"
                      r"([KMGT]i?B)\)", text)
    free, total = (to_bytes(match.group(1), match.group(3)), to_bytes(match.group(2), match.group(3))) if match \
        else (None, None)
    return Found("cuda_oom", _clean({"free_bytes": free, "total_bytes": total, "error_name": "InsufficientFreeMemory"}))


def _report_field(text: str) -> Found:
    """ComfyUI's markdown "Error Report": "- **Exception Type:** torch.OutOfMemoryError" (the message, such as
    "Allocation on device", on the next field)."""
    return Found("cuda_oom", {"error_name": "OutOfMemoryError"})


OOM_FAMILIES: tuple[Family, ...] = (
    Family("report_field_oom", _c(r"(?<=\*\*Exception Type:\*\* )torch\.(?:cuda\.)?OutOfMemoryError\s*$"),
           _report_field),
    # a line cut before "CUDA out of memory." starts at "Tried to allocate"; a wrapped message may too
    Family("torch_oom", _c(r"CUDA out of memory|HIP out of memory|^\W{0,3}Tried to allocate \d"), _torch_oom,
           complete=_c(r"unallocated|by\s*PyTorch\)|cached\)|Memory\s*Management|\)\s*$"),
           max_lines=8, accept=_c(r"^\s*Tried\s*to\s*allocate")),
    Family("tf_oom", _c(r"OOM when allocating tensor"), _tf_oom),
    Family("xla_oom", _c(r"RESOURCE_EXHAUSTED:.{0,80}(?:[Oo]ut of memory|allocat)|Out of memory while trying to"
                         r"|ran out of memory trying to allocate"), _xla_oom,
           # the BFC allocator's "... trying to allocate 2.59GiB. The\n caller indicates that this is not a failure"
           # hard-wrapped: a line that ends inside that sentence waits for the rest
           complete=_c(r"not\s*a\s*failure|(?<!The)(?<!The )(?<!The caller)\Z"), max_lines=3),
    Family("vllm_kv_cache", _c(r"No available memory for the cache blocks|KV cache is needed"), _vllm_kv,
           complete=_c(r"engine|max_model_len"), max_lines=4),
    # SGLang's memory-pool profiler (2026): "ValueError: Loaded weights leave no GPU memory for the KV cache under
    # --mem-fraction-static=0.88."
    Family("sglang_kv_cache", _c(r"leave no GPU memory for the KV cache"), _vllm_kv),
    Family("kv_alloc_insufficient", _c(r"Insufficient GPU memory for KVCache allocation"), _kv_alloc,
           complete=_c(r"Required:\s*\d"), max_lines=2, accept=_c(r"^\s*Available:")),
    Family("startup_free_memory", _c(r"Free memory on device(?: [\w:]+)? \([\d.]+/[\d.]+ ?[KMGT]i?B\) on startup is "
                                     r"less than desired GPU memory utilization"), _startup_free),
    # the "Memory on the node ... was 54.86GB / 57.60GB" line may follow after a blank line
    Family("ray_oom", _c(r"OutOfMemoryError: Task was killed"), _ray_oom,
           complete=_c(r"threshold"), max_lines=4, accept=_c(r"Memory on the node|threshold"), strict=True),
)
