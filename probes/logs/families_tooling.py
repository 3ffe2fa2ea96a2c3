"""Inference-runtime and cluster-tooling wordings that the other family modules do not read (issue 15, heldout21-22).

Each family reads a format, not one report's text:
- TensorRT's logger states an allocation failure as an error code and a category ("Error Code 1: Cuda Runtime (out
  of memory)", "Error Code 2: OutOfMemory (no further information)"), and its allocator's warning on the next line
  says how much it asked for ("Requested amount of GPU memory (N bytes) could not be allocated"): one OOM with
  its bytes.
- TensorRT-LLM's NCCL check inside an assertion: "Assertion failed: Failed, NCCL error <file>:<line>
  '<ncclGetErrorString text> (run with NCCL_DEBUG=WARN for details)'" (the executor's rank is in the logger's
  "[RANK N]").
- A relayed Xid without its number: "GPU 00000000:06:00.0: Detected Critical Xid Error" (DCGM-based health checks
  print it before the job's traceback): a `gpu_fault` (`critical_xid`) of that bus, since `gpu_xid` needs the number.
- compute-sanitizer / cuda-memcheck's memcheck report: "========= Invalid __global__ read of size 2 bytes" (then
  the kernel, thread and address lines): a kernel's out-of-bounds access, the illegal address a run without the tool
  would fault on.
- Ray's memory monitor when it kills a worker for *host* memory: the raylet's summary ("N Workers (tasks / actors)
  killed due to memory pressure (OOM)") and the kill notice ("... which exceeds the memory usage threshold of 0.95.
  Ray killed this worker ..."); `ray_oom` reads the same notice behind `OutOfMemoryError: Task was killed`.
- Ray's re-raise of a task's own exception names its class in parentheses: "ray.exceptions.RayTaskError(
  OutOfMemoryError): ray::WorkerDict.update_actor() (pid=N, ip=...)" is the task's torch.OutOfMemoryError (a memory
  monitor kill is raised as ray.exceptions.OutOfMemoryError itself, not wrapped), seen at the driver when the
  worker's own traceback is in another log (issue 15, heldout22).
- Fabric Manager's own reasons for exiting, in its log file ("[ERROR] [tid N] ...") or relayed by journald
  ("nv-fabricmanager[N]: ..."): "fabric manager NVIDIA GPU driver interface version X don't match with driver version
  Y" (its package and the loaded driver differ) and "detected number of NVSwitches don't match with any supported
  system topology, aborting fabric manager": a `fabric_manager_failed` fault (issue 15, heldout24-25).
- A health tool's own report of an Xid: gpud's health state and event messages, "XID 74 (NVLINK Error) detected on
  PCI:0000:04:00" (also without the space before the name), and DCGM's policy-violation callback as its Go bindings
  print it, "Error : XID Error" then "Data : {31}" a line or two below (issue 15, heldout25b).
- The Kubernetes device plugin's start on a node whose NVML it cannot load ("Detected non-NVML platform: could not
  load NVML library: libnvidia-ml.so.1: cannot open shared object file ...", then "Incompatible platform detected"
  and "No devices found. Waiting indefinitely."): the node advertises no GPU, a `nvml_unavailable` fault. A bet: the
  plugin prints the same on a node without GPUs that it was wrongly scheduled to (issue 15, heldout24).
"""

from __future__ import annotations

import re

from gpuslo.engine.events import canonical_pci_bus
from gpuslo.probes.logs.families_nccl import _NCCL_RESULTS
from gpuslo.probes.logs.families_oom import _ray_oom
from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _int

_TRT_BYTES = re.compile(r"GPU\s*memory\s*\((\d+)\s*bytes\)|Requested\s*size\s*was\s*(\d+)\s*bytes")


def _trt_oom(text: str) -> Found:
    match = _TRT_BYTES.search(text)
    requested = int(match.group(1) or match.group(2)) if match else None
    return Found("cuda_oom", _clean({"requested_bytes": requested, "error_name": "cudaErrorMemoryAllocation",
                                     "error_code": 2, "api": "tensorrt"}))


_CHECKED_NCCL = re.compile(r"\bNCCL error [^\s']+:\d+ '(?P<text>[^'(\n]+?)\s*(?:\(|')")


def _checked_nccl(text: str) -> Found | None:
    match = _CHECKED_NCCL.search(text)
    if not match:
        return None
    name, code = _NCCL_RESULTS.get(match.group("text").strip(), (None, None))
    return Found("nccl_error", _clean({"error_name": name, "error_code": code}))


_CRITICAL_XID = re.compile(r"\bGPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?: "
                           r"Detected Critical Xid Error\b")


def _critical_xid(text: str) -> Found | None:
    match = _CRITICAL_XID.search(text)
    if not match:
        return None
    # no number: an event schema's gpu_xid needs one, so it is the device's fault, named for what was relayed
    return Found("gpu_fault", {"fault": "critical_xid", "pci_bus": canonical_pci_bus(match.group("pci"))})


_RAY_KILL = re.compile(r"killed due to memory pressure \(OOM\)|Ray killed this worker")


def _ray_memory_monitor(text: str) -> Found | None:
    if not _RAY_KILL.search(text):
        return None  # "N Workers (tasks / actors)" that no memory monitor killed
    found = _ray_oom(text)
    return Found(found.kind, {**found.attrs, "error_name": "RayMemoryMonitorKill"},
                 pid=_int(r"\bpid=(\d+)", text))


