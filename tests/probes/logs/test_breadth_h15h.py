"""Session 10's readers (h15h, probes/logs/families_serving.py): one behaviour each, on the formats serving engines
and GPU tools print (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def _read(found):  # noqa: ANN001, ANN202
    return [(e.kind, e.labels["family"], e.attrs.get("error_name"), e.attrs.get("error_code")) for e in found]


def test_the_fastertransformer_lineage_macro_reads_any_cuda_text_its_tag_and_location():
    """[TM]/[FT]/[TensorRT-LLM][ERROR] CUDA runtime error: <text> <file>:<line>: the text decides the status."""
    assert _read(events("RuntimeError: [TM][ERROR] CUDA runtime error: invalid argument "
                        "/lmdeploy/src/turbomind/utils/allocator.h:97")) == [
        ("cuda_error", "ft_runtime_error", "cudaErrorInvalidValue", 1)]
    assert _read(events("  what():  [FT][ERROR] CUDA runtime error: API call is not supported in the installed "
                        "CUDA driver /workspace/src/fastertransformer/utils/allocator.h:41")) == [
        ("cuda_error", "ft_runtime_error", "cudaErrorCallRequiresNewerDriver", 36)]
    # an out-of-memory text is an OOM; a Windows location is stripped like a Unix one
    assert one(r"[TM][ERROR] CUDA runtime error: out of memory C:\src\turbomind\core\allocator.cc:49").attrs[
        "error_name"] == "cudaErrorMemoryAllocation"
    assert one(r"[TensorRT-LLM][ERROR] CUDA runtime error: out of memory C:\src\runtime\buffers.cu:88").kind == \
        "cuda_oom"
    # a text no table holds keeps its own words as the name
    assert one("[TM][ERROR] CUDA runtime error: something odd happened /x/y.cu:3").attrs["error_name"] == \
        "something odd happened"


def test_the_macro_in_a_sentence_is_still_prose():
    assert events("However, running any sample fails with a `RuntimeError: [FT][ERROR] CUDA runtime error: "
                  "invalid argument /workspace/ft/open_attention.h:12`") == []


def test_ggmls_abort_line_alone_is_a_cuda_error_and_with_its_detail_one_incident():
    """ollama's runner reports only "<path>/ggml-cuda.cu:N: CUDA error"; llama.cpp prints it before the detail."""
    bare = events(r"C:\a\ollama\ml\backend\ggml\ggml\src\ggml-cuda\ggml-cuda.cu:91: CUDA error" "\n"
                  r"C:\a\ollama\ml\backend\ggml\ggml\src\ggml-cuda\ggml-cuda.cu:91: CUDA error")
    assert [(e.kind, e.labels["family"]) for e in bare] == [("cuda_error", "ggml_cuda_abort")]  # the repeat: an echo
    block = events("/src/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:77: CUDA error\n"
                   "CUDA error: an illegal memory access was encountered\n"
                   "  current device: 3, in function ggml_backend_cuda_synchronize at /src/ggml-cuda.cu:2470\n"
                   "  cudaStreamSynchronize(cuda_ctx->stream())\n"
                   "./llama-server(+0x751b7b)[0x5c5553040b7b]")
    assert [(e.kind, e.gpu, e.attrs.get("error_name"), e.attrs.get("api")) for e in block] == [
        ("cuda_error", 3, "cudaErrorIllegalAddress", "cudaStreamSynchronize")]


def test_ggmls_abort_after_the_detail_is_an_echo_of_it():
    """Older ggml prints the detail first and the abort line last: one incident, read from the detail."""
    found = events("CUDA error: the launch timed out and was terminated\n"
                   "  current device: 0, in function ggml_cuda_op at /w/ggml-cuda.cu:9001\n"
                   "  cudaGetLastError()\n"
                   "/w/ggml/src/ggml-cuda.cu:101: CUDA error")
    assert [(e.kind, e.attrs.get("error_name")) for e in found] == [("cuda_error", "cudaErrorLaunchTimeout")]


def test_a_source_location_then_only_a_cuda_text_is_that_status():
    assert _read(events("  what():  Error (burn-drv.cpp:41): all CUDA-capable devices are busy or unavailable")) == [
        ("cuda_error", "located_cuda_text", "cudaErrorDevicesUnavailable", 46)]
    # another message after a location is left to the families after this one (xgboost's allocator line)
    assert one("dmlc::Error: [10:01:02] /ws/src/common/device_helpers.cuh:414: Memory allocation error on worker 0: "
               "std::bad_alloc: cudaErrorMemoryAllocation: out of memory").kind == "cuda_oom"
    # a short, common text after a location is not enough
    assert events("  what():  Error (tool.cpp:12): unknown error") == []


def test_a_reply_quoting_a_quote_is_prose_and_a_quoted_paste_still_reads():
    assert events("> > ggml_cuda_init: failed to initialize CUDA: system not yet initialized") == []
    assert one("> [09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] Error executing load_single_module: CUDA out of "
               "memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of 22.07 GiB of which 20.62 MiB "
               "is free.").kind == "cuda_oom"


def test_a_capitalised_commit_title_and_a_bold_quotation_are_prose():
    assert events("Fix: torch.AcceleratorError: CUDA error: an illegal memory access was encountered") == []
    assert events('**"Unable to determine the device handle for GPU 0000:04:00.0: GPU is lost. Reboot the system '
                  'to recover this GPU"**') == []
    assert one("Unable to determine the device handle for GPU 0000:04:00.0: GPU is lost. Reboot the system to "
               "recover this GPU").attrs["xid"] == 79
