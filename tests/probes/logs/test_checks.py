"""The CUDA check families (probes/logs/families_checks.py), the prefixes and prose rules of session 6, and the
prefilter's word budget: one behaviour each, on the formats of public reports (numbers changed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from logprobe_helpers import events, one

from gpuslo.probes.logs.catalog import FAMILIES, TRIGGER_WORDS
from gpuslo.probes.logs.families_checks import CHECK_FAMILIES, TRIGGERS
from gpuslo.probes.logs.prefilter import _GROUP


def test_a_glog_check_against_cuda_success_reads_the_status_number():
    event = one("F0301 10:11:12.774313  2876 syncedmem.cpp:71] Check failed: error == cudaSuccess (2 vs. 0)  "
                "out of memory")
    assert (event.kind, event.attrs["error_name"], event.labels["family"]) == (
        "cuda_oom", "cudaErrorMemoryAllocation", "cuda_check_failed")


def test_a_quoted_cuda_success_assertion_reads_the_bytes_it_could_not_allocate():
    event = one("RuntimeError: Error in void faiss::gpu::allocMemorySpaceV(...) at gpu/utils/MemorySpace.cpp:26: "
                "Error: 'err == cudaSuccess' failed: failed to cudaMalloc 805306368 bytes (error 2 out of memory)")
    assert (event.kind, event.attrs["requested_bytes"]) == ("cuda_oom", 805306368)


def test_a_check_without_a_number_reads_the_status_text():
    event = one("Check failed: e == cudaSuccess CUDA: an illegal memory access was encountered")
    assert event.attrs["error_name"] == "cudaErrorIllegalAddress"


def test_source_code_that_compares_with_cuda_success_is_silent():
    assert events("    if (err != cudaSuccess) { fprintf(stderr, \"failed: %s\\n\", cudaGetErrorString(err)); }") == []


def test_opencv_gpu_api_call_errors_read_the_cuda_text_in_both_formats():
    new = one("opencv/modules/core/src/cuda/gpu_mat.cu:116: error: (-217:Gpu API call) out of memory in function "
              "'allocate'")
    old = one("OpenCV Error: Gpu API call (an illegal memory access was encountered) in allocate, file gpu_mat.cu, "
              "line 9")
    assert (new.kind, old.attrs["error_name"]) == ("cuda_oom", "cudaErrorIllegalAddress")


def test_a_thrust_system_error_is_read_from_its_what_line():
    event = one("terminate called after throwing an instance of 'thrust::system::system_error'\n"
                "  what():  for_each: failed to synchronize: cudaErrorIllegalAddress: an illegal memory access was "
                "encountered")
    assert (event.labels["family"], event.attrs["error_name"]) == ("thrust_error", "cudaErrorIllegalAddress")


def test_a_cuda_exception_whose_what_line_ends_at_a_file_takes_the_next_line():
    event = one("terminate called after throwing an instance of 'CUDA::error'\n"
                "  what():  /opt/src/include/pool/SimpleCudaMalloc_impl.hpp(42):\nerror: out of memory")
    assert (event.kind, event.labels["family"]) == ("cuda_oom", "terminate_cuda")


def test_deepspeeds_gemm_error_number_is_a_cublas_status():
    event = one("!!!! kernel execution error. (m: 512, n: 2048, k: 1024, error: 13)")
    assert (event.attrs["error_name"], event.attrs["api"]) == ("CUBLAS_STATUS_EXECUTION_FAILED", "cublasGemmEx")


def test_a_cudacheck_macro_and_a_hand_written_check_read_the_quoted_text():
    macro = one("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'an illegal memory access was "
                "encountered'")
    hand = one("an illegal memory access was encountered in /src/kernels/propagate.cu at line 88")
    assert macro.attrs["error_name"] == hand.attrs["error_name"] == "cudaErrorIllegalAddress"


def test_trt_cublas_wrapper_status_3_is_an_allocation_failure():
    event = one("2020-11-10 03:18:40.331318: E tensorflow/compiler/tf2tensorrt/utils/trt_logger.cc:41] DefaultLogger "
                "../rtSafe/cublas/cublasWrapper.cpp (71) - cuBLAS Error in CublasWrapper: 3 (Could not initialize "
                "cublas.)")
    assert (event.kind, event.attrs["error_name"]) == ("cuda_oom", "CUBLAS_STATUS_ALLOC_FAILED")


def test_an_srun_task_tag_and_an_empty_nccl_host_still_give_the_gpu():
    event = one("17: :41522:41522 [3] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available")
    assert (event.kind, event.gpu, event.pid, event.attrs["error_name"]) == (
        "nccl_error", 3, 41522, "ncclInternalError")


def test_the_launcher_rank_wins_over_a_process_groups_own_rank():
    event = one("[rank12]:[E218 04:54:23.314069184 ProcessGroupNCCL.cpp:1844] [PG ID 13 PG GUID 143 Rank 0] Timeout at "
                "NCCL work: 87, last enqueued NCCL work: 87, last completed NCCL work: 86.")
    assert event.rank == 12


def test_a_windows_source_path_is_log_structure():
    event = one(r"C:\src\pytorch\aten\src\ATen\native\cuda\Indexing.cu:1308: block: [4,0,0], thread: [7,0,0] "
                "Assertion `srcIndex < srcSelectDimSize` failed.")
    assert event.attrs["error_name"] == "cudaErrorAssert"


def test_a_code_span_that_opens_on_a_pasted_record_is_read():
    event = one("` onnx runtime error 6: Status Message: /ws/onnxruntime/core/providers/cuda/cuda_call.cc:121 "
                "Transpose failed: CUDA failure 700: an illegal memory access was encountered ; GPU=1 ;`")
    assert (event.attrs["error_name"], event.gpu) == ("cudaErrorIllegalAddress", 1)


def test_a_bare_nccl_warn_in_documentation_is_silent():
    assert events("   NCCL WARN Error: failed to extend /dev/shm/nccl-03v824 to 4194660 bytes") == []


def test_a_capitalised_loss_metric_of_nan_is_read():
    event = one("| Training Device=xla:0/0 Step=0 Loss=nan Rate=36.93 GlobalRate=36.93 Time=10:10:55")
    assert event.kind == "loss_nonfinite"


def test_a_minute_stamped_console_line_keeps_its_launcher_rank():
    event = one(" 2025-02-18 12:54 [rank9]:[E218 04:54:23.314069184 ProcessGroupNCCL.cpp:1844] [PG ID 3 PG GUID 7 "
                "Rank 1] Timeout at NCCL work: 5, last enqueued NCCL work: 5, last completed NCCL work: 4.")
    assert (event.rank, event.time) == (9, datetime(2025, 2, 18, 12, 54, tzinfo=UTC))


def test_cublas_status_strings_name_the_status():
    thc = one("RuntimeError: cublas runtime error : the GPU program failed to execute at /src/THC/THCBlas.cu:278")
    te = one("RuntimeError: /te/common/gemm/cublaslt_gemm.cu:326 in function cublas_gemm: cuBLAS Error: resource "
             "allocation failed")
    assert (thc.attrs["error_name"], te.kind) == ("CUBLAS_STATUS_EXECUTION_FAILED", "cuda_oom")


def test_an_nccl_cuda_failure_whose_quote_a_paste_cut_is_read_by_its_number():
    event = one("gpu47:4962:5097 [1] transport/nvls.cc:223 NCCL WARN Cuda failure 999 'unknown error")
    assert (event.attrs["error_name"], event.gpu) == ("cudaErrorUnknown", 1)


def test_a_driver_error_number_is_read_as_a_curesult():
    event = one("Cuda driver error 804 in call at file\n'/opt/lammps/lib/gpu/geryon/nvd_device.h' in line 333.")
    low = one("Cuda driver error 4 in call at file '/opt/lammps/lib/gpu/geryon/nvd_device.h' in line 120.")
    assert (event.attrs["error_name"], low.attrs) == ("cudaErrorCompatNotSupportedOnDevice",
                                                      {"error_code": 4, "api": "cuda driver"})


def test_a_cuda_error_block_is_read_to_its_error_text():
    event = one("CUDA Error:\n    File:       ./utilities/gpu_vector.cuh\n    Line:       147\n    Error code: 700\n"
                "    Error text: an illegal memory access was encountered")
    assert event.attrs["error_name"] == "cudaErrorIllegalAddress"


def test_ctranslate2_and_onnx_runtime_check_wordings():
    ct2 = one("RuntimeError: CUDA failed with error out of memory")
    ort = one("Fail: [ONNXRuntimeError] : 1 : FAIL : CUDA error executing cudaMemcpy(dst, src, n, "
              "cudaMemcpyDeviceToHost)")
    assert (ct2.kind, ort.kind, ort.attrs["api"]) == ("cuda_oom", "cuda_error", "cudaMemcpy")


def test_the_prefilter_stays_within_two_slim_automata():
    """At most 64 words (two automata of at most 32: a 33rd word makes the crate's Teddy searcher the slower Fat
    kind, a third automaton costs another pass) and every check family's word is one of them."""
    assert len(TRIGGER_WORDS) <= 2 * _GROUP and set(TRIGGERS) <= set(TRIGGER_WORDS)


@pytest.mark.parametrize("family", CHECK_FAMILIES, ids=lambda f: f.name)
def test_every_check_family_is_in_the_catalog_with_its_needs(family):
    catalogued = next(f for f in FAMILIES if f.name == family.name)
    assert catalogued.needs