_RAY_TASK_OOM = re.compile(r"\bRayTaskError\((?:[\w.]+\.)?OutOfMemoryError\):")


def _ray_task_oom(text: str) -> Found:
    return Found("cuda_oom", {"error_name": "OutOfMemoryError"}, pid=_int(r"\(pid=(\d+)", text))


_SANITIZER = re.compile(r"^\s*=+ Invalid __(?P<space>global|shared|local)__ (?P<op>read|write|atomic)\w* of size "
                        r"(?P<size>\d+) bytes?")


def _sanitizer(text: str) -> Found | None:
    match = _SANITIZER.search(text)
    if not match:
        return None
    return Found("cuda_error", {"error_name": "cudaErrorIllegalAddress", "error_code": 700,
                                "api": f"compute-sanitizer {match.group('space')} {match.group('op')}"})


# FM words both versions before "don't match"; a sentence that names the failure without them is not its log line
_FM_EXIT = re.compile(r"\bNVIDIA GPU driver interface version (?P<fm>\d[\w.]*) don'?t match with driver version "
                      r"(?P<driver>\d[\w.]*\d)|\bdetected number of NVSwitches don'?t match with any supported system "
                      r"topology\b")


def _fm_exit(text: str) -> Found | None:
    match = _FM_EXIT.search(text)
    if not match:
        return None
    return Found("gpu_fault", {"fault": "fabric_manager_failed", "detail": text[match.start():].strip()[:1024]})


_TOOL_XID = re.compile(r"\bXID (?P<xid>\d{1,3}) ?\([^()\n]{1,80}\) detected on PCI:"
                       r"(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})")


def _tool_xid(text: str) -> Found | None:
    match = _TOOL_XID.search(text)
    if not match:
        return None
    return Found("gpu_xid", {"xid": int(match.group("xid")), "pci_bus": canonical_pci_bus(match.group("pci")),
                             "detail": text[match.start():].strip().rstrip('",')[:1024]})


_POLICY_XID = re.compile(r"^\s*Error\s*:\s*XID Error\s*$")


def _policy_xid(text: str) -> Found | None:
    match = re.search(r"\n\s*Data\s*:\s*\{(\d{1,3})\}", text)  # the Data line a line or two below the start
    if not match:
        return None  # a violation callback cut off before its data: no number to report
    return Found("gpu_xid", {"xid": int(match.group(1)), "detail": "DCGM policy violation: XID Error"})


_NO_NVML = re.compile(r"\bDetected non-NVML platform: could not load NVML(?: library)?: (?P<why>\S.*)")


def _no_nvml(text: str) -> Found | None:
    match = _NO_NVML.search(text)
    if not match:
        return None
    return Found("gpu_fault", {"fault": "nvml_unavailable", "detail": match.group("why").strip()[:1024]})


# before the CUDA status families: "Error Code 1: Cuda Runtime (out of memory)" would otherwise be read alone
TOOLING_FAMILIES_BEFORE: tuple[Family, ...] = (
    Family("trt_error_code_oom", _c(r"\bError Code \d+: (?:Cuda Runtime \(out of memory\)"
                                    r"|OutOfMemory \((?!Requested size)[^)\n]*\))"), _trt_oom,
           complete=_c(r"could not be allocated"), max_lines=2,
           accept=_c(r"Requested amount of GPU memory \(\d+ bytes\) could not be allocated")),
    Family("checked_nccl_error", _c(r"\bNCCL error [^\s']+:\d+ '"), _checked_nccl),
    Family("fm_exit_reason", _FM_EXIT, _fm_exit),
    Family("tool_xid_report", _TOOL_XID, _tool_xid),
    Family("device_plugin_no_nvml", _NO_NVML, _no_nvml),
    Family("dcgm_policy_xid", _POLICY_XID, _policy_xid, complete=_c(r"^\s*Data\s*:"), max_lines=3, joiner="\n",
           accept=_c(r"^\s*(?:Timestamp|Data)\s*:")),
    Family("critical_xid", _CRITICAL_XID, _critical_xid),
    Family("sanitizer_memcheck", _SANITIZER, _sanitizer),
    Family("ray_task_oom", _RAY_TASK_OOM, _ray_task_oom),
    # the notice opens with "Memory on the node (IP: ...)": a family starting there keeps its sentences from
    # reading as prose
    # the raylet's summary counts the killed workers (0 is its line about crashes alone) and a console may wrap it
    # after "(tasks /"
    Family("ray_memory_monitor", _c(r"\b[1-9]\d* Workers \(tasks /|^\s*Memory on the node \(IP: [^)]*\) "
                                    r"where the (?:task|actor)|\bRay killed this worker\b"),
           _ray_memory_monitor, complete=_c(r"killed due to memory pressure \(OOM\)|Ray killed this worker"),
           max_lines=2),
)
NEEDS: dict[str, tuple[str, ...]] = {
    "trt_error_code_oom": ("Cuda Runtime (out of memory)", "OutOfMemory ("),
    "checked_nccl_error": ("NCCL error ",),
    "fm_exit_reason": ("driver interface version", "supported system topology"),
    "tool_xid_report": (") detected on PCI:",),
    "device_plugin_no_nvml": ("non-NVML platform",),
    "dcgm_policy_xid": ("XID Error",),
    "critical_xid": ("Detected Critical Xid Error",),
    "sanitizer_memcheck": ("= Invalid __",),
    "ray_task_oom": ("OutOfMemoryError):",),
    "ray_memory_monitor": ("Workers (tasks", "Memory on the node (IP", "Ray killed this worker"),
}
