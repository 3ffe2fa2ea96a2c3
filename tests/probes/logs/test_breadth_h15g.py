"""Session 9's readers (h15g): one behaviour each, on the formats of public reports (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_a_status_number_beside_the_oom_wording_names_the_status_and_its_hint_line_is_an_echo():
    """heldout18's Paddle extra event: "(External) CUDA error(2), out of memory." then its "[Hint: ...]" line."""
    found = events("OSError: (External) CUDA error(2), out of memory.\n"
                   "  [Hint: 'cudaErrorMemoryAllocation'. The API call failed because it was unable to allocate "
                   "enough memory to perform the requested operation. ] (at /paddle/phi/backends/gpu/gpu_context.cc:9)")
    assert [(e.kind, e.attrs.get("error_name"), e.attrs.get("error_code")) for e in found] == [
        ("cuda_oom", "cudaErrorMemoryAllocation", 2)]
    # a quantity beside the wording is not a status number
    assert "error_code" not in one("Error: out of GPU memory (2 GiB requested)").attrs


def test_an_error_glossed_in_parentheses_inside_a_long_sentence_is_prose():
    """heldout18's first-run false positive (a pull request's description); a tool's own line still reads."""
    assert events("Fixes XID 79 (GPU has fallen off the bus) cases by raising the severity of the count check so "
                  "that the node is replaced when the device goes missing.") == []
    assert one("XID 79(GPU has fallen off the bus) detected on PCI:0000:3b:00").attrs["xid"] == 79


def test_a_generic_wording_that_opens_a_code_span_has_no_log_structure():
    """heldout18's backticked look-alike, read by the generic families alone: a backtick is a quotation's mark."""
    from generalization import generic_only
    with generic_only():
        assert events("`failed to allocate 106.88M (112066560 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY`") == []
        assert one("failed to allocate 106.88M (112066560 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY").kind == \
            "cuda_oom"


TF_ALLOC = ("2018-03-14 11:33:52.{}: E tensorflow/stream_executor/cuda/cuda_driver.cc:924] failed to allocate {} "
            "({} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY")


def test_tensorflows_allocator_retrying_at_nine_tenths_of_the_size_is_one_incident():
    """heldout18's TF extra event: each retry asks for 0.9 of the size before it."""
    sizes = [1015196672, 913677056, 822309376, 740078464]
    found = events("\n".join(TF_ALLOC.format(i, f"{n / 2**20:.2f}M", n) for i, n in enumerate(sizes)))
    assert [(e.kind, e.attrs["requested_bytes"]) for e in found] == [("cuda_oom", sizes[0])]
    # a second, unrelated request of another size is another incident
    assert len(events("\n".join(TF_ALLOC.format(i, "x", n) for i, n in enumerate([1015196672, 2030393344])))) == 2


def test_paddles_out_of_memory_error_on_gpu_n_is_an_oom_on_that_gpu_not_a_prose_tail():
    """heldout18's Paddle miss: the message on its own line after "RuntimeError: ResourceExhaustedError:"."""
    event = one("RuntimeError: ResourceExhaustedError:\n\nOut of memory error on GPU 1. Cannot allocate 96.000244MB "
                "memory on GPU 1, 6.000000GB memory has been allocated and available memory is only 0.000000B.")
    assert (event.kind, event.gpu) == ("cuda_oom", 1)
    # a sentence about such an error is still prose
    assert events("Why does the out of memory error happen on GPU 0 when the batch size is only one?") == []


def test_googletests_report_of_a_throw_is_a_log_line_not_a_quotation():
    """heldout11's Kokkos miss: gtest quotes the exception's what() after "C++ exception with description"."""
    event = one('03:39:49 C++ exception with description "cudaGetLastError() error( cudaErrorLaunchOutOfResources): '
                'too many resources requested for launch /src/core/src/Cuda/Kokkos_CudaExec.hpp:401" thrown'
                ' in the test body.')
    assert (event.kind, event.attrs["error_name"]) == ("cuda_error", "cudaErrorLaunchOutOfResources")
    # a sentence that quotes the same error is still prose
    assert events('The docs say "cudaGetLastError() error( cudaErrorLaunchOutOfResources)" means too many registers.') \
        == []


def test_returnns_step_line_with_a_score_printed_as_nan_is_nonfinite():
    """heldout-nan's RETURNN miss: each score named, then its value, comma-separated."""
    event = one("ep 3 train, step 41, ce 0.412, ctc_4 nan, ctc_8 nan, fer 0.093")
    assert (event.kind, event.attrs["value"], event.attrs["step"], event.attrs["metric"]) == (
        "loss_nonfinite", "nan", 41, "ctc_4")
    assert events("ep 3 train, step 41, ce 0.412, ctc_4 1.732, fer 0.093") == []
    assert events("ep 3 train, step 41, ce 0.412, fer 0.093, nan_count 0") == []


def test_a_rust_panic_quoting_an_oom_is_a_log_line():
    """heldout13's TGI miss: "thread 'main' panicked at '<message>', <file.rs>:N:N" quotes the error."""
    event = one("thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 1 would exceed "
                "allowed memory. (out of memory)\\nFree (according to CUDA): 11.12 MiB\")', router/src/main.rs:216:18")
    assert (event.kind, event.gpu) == ("cuda_oom", 1)
    assert events("The thread panicked at startup because the model ran out of memory on the CUDA device.") == []


def test_a_chinese_lead_ending_in_a_colon_then_the_pasted_exception_is_the_error():
    """heldout18's TranSummar miss; a Chinese sentence that names the error is still prose."""
    assert one("老是报这个问题：RuntimeError: CUDA error: out of memory").kind == "cuda_oom"
    assert events("运行时报错 RuntimeError: CUDA error: out of memory 怎么解决") == []
    assert events("为什么会出现 CUDA error: out of memory 这个问题？") == []


def test_a_markdown_error_reports_exception_type_field_naming_the_oom_is_an_oom():
    """heldout15's ComfyUI "Error Report" miss: a field of a generated report, not a list item in prose."""
    event = one("# ComfyUI Error Report\n## Error Details\n- **Node Type:** KSampler\n"
                "- **Exception Type:** torch.OutOfMemoryError\n- **Exception Message:** Allocation on device ")
    assert (event.kind, event.attrs["error_name"]) == ("cuda_oom", "OutOfMemoryError")
    assert events("- **Exception Type:** RuntimeError") == []
    assert events("- torch.OutOfMemoryError is raised when the allocator gives up") == []
