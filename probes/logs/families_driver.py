"""Driver, fabric and cluster-tooling families: Xid lines and a GPU fallen off the bus, GSP heartbeat and RPC
timeouts, RmInitAdapter failures and memory-subsystem errors without an Xid number, NVSwitch SXids and Fabric
Manager, the Kubernetes device plugin's and DCGM's (and NVSentinel's) health reports."""

from __future__ import annotations

import re

from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _int, _pci


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


def _device_handle(text: str) -> Found | None:
    """nvidia-smi/NVML: "Unable to determine the device handle for GPU 0000:0B:00.0: GPU is lost. Reboot the system
    to recover this GPU" (the driver's Xid 79) or "...: Unknown Error" (the GPU no longer answers NVML)."""
    # older nvidia-smi -L writes "for gpu 0000:18:00.0: Unknown Error"
    match = re.search(r"device handle for (?:GPU|gpu)\s*([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[.\d]*:\s*(.*)",
                      text)
    if not match:
        return None
    if match.group(2).startswith("GPU is lost"):
        return Found("gpu_xid", {"xid": 79, "pci_bus": _pci(match.group(1)),
                                 "detail": "GPU is lost (nvidia-smi; no Xid number in the log)"})
    return Found("gpu_fault", _clean({"fault": "gpu_inaccessible", "pci_bus": _pci(match.group(1)),
                                      "detail": match.group(2).strip()[:1024] or None}))


XID_FAMILIES: tuple[Family, ...] = (
    Family("nvrm_xid", _c(r"NVRM: Xid \("), _xid),
    # ("detect" in some nvidia-smi builds: the one a Hyper-V GPU-partition guest runs prints it)
    Family("device_handle", _c(r"Unable to (?:determine|detect) the device handle for (?:GPU|gpu)\s*[0-9a-fA-F]{4,8}:"),
           _device_handle),
    Family("fallen_off_bus", _c(r"(?:GPU has|has) fallen off the bus|: GPU is lost\b"), _fallen_off),
    # recent drivers split the sentence over "NVRM: " lines (dmesg indents them; journald prefixes each)
    Family("nvrm_gpu_lost", _c(r"NVRM: The NVIDIA GPU [0-9a-fA-F]{4,8}:"), _gpu_lost_block,
           complete=_c(r"fallen\s*off\s*the\s*bus"), max_lines=4, joiner="\n",
           accept=_c(r"^\s*NVRM: (?!Xid \(|The NVIDIA GPU )"), strict=True),
)


def _pci_after(label: str, text: str) -> str | None:
    match = re.search(label + r"\s*([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})", text)
    return _pci(match.group(1)) if match else None


def _detail(text: str, marker: str) -> str | None:
    rest = text.split(marker, 1)[-1].strip(" :,")
    return rest[:1024] or None


def _gsp_banner(text: str) -> Found:
    """"_kgspLogXid119: *** GSP Timeout ***" opens a block that normally ends in the Xid 119 line; without it,
    the banner alone is that Xid (the driver's own function names the number)."""
    xid_at = text.find("NVRM: Xid (")
    if xid_at >= 0:
        found = _xid(text[xid_at:].split("\n", 1)[0])
        if found is not None:
            return found
    return Found("gpu_xid", _clean({"xid": 119, "pci_bus": _pci_after(r"GPU at PCI:", text),
                                    "detail": "GSP Timeout (no Xid line in the log)"}))


def _gsp_heartbeat(text: str) -> Found:
    return Found("gpu_fault", _clean({
        "fault": "gsp_heartbeat_timeout", "timeout_ms": _int(r"\btimeout\s*(\d+)", text),
        "elapsed_ms": _int(r"\bdiff\s*(\d+)", text), "pci_bus": _pci_after(r"PCI:", text),
        "detail": _detail(text, "NVRM:")}))


def _gsp_rpc(text: str) -> Found:
    seconds = _int(r"Timeout\s*after\s*(\d+)s", text)
    return Found("gpu_fault", _clean({
        "fault": "gsp_rpc_timeout", "timeout_ms": seconds * 1000 if seconds is not None else None,
        "pci_bus": _pci_after(r"PCI:", text), "detail": _detail(text, "NVRM:")}))


def _rm_init(text: str) -> Found:
    return Found("gpu_fault", _clean({"fault": "rm_init_adapter_failed", "pci_bus": _pci(text),
                                      "detail": _detail(text, "NVRM:")}))


def _memory(text: str) -> Found:
    return Found("gpu_fault", _clean({"fault": "memory_error", "pci_bus": _pci(text),
                                      "detail": _detail(text, "NVRM:")}))


_NV_STATUS_FAULTS = {"NV_ERR_RESET_REQUIRED": "reset_required", "NV_ERR_GPU_IS_LOST": "gpu_lost",
                     "NV_ERR_ECC_ERROR": "memory_error", "NV_ERR_GPU_IN_FULLCHIP_RESET": "reset_required"}


