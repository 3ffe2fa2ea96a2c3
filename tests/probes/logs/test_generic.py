"""The generic families (probes/logs/families_generic.py): a status read from what the line states in any
framework's wording, one behaviour each; alone they keep every look-alike of every split silent."""

from __future__ import annotations

import random

from corpus import READ_TIME, REPORTED, load, run
from generalization import generic_only

from gpuslo.probes.logs.catalog import TRIGGER_WORDS
from gpuslo.probes.logs.parser import LogParser, ParserSettings


def events(text: str) -> list[dict[str, object]]:
    parser = LogParser(ParserSettings(host="node1", source="t"), clock=lambda: READ_TIME)
    found = parser.scan(text.encode() + b"\n", 0) + parser.flush()
    return [{"kind": e.kind, **e.attrs, "gpu": e.gpu} for e in found]


def test_a_cuda_status_in_another_naming_scheme_maps_to_its_family():
    oom, = events("Seq2Seq.CudaException: ErrorOutOfMemory: The API call failed to allocate enough memory")
    assert oom["kind"] == "cuda_oom" and oom["error_name"] == "cudaErrorMemoryAllocation"
    err, = events("ERROR: CUDA error: an illegal memory access (code #700, ERROR_ILLEGAL_ADDRESS)")
    assert err["kind"] == "cuda_error" and err["error_code"] == 700


def test_a_status_word_without_a_cuda_or_gpu_mark_is_not_read():
    assert events("java.lang.RuntimeException: ErrorOutOfMemory while parsing the heap dump") == []


def test_math_library_statuses_allocation_is_an_oom():
    assert events("ERROR: CUFFTError(code 2, cuFFT failed to allocate GPU or CPU memory)")[0]["kind"] == "cuda_oom"
    err, = events("RuntimeError: cusparse call failed: CUSPARSE_STATUS_EXECUTION_FAILED")
    assert err["kind"] == "cuda_error" and err["error_name"] == "CUSPARSE_STATUS_EXECUTION_FAILED"


def test_an_nccl_call_with_an_error_string_names_its_result():
    err, = events("horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed: unhandled system error")
    assert err == {"kind": "nccl_error", "error_name": "ncclSystemError", "error_code": 2, "api": "ncclAllReduce",
                   "gpu": None}


def test_an_oom_wording_needs_a_gpu_mark():
    oom, = events("E0101 12:00:00.000 alloc.cc:12] MXNetError: cudaMalloc retry failed: out of memory")
    assert oom["kind"] == "cuda_oom" and oom["api"] == "cudaMalloc"
    assert events("E0101 12:00:00.000 worker.cc:9] PoolError: host buffer pool: out of memory") == []


def test_a_cuda_number_after_an_error_word_is_its_status_but_not_a_date_or_size():
    err, = events("Exception: Error syncing: status code (700) at /src/platforms/cuda/src/Utils.cpp:81")
    assert err["error_name"] == "cudaErrorIllegalAddress"
    assert events("│ ERROR 09-27 06:46:46 engine.py:157] CUDA graphs captured in 4 s") == []
    assert events("INFO CUDA error budget: 2 GiB reserved for the allocator") == []


def test_a_library_failure_number():
    err, = events("onnx runtime error 6: CUDNN failure 4000: unrecognized error code ; GPU=0 ; file=conv.cc")
    assert err["kind"] == "cuda_error" and err["error_code"] == 4000 and err["gpu"] == 0


def test_an_error_text_on_a_warning_line_is_not_an_incident():
    assert events("[2025-11-01 TP1] Setup Custom allreduce failed with CUDART error: peer access is not supported "
                  "between these two devices. To silence this warning, specify --disable-custom-all-reduce.") == []


def test_an_xid_in_any_wording_but_not_in_a_sentence():
    xid, = events('{"level":"INFO","message":"Detected XID 145 for GPU 0 Please consult the documentation"}')
    assert xid["kind"] == "gpu_xid" and xid["xid"] == 145 and xid["gpu"] == 0
    assert events("Watch dmesg for Xid 79 events and confirm with DCGM.") == []


def test_the_generic_families_alone_keep_every_look_alike_silent():
    lookalikes = [c for split in REPORTED for c in load(split) if c.lookalike]
    with generic_only():
        loud = [c.name for c in lookalikes if run(c)]
    assert len(lookalikes) >= 130 and loud == []


def test_a_collective_that_timed_out_in_any_wording_but_not_a_setting_or_a_retry():
    timeout, = events("RuntimeError: NCCL all_reduce timed out after 1800 seconds on rank 3")
    assert timeout["kind"] == "nccl_timeout" and timeout["op"] == "ALLREDUCE" and timeout["timeout_ms"] == 1800000
    assert events("RuntimeError: NCCL timeout set to 1800 seconds; allreduce timed out never") == []
    assert events("host:1:2 [0] NCCL INFO socketPollConnect: connect returned Connection timed out, retrying") == []


def test_an_allocation_that_failed_on_a_gpu_but_not_on_the_host():
    oom, = events("RuntimeError: Failed to allocate 2.00 GiB on CUDA device 1")
    assert oom["kind"] == "cuda_oom" and oom["requested_bytes"] == 2 * 2**30
    assert events("RuntimeError: Failed to allocate 2.00 GiB of pinned host memory for the CUDA copy") == []


def test_a_generic_wording_needs_log_structure_in_front():
    assert events("When the diagnostic cannot allocate enough GPU memory it reports DCGM_FR_MEMORY_ALLOC") == []


def test_fuzzed_lines_of_trigger_words_and_field_shapes_never_stop_the_parser():
    """Poison check: lines stitched from every trigger word, status names, sizes, brackets and stamps (some of
    them tens of kilobytes) raise nothing, and the same parser still reads a real incident afterwards."""
    pieces = [w.decode() for w in TRIGGER_WORDS] + [
        "CUDA error", "out of memory", "cudaErrorMemoryAllocation", "CUDA_ERROR_", "Xid", "ncclSystemError",
        "failed:", "Tried to allocate", "GiB", " 9" * 50, "(", ")", "[", "]", ":", "=", '"', "0x",
        "999999999999999999999", "rank", "NCCL WARN", "2026-01-01 00:00:00", "\t", "é", "\x1b[31m"]
    rng = random.Random(11)
    parser = LogParser(ParserSettings(host="node1", source="fuzz"), clock=lambda: READ_TIME)
    offset = 0
    for _ in range(3000):
        line = " ".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        if rng.random() < 0.03:
            line *= rng.randint(20, 200)
        raw = line.encode() + b"\n"
        assert all(event.kind for event in parser.feed(raw, offset))
        offset += len(raw)
    parser.flush()
    oom = b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n"
    found = parser.feed(oom, offset) + parser.flush()
    assert [e.kind for e in found] == ["cuda_oom"]
