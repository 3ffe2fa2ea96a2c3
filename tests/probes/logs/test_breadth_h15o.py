"""Session h15o's readers (heldout26's misses and false positives): one behaviour each, on the formats of public
pages (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_jaxlib_custom_call_names_the_cublas_status_and_the_failed_call():
    """Confirm-Solutions/confirmasaurus:docs/gpu_tips.md: JAX's XLA custom call raises "<file>:<line>: operation
    <call>(...) failed: <jaxlib's status text>" (jaxlib/gpu/gpu_kernel_helpers.cc's ErrorString)."""
    found = one("jax._src.traceback_util.UnfilteredStackTrace: jaxlib.xla_extension.XlaRuntimeError: INTERNAL: "
                "CustomCall failed: jaxlib/cuda/cublas_kernels.cc:46: operation cublasCreate(&handle) failed: cuBlas "
                "has not been initialized")
    assert (found.kind, found.attrs) == ("cuda_error", {"error_name": "CUBLAS_STATUS_NOT_INITIALIZED",
                                                        "error_code": 1, "api": "cublasCreate"})
    # the call's arguments may hold parentheses of their own
    found = one("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CustomCall failed: jaxlib/cuda/cublas_kernels.cc:119:"
                " operation cublasDtrsmBatched( handle.get(), d.side, &alpha, const_cast<const double**>(a_batch_ptrs),"
                " lda, b_batch_ptrs, ldb, d.batch) failed: cuBlas execution failed")
    assert (found.attrs["error_name"], found.attrs["api"]) == ("CUBLAS_STATUS_EXECUTION_FAILED", "cublasDtrsmBatched")


def test_jaxlib_allocation_failures_are_ooms_and_other_libraries_keep_their_own_names():
    """The same format for cuBLAS's ALLOC_FAILED, cuSOLVER and cuFFT (jaxlib's own texts)."""
    oom = one("XlaRuntimeError: INTERNAL: jaxlib/gpu/solver_kernels.cc:55: operation gpusolverDnCreate(&handle) "
              "failed: cuSolver allocation failed")
    assert (oom.kind, oom.attrs["error_name"], oom.attrs["error_code"]) == ("cuda_oom", "CUSOLVER_STATUS_ALLOC_FAILED",
                                                                            2)
    assert one("RuntimeError: jaxlib/cuda/cublas_kernels.cc:46: operation cublasCreate(&handle) failed: cuBlas "
               "allocation failure").kind == "cuda_oom"
    fft = one("XlaRuntimeError: INTERNAL: jaxlib/gpu/ducc_fft.cc:80: operation cufftExecC2C(plan, in, out, dir) "
              "failed: cuFFT execution failed")
    assert (fft.kind, fft.attrs["error_name"]) == ("cuda_error", "CUFFT_EXEC_FAILED")


def test_docs_markup_around_a_message_is_prose_and_the_bare_message_still_reads():
    """Headings, literals and quotations of heldout26's look-alikes (CastelDazur/gpu-memory-guard, RLinf's FAQ,
    SGLang's FAQ, ModelArts' OOM page)."""
    assert events("### 1. `CUDA error: out of memory` (during load)") == []  # a markdown heading's code span
    assert events("``CUresult error result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103``") == []
    assert events("CUDA Error: Illegal Memory Access Encountered#") == []  # a rendered heading's permalink mark
    assert events('#. Error message "RuntimeError: CUDA out of memory." was printed in logs.') == []
    # the messages themselves, and a paste that is one markdown code span (issue reports do that), still read
    assert one("CUresult error result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103").kind == (
        "cuda_oom")
    assert one("CUDA error: out of memory").kind == "cuda_oom"
    assert one("`RuntimeError: CUDA error: out of memory`").kind == "cuda_oom"
    assert one('RuntimeError: "CUDA out of memory. Tried to allocate 20.00 MiB"').kind == "cuda_oom"


def test_a_sentence_that_says_what_a_tool_throws_is_prose_when_it_goes_on():
    """localrig.pages.dev: "Ollama throws CUDA Error: Out of Memory and your GPU has gigabytes of free VRAM ..." (one
    plain word before the message, a long sentence after it)."""
    assert events("Ollama throws CUDA Error: Out of Memory and your GPU has gigabytes of free VRAM staring back at "
                  "you. The error is real, but the diagnosis is not obvious.") == []
    # a log line that relays what a worker raised, with a short tail, still reads
    assert one("[E] llama runner raises CUDA error: out of memory (device 0)").kind == "cuda_oom"


def test_an_issue_summary_that_says_what_fails_with_the_error_is_prose_for_the_generic_families_too():
    """NVIDIA/TransformerEngine#3124 as mirrored (heldout26b): "... fails with CUDA error: an illegal memory access
    was encountered on H200 NVL (sm_90)." (the generic CUDA-text family starts at the text, after "CUDA error: ")."""
    assert events("Multi-GPU FP8 forward through accelerate.dispatch_model + te.fp8_autocast(DelayedScaling(HYBRID)) "
                  "fails with CUDA error: an illegal memory access was encountered on H200 NVL (sm_90).") == []
    # a program's own report says what failed, in the past tense
    assert one("cudaMemcpyAsync failed with CUDA error: an illegal memory access was encountered").kind == (
        "cuda_error")
