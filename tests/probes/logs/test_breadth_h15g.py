"""Session 9's readers (h15g): one behaviour each, on the formats of public reports (numbers changed)."""

from __future__ import annotations

from test_breadth import events, one


def test_a_status_number_beside_the_oom_wording_names_the_status_and_its_hint_line_is_an_echo():
    """heldout18's Paddle extra event: "(External) CUDA error(2), out of memory." then its "[Hint: ...]" line."""
    found = events("OSError: (External) CUDA error(2), out of memory.\n"
                   "  [Hint: 'cudaErrorMemoryAllocation'. The API call failed because it was unable to allocate "
                   "enough memory to perform the requested operation. ] (at /paddle/phi/backends/gpu/gpu_context.cc:9)")
    assert [(e.kind, e.attrs.get("error_name"), e.attrs.get("error_code")) for e in found] == [
        ("cuda_oom", "cudaErrorMemoryAllocation", 2)]
    # a quantity beside the wording is not a status number
    assert "error_code" not in one("Error: out of GPU memory (2 GiB requested)").attrs
