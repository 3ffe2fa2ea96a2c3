"""Each message family: the exact events (kind, envelope fields, every attr) read from real-format fixtures."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from logprobe_helpers import READ_TIME, fixture_bytes, load, parse_all, size

from gpuslo.probes.logs.parser import LogParser, ParserSettings


def summary(events):
    return [(e.kind, e.gpu, e.rank, e.pid, dict(e.attrs)) for e in events]


def test_pytorch_new_oom_wording():
    (event,) = load("torch_oom_new.log")
    assert summary([event]) == [("cuda_oom", 3, 3, 12345, {
        "requested_bytes": size("1.50", "GiB"), "total_bytes": size("79.11", "GiB"),
        "free_bytes": size("1.02", "GiB"), "allocated_bytes": size("76.20", "GiB"),
        "reserved_unallocated_bytes": size("1.25", "GiB"), "error_name": "torch.OutOfMemoryError"})]
    assert event.source == "logs" and event.labels["family"] == "torch_oom"
    assert event.message.startswith("[rank3]: torch.OutOfMemoryError: CUDA out of memory.")
    assert event.time == READ_TIME  # no time stamp in the line: the read time


def test_pytorch_old_oom_wordings():
    assert summary(load("torch_oom_old.log")) == [
        ("cuda_oom", 0, None, None, {
            "requested_bytes": size("2.00", "GiB"), "total_bytes": size("79.15", "GiB"),
            "free_bytes": size("1.13", "GiB"), "allocated_bytes": size("74.50", "GiB"),
            "reserved_unallocated_bytes": size("76.02", "GiB") - size("74.50", "GiB"),
            "error_name": "OutOfMemoryError"}),
        ("cuda_oom", 1, None, None, {  # "this process" clause: no pid guessed
            "requested_bytes": size("20.00", "MiB"), "total_bytes": size("23.65", "GiB"),
            "free_bytes": size("3.06", "MiB"), "allocated_bytes": size("22.91", "GiB"),
            "reserved_unallocated_bytes": size("267.41", "MiB"), "error_name": "torch.cuda.OutOfMemoryError"}),
        ("cuda_oom", 0, None, None, {
            "requested_bytes": size("20.00", "MiB"), "total_bytes": size("2.00", "GiB"), "free_bytes": 0,
            "allocated_bytes": size("1.32", "GiB"),
            "reserved_unallocated_bytes": size("1.39", "GiB") - size("1.32", "GiB"),
            "error_name": "OutOfMemoryError"}),
    ]


def test_hard_wrapped_oom_behind_ray_worker_prefix_is_one_event():
    (event,) = load("torch_oom_wrapped.log")
    assert summary([event]) == [("cuda_oom", 0, None, 48211, {
        "requested_bytes": size("896.00", "MiB"), "total_bytes": size("39.38", "GiB"),
        "free_bytes": size("512.38", "MiB"), "allocated_bytes": size("37.12", "GiB"),
        "reserved_unallocated_bytes": size("1.23", "GiB"), "error_name": "torch.OutOfMemoryError"})]
    assert event.message.count("\n") == 3  # four physical lines kept


def test_xla_echoes_collapse_and_tf_shape_gives_bytes():
    events = load("xla_tf_oom.log")
    assert summary(events) == [
        ("cuda_oom", None, None, None, {"requested_bytes": 17179869184, "error_name": "RESOURCE_EXHAUSTED"}),
        ("cuda_oom", 1, None, None, {"requested_bytes": 32 * 1024 * 1024 * 4, "error_name": "RESOURCE_EXHAUSTED"}),
    ]
    assert events[1].time == datetime(2024, 2, 3, 11, 20, 0, 1, tzinfo=UTC)


def test_nccl_oom_system_error_block_and_ib_completion():
    assert summary(load("nccl_oom_and_errors.log")) == [
        ("cuda_oom", 5, None, 2201, {"error_name": "cudaErrorMemoryAllocation", "error_code": 2, "api": "nccl"}),
        ("nccl_error", None, 2, None, {
            "error_name": "ncclSystemError", "error_code": 2,
            "detail": "socketStartConnect: Connect to 10.1.2.3<45678> failed : Software caused connection abort"}),
        ("nccl_error", 1, None, 3301, {
            "error_name": "ncclRemoteError", "error_code": 6,
            "detail": "NET/IB : Got completion from peer 10.1.2.9<51200> with status=12 opcode=0 len=0 vendor err "
                      "129 (Recv) localGid ::ffff:10.1.2.8 remoteGids::ffff:10.1.2.9"}),
    ]


def test_nccl_last_error_cuda_oom_block_is_a_cuda_oom():
    text = (b"[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            b"ProcessGroupNCCL.cpp:1691, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version "
            b"2.18.1\n[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.\n[rank1]: Last error:\n"
            b"[rank1]: Cuda failure 'out of memory'\n")
    assert summary(parse_all(text)) == [
        ("cuda_oom", None, 1, None, {"error_name": "cudaErrorMemoryAllocation", "error_code": 2, "api": "nccl"})]


def test_watchdog_timeouts_old_and_new_heartbeat_and_abort():
    assert summary(load("nccl_timeouts.log")) == [
        ("nccl_timeout", None, 1, None, {"op": "ALLREDUCE", "seq": 2, "timeout_ms": 600000,
                                         "elapsed_ms": 600034, "numel": 1}),
        ("nccl_timeout", None, 0, None, {"op": "_ALLGATHER_BASE", "seq": 4817, "timeout_ms": 1800000,
                                         "elapsed_ms": 1800085, "numel": 131334144, "pg": "0(default_pg)"}),
        ("nccl_timeout", None, 5, None, {"op": "heartbeat_monitor", "pg": "0(default_pg)"}),
        ("nccl_error", None, 3, None, {
            "error_name": "ncclRemoteError", "error_code": 6,
            "detail": "NCCL error: remote process exited or there was a network error, NCCL version 2.18.1"}),
    ]


def test_watchdog_stuck_alone_carries_its_timeout():
    line = (b"[rank2]:[E1015 12:44:00.000 ProcessGroupNCCL.cpp:1161] [PG 0 Rank 2] ProcessGroupNCCL's watchdog got "
            b"stuck for 480 seconds without making progress in monitoring enqueued collectives.\n")
    assert summary(parse_all(line)) == [("nccl_timeout", None, 2, None, {
        "op": "heartbeat_monitor", "timeout_ms": 480000, "pg": "0"})]


def test_cuda_errors_graph_errors_cublas_ecc():
    assert summary(load("cuda_errors.log")) == [
        ("cuda_error", None, None, None, {"error_name": "cudaErrorIllegalAddress", "error_code": 700}),
        # cuBLAS's ALLOC_FAILED by name is an allocation failure, as its text and number forms are (h15l)
        ("cuda_oom", None, None, None, {"error_name": "CUBLAS_STATUS_ALLOC_FAILED", "error_code": 3,
                                          "api": "cublasCreate"}),
        ("cuda_error", None, None, None, {"error_name": "cudaErrorAssert", "error_code": 710}),
        ("cuda_error", None, 1, None, {"error_name": "cudaErrorLaunchFailure", "error_code": 719}),
        ("cuda_error", None, None, None, {"error_name": "cudaErrorECCUncorrectable", "error_code": 214}),
        ("cuda_graph_error", None, None, None, {"error_name": "cudaErrorStreamCaptureUnsupported",
                                                "error_code": 900}),
        ("cuda_graph_error", None, None, 3321, {"error_name": "cudaErrorStreamCaptureInvalidated",
                                                "error_code": 901}),
        ("cuda_oom", None, None, None, {"error_name": "cudaErrorMemoryAllocation", "error_code": 2}),
    ]


def test_xid_lines_and_fallen_off_the_bus():
    events = load("kernel_xid.log")
    assert summary(events) == [
        ("gpu_xid", None, None, 1234, {"xid": 79, "pci_bus": "0000:3b:00", "detail": "GPU has fallen off the bus."}),
        ("gpu_xid", None, None, 40216, {"xid": 31, "pci_bus": "0000:86:00", "detail": (
            "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f4b_4e000000. "
            "Fault is of type FAULT_PDE ACCESS_TYPE_READ")}),
        ("gpu_xid", None, None, None, {"xid": 94, "pci_bus": "0000:b1:00",
                                       "detail": "Contained: SM (0x1). RST: No, D-RST: No"}),
        ("gpu_xid", None, None, None, {"xid": 79, "pci_bus": "0000:1a:00",
                                       "detail": "GPU has fallen off the bus (no Xid number in the log)"}),
    ]
    assert events[1].time == datetime(2024, 5, 1, 12, 34, 56, tzinfo=UTC)


def test_look_alike_lines_produce_nothing():
    assert load("negatives.log") == []


@pytest.mark.parametrize("name", ["torch_oom_new.log", "torch_oom_old.log", "torch_oom_wrapped.log",
                                  "xla_tf_oom.log", "nccl_oom_and_errors.log", "nccl_timeouts.log",
                                  "cuda_errors.log", "kernel_xid.log", "negatives.log"])
def test_prefilter_loses_nothing(name):
    """The fast scan (trigger prefilter) finds exactly what line-by-line feeding finds."""
    data = fixture_bytes(name)
    slow = LogParser(ParserSettings(host="node1", source=name), clock=lambda: READ_TIME)
    by_line, offset = [], 0
    for line in data.splitlines(keepends=True):
        by_line += slow.feed(line, offset)
        offset += len(line)
    by_line += slow.flush()
    assert [e.to_dict() for e in parse_all(data, name)] == [e.to_dict() for e in by_line]


def test_ids_are_deterministic_and_distinct():
    data = fixture_bytes("cuda_errors.log")
    first, second = parse_all(data), parse_all(data)
    assert [e.id for e in first] == [e.id for e in second]
    assert len({e.id for e in first}) == len(first)
    assert parse_all(data, source="other.log")[0].id != first[0].id


def test_progress_bar_glue_and_time_without_zone():
    line = (b"2024-06-01 08:00:00,250 Epoch 1:  45%|####5     | 450/1000 [01:23<01:42,  5.36it/s]\r"
            b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    (event,) = parse_all(line)
    assert event.attrs["error_name"] == "cudaErrorIllegalAddress"
    assert event.message == "RuntimeError: CUDA error: an illegal memory access was encountered"
    (stamped,) = parse_all(b"2024-06-01 08:00:00,250 RuntimeError: CUDA error: misaligned address\n")
    assert stamped.time == datetime(2024, 6, 1, 8, 0, 0, 250000, tzinfo=UTC)  # no zone: UTC


def test_same_error_on_two_ranks_is_two_events_but_an_echo_is_not():
    lines = (b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
             b"[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
             b"[rank0]:  what():  CUDA error: an illegal memory access was encountered\n")
    assert [e.rank for e in parse_all(lines)] == [0, 1]


def test_wrapped_watchdog_timeout_is_one_event_and_the_next_record_is_kept():
    text = (b"[rank4]:[E ProcessGroupNCCL.cpp:563] [Rank 4] Watchdog caught collective operation timeout: "
            b"WorkNCCL(Seq\n"
            b"[rank4]:Num=77, OpType=BROADCAST, NumelIn=1024, NumelOut=1024, Timeout(ms)=60000) ran for 60012 millise\n"
            b"[rank4]:conds before timing out.\n"
            b"[rank4]: RuntimeError: CUDA error: misaligned address\n")
    assert summary(parse_all(text)) == [
        ("nccl_timeout", None, 4, None, {"op": "BROADCAST", "seq": 77, "timeout_ms": 60000, "elapsed_ms": 60012,
                                         "numel": 1024}),
        ("cuda_error", None, 4, None, {"error_name": "cudaErrorMisalignedAddress", "error_code": 716}),
    ]


def test_glued_glog_records_split_but_worker_prefixes_do_not():
    """A paste that lost its newlines holds several records on one line; each record is read on its own. A Ray
    worker's `(Worker pid=N) [rankN]:[E ...]` prefix and a progress bar's `...][E ...]` are not sentences."""
    glued = (b"[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the asynchronous"
             b" nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. [E Process"
             b"GroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down. terminate called"
             b" after throwing an instance of 'std::runtime_error' what(): NCCL error: unhandled system error, NCCL"
             b" version 2.14.3 ncclSystemError: System call (e.g. socket, malloc) or external library call failed\n")
    assert [(e.kind, e.attrs.get("error_name")) for e in parse_all(glued)] == [
        ("nccl_timeout", None), ("nccl_error", "ncclSystemError")]
    ray = (b"(RayWorkerWrapper pid=5120) [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective"
           b" operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000)"
           b" ran for 600012 milliseconds before timing out.\n")
    (event,) = parse_all(ray)
    assert (event.kind, event.pid, event.rank, event.attrs["seq"]) == ("nccl_timeout", 5120, 1, 7)