def _nv_status(text: str) -> Found | None:
    """An NVRM line whose status says the GPU must be reset or is gone: "nvAssertOkFailedNoLog: Assertion
    failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2827"."""
    match = re.search(r"\b(NV_ERR_[A-Z_]+)\b", text)
    fault = _NV_STATUS_FAULTS.get(match.group(1)) if match else None
    if fault is None:
        return None
    return Found("gpu_fault", _clean({"fault": fault, "pci_bus": _pci_after(r"PCI:", text),
                                      "detail": _detail(text, "NVRM:")}))


def _sxid(text: str) -> Found | None:
    match = re.search(r"SXid \((?:PCI:)?([^)]+)\):\s*(\d+),?\s*(.*)", text)
    if not match:
        return None
    return Found("gpu_fault", _clean({
        "fault": "nvswitch_sxid", "sxid": int(match.group(2)), "pci_bus": _pci(match.group(1)),
        "detail": match.group(3).strip()[:1024] or None}))


def _fm_nvswitch(text: str) -> Found:
    fatal = "non-fatal" not in text.lower()
    return Found("gpu_fault", _clean({
        "fault": "nvswitch_fatal" if fatal else "nvswitch_nonfatal",
        "sxid": _int(r"NVSwitch\s*(?:non-)?fatal\s*error\s*(\d+)", text),
        "pci_bus": _pci_after(r"pci\s*bus\s*id", text), "detail": text.strip()[:1024]}))


def _fm_failed(text: str) -> Found:
    return Found("gpu_fault", {"fault": "fabric_manager_failed", "detail": text.strip()[:1024]})


def _nvlink_down(text: str) -> Found:
    """dcgmi diag: "GPU 0's NvLink link 3 is currently down" (a Warning row of its table)."""
    return Found("gpu_fault", {"fault": "nvlink_down", "detail": text.strip(" |")[:1024]},
                 gpu=_int(r"GPU (\d+)(?:GPU \d+)?'s NvLink", text))


def _uuid(text: str) -> str | None:
    match = re.search(r"\b(GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})\b", text)
    return match.group(1) if match else None


def _device_plugin_xid(text: str) -> Found | None:
    """k8s-device-plugin: "XidCriticalError: Xid=69 on Device=GPU-..., the device will go unhealthy."
    (then "'nvidia.com/gpu' device marked unhealthy: GPU-...", the same incident)."""
    xid = _int(r"Xid=(\d+)", text)
    if xid is None:
        return None
    return Found("gpu_xid", {"xid": xid, "detail": "XidCriticalError reported by the device plugin"},
                 gpu_uuid=_uuid(text))


def _marked_unhealthy(text: str) -> Found:
    return Found("gpu_fault", {"fault": "device_unhealthy", "detail": text.strip()[:1024]}, gpu_uuid=_uuid(text))


def _dcgm(text: str) -> Found | None:
    """DCGM health (dcgm-exporter, NVSentinel's gpu-health-monitor node conditions): "ErrorCode:DCGM_FR_XID_ERROR
    GPU:4 PCI:0000:c4:00.0 GPU_UUID:GPU-... Detected XID 31 for GPU 4 ..."."""
    code = re.search(r"\b(DCGM_FR_[A-Z_0-9]+)", text)
    if not code:
        return None
    gpu = _int(r"\bGPU:\s*(\d+)", text)
    gpu = gpu if gpu is not None else _int(r"for\s*GPU\s*(\d+)", text)
    pci, detail = _pci_after(r"PCI:", text), _detail(text, code.group(1))
    xid = _int(r"XID\s*(\d+)", text)
    if code.group(1) == "DCGM_FR_XID_ERROR" and xid is not None:
        return Found("gpu_xid", _clean({"xid": xid, "pci_bus": pci, "detail": detail}), gpu=gpu,
                     gpu_uuid=_uuid(text))
    return Found("gpu_fault", _clean({"fault": code.group(1), "pci_bus": pci, "detail": detail}), gpu=gpu,
                 gpu_uuid=_uuid(text))


def _dcgm_health_watch(text: str) -> Found | None:
    """DCGM's health watches (nv-hostengine's log, dcgmi health): "[[Health]] Detected a WARNING in health system
    Thermal: 'Detected clocks event due to thermal violation in GPU 2. ...'"."""
    match = re.search(r"Detected a (WARNING|FAILURE|FAIL\w*) in health system (\w+)", text)
    if not match:
        return None
    return Found("gpu_fault", _clean({"fault": f"dcgm_health_{match.group(2).lower()}",
                                      "detail": text[match.start():].strip()[:1024]}),
                 gpu=_int(r"\bGPU\s*(\d+)", text[match.end():]))


def _dcgm_diag_fail(text: str) -> Found | None:
    """A failed test in dcgmi diag's table: "| GPU Memory                | Fail - GPU: 0                 |" (the test
    name is in the row's first cell, or in a row above when several GPUs are listed)."""
    match = re.search(r"\|\s*([^|]*?)\s*\|\s*Fail - GPUs?:\s*(\d+)", text)
    if not match:
        return None
    return Found("gpu_fault", _clean({"fault": "dcgm_diag_failed", "detail": match.group(1)[:1024] or None}),
                 gpu=int(match.group(2)))


