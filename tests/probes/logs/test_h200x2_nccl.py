"""Rank 0's output of the real two-rank NCCL hang on two H200s (scripts/h200x2-nccl-hang.sh, PyTorch on the GPU
machine): the watchdog's timeout and the communicator abort, and nothing from the 170 lines of set-up noise."""

from __future__ import annotations

from logprobe_helpers import load


def test_the_h200_watchdog_timeout_and_the_abort_are_the_only_events():
    events = load("h200x2_nccl_rank0.log")
    assert [(e.kind, e.labels["family"]) for e in events] == [("nccl_timeout", "nccl_watchdog"),
                                                              ("nccl_error", "nccl_comm_abort")]
    timeout, abort = events
    assert timeout.rank == 0
    assert dict(timeout.attrs) == {"op": "ALLREDUCE", "seq": 7, "numel": 1048576, "timeout_ms": 20000,
                                   "elapsed_ms": 20022}
    assert abort.attrs["error_name"] == "ncclCommAborted"
