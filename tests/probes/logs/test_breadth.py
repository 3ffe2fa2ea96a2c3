"""Session 7's readers (h15e): one behaviour each, on the formats of public reports (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one

from gpuslo.probes.logs.catalog import TRIGGER_WORDS

PG = "[rank1]:[E1103 07:41:12.460801783 ProcessGroupNCCL.cpp:{}] "


def test_the_summary_lines_and_the_watchdog_line_are_one_timeout_with_the_collective():
    event = one("\n".join([
        PG.format(1834) + "[PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 7, last enqueued NCCL work: 7,"
                          " last completed NCCL work: 6.",
        PG.format(630) + "[Rank 1] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
                         "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        PG.format(636) + "[Rank 1] To avoid data inconsistency, we are taking the entire process down.",
        PG.format(1595) + "[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with "
                          "exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
                          "OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600021 milliseconds "
                          "before timing out."]))
    assert (event.rank, event.attrs["seq"], event.attrs["op"], event.attrs["timeout_ms"]) == (1, 7, "ALLREDUCE",
                                                                                             600000)


def test_another_ranks_watchdog_line_does_not_join_a_pending_summary():
    found = events("[rank0]:[E227 23:12:10.3 ProcessGroupNCCL.cpp:629] [Rank 0] Some NCCL operations have failed or "
                   "timed out.\n[rank3]:[E227 23:12:10.3 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1000) "
                   "ran for 1001 milliseconds before timing out.")
    assert [(e.rank, e.attrs.get("seq")) for e in found] == [(0, None), (3, 9)]


def test_a_dump_signal_is_a_timeout_with_the_work_counters():
    event = one("[rank1]:[E307 05:33:40.161079108 ProcessGroupNCCL.cpp:1858] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
                "Received a dump signal due to a collective timeout from this local rank and we will try our best to "
                "dump the debug info. Last enqueued NCCL work: 861, last completed NCCL work: 860.")
    assert (event.kind, event.rank, event.attrs["last_completed_seq"]) == ("nccl_timeout", 1, 860)


def test_the_cuda_samples_check_reads_the_error_string_in_parentheses():
    event = one("Failed to launch vectorAdd kernel (error code no kernel image is available for execution on the "
                "device)!")
    assert (event.kind, event.attrs["error_name"], event.labels["family"]) == (
        "cuda_error", "cudaErrorNoKernelImageForDevice", "cuda_sample_check")
    assert events("Failed to open file (error code 2)!") == []  # a number is not a cudaGetErrorString text


def test_an_nccl_warn_from_transport_code_reads_its_cuda_error_number_and_text():
    event = one("node1:420:437 [5] transport/nvls.cc:379 (nvlsAllocateMem) NCCL WARN Failed to bind NVLink SHARP "
                "(NVLS) Multicast memory of size 2097216 : CUDA error 401 'the operation cannot be performed in the "
                "present state'.")
    assert (event.kind, event.gpu, event.attrs["error_name"], event.attrs["error_code"]) == (
        "cuda_error", 5, "cudaErrorIllegalState", 401)


def test_a_gradient_norm_printed_as_nan_is_a_nonfinite_training_value():
    megatron = one(" iteration     5426/  250000 | learning rate: 2.999E-04 | loss scale: 1.0 | grad norm: nan | "
                   "number of skipped iterations:   0 |")
    hf = one("{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 9.77e-06, 'epoch': 0.53}")
    assert (megatron.kind, megatron.attrs["metric"], hf.attrs["value"]) == ("loss_nonfinite", "grad norm", "nan")
    assert events(" iteration 12/ 100 | grad norm: 0.794 | number of nan iterations:   0 |") == []


def test_a_bfc_arena_failure_wrapped_after_its_signature_keeps_its_size():
    event = one("| m | 1 | UNAVAILABLE: Internal: onnx runtime error 6: /src/bfc_arena.cc:368 void* "
                "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool) \n"
                "Failed to allocate memory for requested buffer of size 268435520 |")
    assert (event.kind, event.attrs["requested_bytes"]) == ("cuda_oom", 268435520)


def test_vllm_start_up_errors_are_found_by_their_exception_class():
    """"Free memory on device" and "No available memory" left the trigger words: vLLM raises both as ValueError."""
    assert b"Free memory on device" not in TRIGGER_WORDS
    event = one("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine.")
    assert event.kind == "cuda_oom"


# ---- after heldout15's first run (not part of its figure) ----


def test_a_check_that_prints_the_call_and_failed_with_error_is_found_without_another_trigger_word():
    event = one("  what():  /tmp/b/include/tiny-cuda-nn/multi_stream.h:84 cudaEventRecord(m_event, m_stream) failed "
                "with error an illegal memory access was encountered")
    assert (event.kind, event.attrs["error_name"]) == ("cuda_error", "cudaErrorIllegalAddress")


def test_a_progress_bar_loss_printed_as_nan_dot_zero_is_nonfinite():
    event = one("Epoch 0:  71%|███▏ | 5881/8295 [04:01<01:39, 24.37it/s, v_num=0, train_loss_step=nan.0]")
    assert (event.kind, event.attrs["metric"], event.attrs["value"]) == ("loss_nonfinite", "train_loss_step", "nan")


def test_xla_names_a_library_internal_error_in_words():
    event = one("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: cuSolver internal error")
    assert (event.kind, event.attrs["error_name"]) == ("cuda_error", "CUSOLVER_STATUS_INTERNAL_ERROR")


def test_a_line_cut_inside_the_error_text_still_names_the_status():
    event = one("ERROR Uncaught exception: /src/gpu_memory.h:603 cudaDeviceSynchronize() failed with error an "
                "illegal memory access was encounte")
    assert (event.attrs["error_name"], event.attrs["api"]) == ("cudaErrorIllegalAddress", "cudaDeviceSynchronize")
    assert events("ERROR Uncaught exception: cudaDeviceSynchronize() failed with error an illeg") == []  # too short


def test_the_bfc_allocators_not_a_failure_note_wrapped_over_lines_stays_silent():
    """heldout16's first-run false positive: the note's "The caller indicates that this is not a failure" wrapped."""
    assert events("2017-07-02 15:57:33.230281: W tensorflow/core/common_runtime/bfc_allocator.cc:217]\n"
                  " Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.59GiB. The\n"
                  " caller indicates that this is not a failure, but may mean that there\n"
                  "could be performance gains if more memory is available.") == []
    assert one("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying "
               "to allocate 2.43MiB.  Current allocation summary follows.").kind == "cuda_oom"


def test_an_error_in_typographic_quotes_on_a_line_of_its_own_is_a_quotation():
    """heldout17's first-run false positive."""
    assert events("“RuntimeError: CUDA error: an illegal memory access was encountered.”") == []
    assert one("RuntimeError: CUDA error: an illegal memory access was encountered").kind == "cuda_error"
