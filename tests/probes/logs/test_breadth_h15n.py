"""Session h15n's readers (heldout25's and heldout24's Fabric Manager misses): one behaviour each, on the formats of
public fixtures and pages (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def _fm_fault(text: str) -> str:
    found = one(text)
    assert found.kind == "gpu_fault"
    return str(found.attrs["fault"])


def test_fabric_managers_driver_interface_mismatch_is_a_fabric_manager_fault_in_its_log_and_in_journald():
    """Fabric Manager's own log (DigitalOcean's support page, heldout24) and the same message relayed by journald
    under `systemctl status nvidia-fabricmanager` (akash-network/website's provider troubleshooting page,
    heldout25): its package and the loaded driver differ, so it exits."""
    log = ("[May 06 2025 08:12:41] [ERROR] [tid 13909] fabric manager NVIDIA GPU driver interface version 550.144.03 "
           "don't match with driver version 550.127.05. Please update with matching NVIDIA driver package.")
    assert _fm_fault(log) == "fabric_manager_failed"
    journal = ("Feb 17 08:41:03 gpu-worker-3 systemd[1]: Starting NVIDIA fabric manager service...\n"
               "Feb 17 08:41:03 gpu-worker-3 nv-fabricmanager[88417]: fabric manager NVIDIA GPU driver interface "
               "version 550.144.03 don't match with driver version 550.127.08. Please update with matching NVIDIA "
               "driver package.\n"
               "Feb 17 08:41:03 gpu-worker-3 systemd[1]: nvidia-fabricmanager.service: Control process exited, "
               "code=exited, status=1/FAILURE")
    found = one(journal)
    assert found.attrs["fault"] == "fabric_manager_failed"
    assert "550.144.03 don't match with driver version 550.127.08" in found.attrs["detail"]


def test_fabric_managers_topology_mismatch_reads_in_each_form_gpud_tests():
    """leptonai/gpud's fabric-manager log matcher tests the line in three forms: the log file's, journalctl's
    bare message and journald's `nv-fabricmanager[N]:` prefix."""
    message = "detected number of NVSwitches don't match with any supported system topology, aborting fabric manager"
    for text in (f"[Sep 12 2025 04:17:33] [ERROR] {message}", message, f"nv-fabricmanager[1930114]: {message}"):
        assert _fm_fault(text) == "fabric_manager_failed"


def test_a_healthy_fabric_manager_start_and_a_sentence_naming_the_mismatch_give_nothing():
    """"fabric manager" is now a trigger word: the unit's start/stop lines reach the parser and must stay quiet,
    and a sentence that names the mismatch without the two versions is not its log line."""
    assert events("Apr 22 10:04:17 gpu-node-8x systemd[1]: Starting NVIDIA fabric manager service...\n"
                  "Apr 22 10:04:21 gpu-node-8x systemd[1]: Started NVIDIA fabric manager service.") == []
    assert events("If the packages differ, fabric manager logs that the NVIDIA GPU driver interface version don't "
                  "match with driver version and exits; install the matching nvidia-fabricmanager package.") == []
    # a version the sentence cuts off before the second one gives nothing either
    assert events("fabric manager NVIDIA GPU driver interface version 610.57.04") == []


def test_fabric_managers_config_item_error_still_reads_after_its_trigger_word_changed():
    """"FABRIC_" gave its place to "fabric manager": the config-item error (heldout) holds both."""
    assert _fm_fault("10.5.0.3: fabric manager config file item: FABRIC_NODE_CONFIG_FILE has an invalid value") == (
        "fabric_manager_failed")


def test_gpuds_own_xid_report_reads_in_its_state_reason_and_its_event_message():
    """leptonai/gpud's tutorial: /v1/states gives "reason": "XID 74 (NVLINK Error) detected on PCI:...", /v1/events
    "message": "XID 79(GPU has fallen off the bus) detected on PCI:..." (pretty-printed JSON, heldout25b)."""
    state = one('        "reason": "XID 74 (NVLINK Error) detected on PCI:0000:1b:00",')
    assert (state.kind, state.attrs["xid"], state.attrs["pci_bus"]) == ("gpu_xid", 74, "0000:1b:00")
    event = one('        "message": "XID 74(NVLINK Error) detected on PCI:0000:1B:00"')
    assert (event.attrs["xid"], event.attrs["pci_bus"]) == (74, "0000:1b:00")
    # a catalog's description of an Xid is a quotation, not a report
    assert events('    "description": "XID 74 (NVLINK Error) detected on PCI:0000:1b:00 means the link went '
                  'down",') == []


def test_dcgms_policy_violation_callback_is_an_xid_of_the_number_in_its_data_line():
    """DCGM's Go bindings policy sample (NVIDIA gpu-monitoring-tools, vendored in k8s-device-plugin): a violation
    prints "Error : XID Error" and, a line or two below, "Data : {31}"."""
    found = one("2019/03/14 09:12:40 Listening for violations...\n"
                "GPU        : 1\n"
                "Error      : XID Error\n"
                "Timestamp  : 2019-03-14 04:20:17 +0000 UTC\n"
                "Data       : {31}")
    assert (found.kind, found.attrs["xid"]) == ("gpu_xid", 31)
    # a callback cut off before its data names no Xid
    assert events("Error      : XID Error\nTimestamp  : 2019-03-14 04:20:17 +0000 UTC") == []


def test_the_device_plugins_start_without_nvml_is_one_fault_and_its_healthy_platform_lines_are_none():
    """dlowkeen/homelab's device plugin write-up (heldout24): klog's "Detected non-NVML platform: could not load
    NVML library: ...", then "Incompatible platform detected" and "No devices found"; older releases print "could
    not load NVML:" after the Go log package's "2024/01/04 07:43:58 "."""
    start = ("I0311 14:02:51.610233       1 factory.go:107] Detected non-NVML platform: could not load NVML library: "
             "libnvidia-ml.so.1: cannot open shared object file: No such file or directory\n"
             "E0311 14:02:51.610391       1 factory.go:115] Incompatible platform detected\n"
             "I0311 14:02:51.610502       1 main.go:287] No devices found. Waiting indefinitely.")
    found = one(start)
    assert (found.kind, found.attrs["fault"]) == ("gpu_fault", "nvml_unavailable")
    assert found.attrs["detail"].startswith("libnvidia-ml.so.1: cannot open shared object file")
    assert one("2024/01/04 07:43:58 Detected non-NVML platform: could not load NVML: libnvidia-ml.so.1: cannot open "
               "shared object file: No such file or directory").attrs["fault"] == "nvml_unavailable"
    # the lines a healthy x86 node prints
    assert events("I1126 04:34:05.352539       1 factory.go:104] Detected NVML platform\n"
                  "I1126 04:34:05.352569       1 factory.go:107] Detected non-Tegra platform: /sys/devices/soc0/family "
                  "file not found") == []
