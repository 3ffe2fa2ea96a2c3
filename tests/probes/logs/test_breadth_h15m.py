"""Session h15m's readers (heldout24's miss and false positive): one behaviour each, on the formats of public pages
(numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_systemctl_status_of_a_failed_fabric_manager_unit_is_one_fabric_manager_fault():
    """DigitalOcean's support page: `systemctl status nvidia-fabricmanager` after the service failed to start; its
    "Process: N ExecStart=...nv-fabricmanager ... (code=exited, status=1/FAILURE)" line carries the failure."""
    status = ("× nvidia-fabricmanager.service - NVIDIA fabric manager service\n"
              "     Loaded: loaded (/lib/systemd/system/nvidia-fabricmanager.service; enabled; "
              "vendor preset: enabled)\n"
              "     Active: failed (Result: exit-code) since Tue 2025-05-06 08:12:41 UTC; 2min 7s ago\n"
              "    Process: 13907 ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg"
              " (code=exited, status=1/FAILURE)\n"
              "        CPU: 5ms")
    found = one(status)
    assert (found.kind, found.attrs["fault"]) == ("gpu_fault", "fabric_manager_failed")
    # a running unit, and an exit status 0, are no fault
    assert events("    Process: 13907 ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/"
                  "fabricmanager.cfg (code=exited, status=0/SUCCESS)") == []
    assert events("     Active: active (running) since Thu 2025-03-20 15:32:05 UTC; 1 week 3 days ago\n"
                  "   Main PID: 2941 (nv-fabricmanage)") == []


def test_a_sentence_that_says_what_nvidia_smi_returns_is_prose_and_the_message_itself_still_reads():
    """ai-infrastructure.net's runbook (heldout24's false positive): "..., or nvidia-smi returns Failed to
    initialize NVML: Driver/library version mismatch because the resident kernel module and ...". """
    assert events("Scope: recover a node where the NVIDIA kernel modules fail to load or refuse to bind. Either "
                  "modprobe nvidia errors, or nvidia-smi returns Failed to initialize NVML: Driver/library version "
                  "mismatch because the resident kernel module and the userspace libraries are different driver "
                  "versions.") == []
    # the message nvidia-smi prints still reads
    assert one("Failed to initialize NVML: Driver/library version mismatch").attrs["fault"] == (
        "driver_version_mismatch")