def _version_mismatch(text: str) -> Found:
    """The user-space driver and the kernel module disagree, so no CUDA/NVML client starts: "nvidia-container-cli:
    initialization error: nvml error: driver/library version mismatch", nvidia-smi's "Failed to initialize NVML:
    Driver/library version mismatch", dmesg's "NVRM: API mismatch: the client has the version X, but ..."."""
    return Found("gpu_fault", {"fault": "driver_version_mismatch", "detail": text.strip()[:1024]})


DRIVER_FAMILIES: tuple[Family, ...] = (
    Family("gsp_timeout", _c(r"NVRM: (?:GPU\d+ )?_kgspLogXid119\b"), _gsp_banner, complete=_c(r"NVRM: Xid \("),
           max_lines=6, joiner="\n", accept=_c(r"^\s*NVRM: "), strict=True),
    Family("gsp_heartbeat", _c(r"_kgspIsHeartbeatTimedOut: Heartbeat timed out|GSP RM heartbeat timed out"),
           _gsp_heartbeat),
    Family("gsp_rpc", _c(r"NVRM: .{0,80}(?:Timeout after \d+s of waiting for RPC response from GPU\d* GSP"
                         r"|Timeout waiting for RPC from GSP)"), _gsp_rpc),
    # "RmInitAdapter: Cannot initialize GSP firmware RM" comes before the "RmInitAdapter failed!" line of the GPU
    Family("rm_init", _c(r"NVRM: .{0,80}(?:RmInitAdapter failed|rm_init_adapter failed|Cannot initialize GSP firmware"
                         r"|osInitNvMapping failed)"), _rm_init,
           complete=_c(r"RmInitAdapter failed|rm_init_adapter failed"), max_lines=3, joiner="\n",
           accept=_c(r"^\s*NVRM: "), strict=True),
    Family("nvrm_memory", _c(r"NVRM: .{0,120}(?:[Uu]ncorrectable (?:ECC|memory|error)|[Dd]ouble[- ][Bb]it|\bDBE\b"
                             r"|[Rr]ow[- ]?[Rr]emap\w*\s*(?:[Ff]ailure|failed)"
                             r"|[Pp]age [Rr]etirement\s*(?:failure|failed))"),
           _memory),
    Family("nv_status", _c(r"NVRM: .{0,200}\[NV_ERR_(?:RESET_REQUIRED|GPU_IS_LOST|ECC_ERROR|GPU_IN_FULLCHIP_RESET)\]"),
           _nv_status),
    Family("version_mismatch", _c(r"Failed to initialize NVML: Driver/library version mismatch"
                                  r"|nvml error: driver/library version mismatch|NVRM: API mismatch: the client has"),
           _version_mismatch),
    Family("nvswitch_sxid", _c(r"SXid \((?:PCI:)?[0-9a-fA-F]"), _sxid),
    Family("fm_nvswitch", _c(r"detected NVSwitch (?:non-)?fatal error \d+"), _fm_nvswitch),
    Family("fm_failed", _c(r"request to query NVSwitch device information from NVSwitch driver failed"
                           r"|nvidia-fabricmanager\.service(?::)? [Ff]ailed|fabric manager config file item: .{0,80}"
                           r"invalid value|nv-fabricmanager .{0,120}failed! Exit code"
                           r"|ExecStart=\S*nv-fabricmanager\b.{0,200}\(code=exited, status=[1-9]\d*/FAILURE\)"),
           _fm_failed),
    Family("nvlink_down", _c(r"GPU \d+(?:GPU \d+)?'s NvLink link \d+ is currently down"), _nvlink_down),
    Family("device_plugin_xid", _c(r"XidCriticalError: Xid=\d+"), _device_plugin_xid, complete=_c(r"marked unhealthy"),
           max_lines=2, joiner="\n", accept=_c(r"device marked unhealthy")),
    Family("marked_unhealthy", _c(r"device marked unhealthy: GPU-"), _marked_unhealthy),
    # NVSentinel's health events print the code as JSON after the message: "errorCode":["DCGM_FR_XID_ERROR"]
    Family("dcgm_health", _c(r"ErrorCode:\s*DCGM_FR_[A-Z]|\bDCGM_FR_[A-Z_]+\b.{0,20}\bGPU[: ]\s*\d"
                             r"|\"errorCode\":\s*\[\s*\"DCGM_FR_[A-Z]"), _dcgm),
    Family("dcgm_health_watch", _c(r"Detected a (?:WARNING|FAIL\w*) in health system \w"), _dcgm_health_watch),
    Family("dcgm_diag_fail", _c(r"(?<=\|\s)\s*Fail - GPUs?:\s*\d"), _dcgm_diag_fail),
)
