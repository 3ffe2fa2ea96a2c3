"""Session h15r's slice (heldout29): the core families as public bug reports paste them; the wordings and the
prefix the first run missed and the reference table it read as an incident (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_a_vllm_worker_tag_with_a_tensor_parallel_name_gives_the_pid():
    """vllm-project/vllm#24815: vLLM's "(VllmWorker TP1 pid=409) " names the worker twice before its pid."""
    found = one("(VllmWorker TP1 pid=512) ERROR 09-14 04:22:08 [multiproc_executor.py:596] RuntimeError: CUDA error: "
                "an illegal memory access was encountered")
    assert (found.kind, found.pid, found.attrs["error_code"]) == ("cuda_error", 512, 700)
    assert one("(VllmWorker rank=0 pid=223) ERROR 06-26 23:10:17 [multiproc_executor.py:527] RuntimeError: CUDA "
               "error: an illegal memory access was encountered").pid == 223


def test_sglang_says_the_weights_leave_no_memory_for_the_kv_cache():
    """SemiAnalysisAI/InferenceX#2128: SGLang's profiler (2026) when the static fraction is below the weights."""
    found = one("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88.")
    assert (found.kind, found.attrs["error_name"]) == ("cuda_oom", "InsufficientKVCacheMemory")


def test_a_step_record_whose_fields_are_separated_by_dashes():
    """MahmudulAlam/Automatic-Identification-and-Counting-of-Blood-Cells#15: "step N - loss nan - moving ave loss
    nan": the dash after the value separates fields, it does not open an explanation."""
    found = one("step 1723 - loss        nan - moving ave loss        nan")
    assert (found.kind, found.attrs["step"], found.attrs["metric"]) == ("loss_nonfinite", 1723, "loss")
    assert events("The loss nan - which means the run diverged - showed up at once.") == []


def test_a_users_announcement_glued_to_the_error_by_a_full_width_colon():
    """QingyongHu/SensatUrban#25: "the following error occurred：failed to run cuBLAS routine ..." is the user's
    own report of TensorFlow's line; a sentence about when a status occurs stays prose."""
    found = one("Unfortunately, the following error occurred：failed to run cuBLAS routine cublasSgemm_v2: "
                "CUBLAS_STATUS_EXECUTION_FAILED")
    assert (found.kind, found.attrs["error_name"]) == ("cuda_error", "CUBLAS_STATUS_EXECUTION_FAILED")
    assert events("If the error occurs: CUBLAS_STATUS_EXECUTION_FAILED means the kernel failed to launch.") == []


def test_an_error_name_alone_on_its_line_is_a_reference_row():
    """NVIDIA/cuda-python#458: a table of CUDA errors prints each name on its own line; a log line names what
    failed around it."""
    assert events("900\n900\ncudaErrorStreamCaptureUnsupported\noperation not permitted when stream is capturing\n"
                  "901\n901\ncudaErrorStreamCaptureInvalidated\n") == []
    found = one("cudaStreamEndCapture failed: cudaErrorStreamCaptureInvalidated")
    assert found.kind == "cuda_graph_error"
