"""The skip marker for tests that need root and working BPF, for any test folder: its reason is preflight's own
message."""

from __future__ import annotations

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.ebpf.preflight import preflight


def _bpf_missing() -> str | None:
    try:
        preflight()
    except ProbeError as exc:
        return str(exc)
    return None


BPF_MISSING = _bpf_missing()
requires_bpf = pytest.mark.skipif(BPF_MISSING is not None, reason=BPF_MISSING or "")
