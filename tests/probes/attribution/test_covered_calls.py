"""Which runtime hooks the probe can leave out: those whose driver counterpart was hit at least as often."""

from __future__ import annotations

from gpuslo.probes.attribution.bpf import DRIVER_COUNTERPART, TIMED_CALLS, covered_calls


def test_a_runtime_call_is_left_out_only_where_its_driver_call_was_hit_as_often():
    hits = {"cudaStreamSynchronize": 40, "cuStreamSynchronize": 40,   # every runtime sync reached the driver
            "cudaMemcpyAsync": 90, "cuMemcpyDtoHAsync_v2": 30,        # host-to-device copies too: not covered
            "cudaEventSynchronize": 0, "cuEventSynchronize": 0,       # not hit: kept (nothing known)
            "cudaMalloc": 3, "cuMemAlloc_v2": 5}
    assert covered_calls(hits) == {"cudaStreamSynchronize", "cudaMalloc"}
    assert covered_calls({}) == frozenset()


def test_every_pair_names_timed_calls_of_the_same_kind():
    calls = {c.symbol: c for c in TIMED_CALLS}
    for runtime, driver in DRIVER_COUNTERPART.items():
        assert calls[runtime].kind == calls[driver].kind, runtime
        assert calls[runtime].library != calls[driver].library, runtime
