"""Session h15j's readers and look-alike rules (runtimes and cluster tooling, heldout21): one behaviour each, on the
formats of public reports (numbers changed), plus the trigger-word swaps they needed."""

from __future__ import annotations

import corpus
from logprobe_helpers import events, one

from gpuslo.engine.errors import EventError
from gpuslo.engine.events import parse_event
from gpuslo.probes.logs.catalog import TRIGGER_WORDS


def test_tensorrts_error_code_oom_takes_the_allocators_byte_count_from_the_next_line():
    """NVIDIA/TensorRT#4258: "Error Code 1: Cuda Runtime (out of memory)", then the allocator's warning."""
    found = one("[03/02/2025-10:11:12] [E] Error[1]: [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime "
                "(out of memory)\n[03/02/2025-10:11:12] [W] [TRT] Requested amount of GPU memory (8589934592 bytes) "
                "could not be allocated. There may not be enough free memory for allocation to succeed.")
    assert (found.kind, found.attrs["requested_bytes"], found.labels["family"]) == (
        "cuda_oom", 8589934592, "trt_error_code_oom")
    # NVIDIA-AI-IOT/torch2trt#787: the category spelled OutOfMemory, with no size
    bare = one("[TRT] [E] 2: [globWriter.cpp::HybridGlobWriter::193] Error Code 2: OutOfMemory (no further "
               "information)")
    assert (bare.kind, "requested_bytes" in bare.attrs) == ("cuda_oom", False)
    # TensorRT 10's "(Requested size was N bytes.)" keeps the allocation family that reads it
    assert one("[E] [virtualMemoryBuffer.cpp::resizePhysical::154] Error Code 2: OutOfMemory (Requested size was "
               "1073741824 bytes.)").labels["family"] == "alloc_failed"


def test_tensorrt_llms_checked_nccl_error_names_the_result_and_the_executor_rank():
    """NVIDIA/TensorRT-LLM#9263: "Assertion failed: Failed, NCCL error <file>:<line> '<text> (run with ...)'"."""
    found = one("[11/18/2025-09:33:30] [TRT-LLM] [RANK 3] [E] Failed to initialize executor on rank 3: "
                "[TensorRT-LLM][ERROR] Assertion failed: Failed, NCCL error ../cpp/tensorrt_llm/runtime/"
                "ncclCommunicator.cpp:90 'unhandled system error (run with NCCL_DEBUG=INFO for details)'")
    assert (found.kind, found.rank, found.attrs["error_name"], found.attrs["error_code"]) == (
        "nccl_error", 3, "ncclSystemError", 2)


def test_a_relayed_critical_xid_without_its_number_is_a_fault_of_that_gpu():
    """GoogleCloudPlatform/ai-infra-cluster-provisioning#383: printed before the job's traceback."""
    found = one("GPU 00000000:8A:00.0: Detected Critical Xid Error")
    assert (found.kind, found.attrs["fault"], found.attrs["pci_bus"]) == ("gpu_fault", "critical_xid", "0000:8a:00")
    assert events("The node reports 'Detected Critical Xid Error' when the GPU is lost, which means a reboot.") == []


def test_rays_memory_monitor_kills_are_host_ooms_in_both_wordings():
    """hiyouga/EasyR1#185 (raylet's summary), vllm-project/vllm#2669 (the kill notice without its exception)."""
    summary = one("(raylet) [2025-05-01 10:00:00,117 E 9 9] (raylet) node_manager.cc:3069: 3 Workers (tasks / actors) "
                  "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5f, IP: "
                  "10.1.2.3) over the last time period.")
    assert (summary.kind, summary.attrs["api"]) == ("cuda_oom", "host")
    notice = one("Memory on the node (IP: 10.1.2.4, ID: 7c) where the task (actor ID: 0d, name=Worker.__init__, "
                 "pid=4242, memory used=30.00GB) was running was 61.50GB / 64.00GB (0.960938), which exceeds the "
                 "memory usage threshold of 0.95. Ray killed this worker (ID: 79) because it was the most recently "
                 "scheduled task.")
    assert (notice.attrs["api"], notice.attrs["total_bytes"], notice.pid) == ("host", 64 * 2**30, 4242)
    assert b"Workers (tasks" in TRIGGER_WORDS and b"Ray killed" in TRIGGER_WORDS
    # a summary that counts no memory-pressure kill is not one; one a console wrapped after "(tasks /" still is
    assert events("(raylet) node_manager.cc:3069: 0 Workers (tasks / actors) killed due to memory pressure (OOM), 2 "
                  "Workers crashed due to other reasons at node (ID: 5f, IP: 10.1.2.3)") == []
    assert one("(raylet) node_manager.cc:3007: 4 Workers (tasks /\n actors) killed due to memory pressure (OOM), 0 "
               "Workers crashed due to other reasons").attrs["api"] == "host"
    # the words took NV_ERR_'s and GraphExec's places: their lines still hold another word
    assert b"NV_ERR_" not in TRIGGER_WORDS and b"GraphExec" not in TRIGGER_WORDS
    assert one("cudaGraphExecUpdate(exec, graph, &node, &result) failed with error the graph update was not "
               "performed because it included changes which violated constraints specific to instantiated graph "
               "update").kind == "cuda_graph_error"


def test_compute_sanitizers_memcheck_report_is_an_illegal_address():
    """ikawrakow/ik_llama.cpp#425: the report's first line; the frame and address lines after it add nothing."""
    found = one("========= Invalid __shared__ write of size 4 bytes\n=========     at kernel(float *)+0x90\n"
                "=========     Address 0x7f00 is out of bounds")
    assert (found.kind, found.attrs["error_name"], found.attrs["api"]) == (
        "cuda_error", "cudaErrorIllegalAddress", "compute-sanitizer shared write")
    # "Invalid " replaced "Invalid loss": the trainer's line still reads
    assert one("Batch 12: Invalid loss, terminating training").kind == "loss_nonfinite"


def test_open_mpi_tagged_and_timestamped_nccl_lines_keep_their_prefix_fields():
    """NVIDIA/nccl#957: mpirun --timestamp-output --tag-output in front of NCCL's own prefix."""
    found = one("Sat Aug 12 08:01:02 2023[1,3]<stdout>:node9:2201:2290 [3] transport.cc:154 NCCL WARN Cuda failure "
                "'an illegal memory access was encountered'")
    assert (found.kind, found.gpu, found.pid, found.rank) == ("cuda_error", 3, 2201, 3)
    assert found.time is not None and (found.time.year, found.time.month, found.time.day) == (2023, 8, 12)


def test_advice_about_running_out_of_memory_is_not_an_oom():
    """vllm-project/vllm#3764: an INFO line's conditional advice; the same wording stated as a fact still reads."""
    assert events("INFO 04-01 08:19:23 model_runner.py:795] CUDA graphs can take additional 1~3 GiB memory per GPU. "
                  "If you are running out of memory, consider decreasing `gpu_memory_utilization`.") == []
    assert one("ERROR 04-01 08:19:23 worker.py:12] GPU 0 ran out of memory. Out of memory while capturing CUDA "
               "graphs.").kind == "cuda_oom"


def test_a_code_span_in_a_sentence_that_goes_on_is_a_quotation():
    """benchflow-ai/posttrainarena#46: a bullet quotes the error in backticks, then explains it."""
    assert events("- TP=2 on `CUDA_VISIBLE_DEVICES=0,1`: `Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:"
                  "455 'invalid argument'` (the custom all-reduce), while the plain collective works on the same "
                  "node.") == []
    # a paste that is only the code span still reads
    assert one("`Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'`").kind == "cuda_error"


def test_every_event_of_every_corpus_excerpt_passes_the_event_schema():
    """Ingest refuses an event the schema refuses, and the incident is lost: PyTorch's "last completed NCCL work: -1"
    and a coalesced op's NumelIn=18446744073709551615 (size_t -1) made one (NVIDIA/nccl#1504's excerpt)."""
    refused = []
    for split in sorted(path.stem for path in corpus.CORPUS.glob("*.yaml")):
        for case in corpus.load(split):
            for event in corpus.run(case):
                try:
                    parse_event(event.to_dict())
                except EventError as error:
                    refused.append(f"{split}/{case.name}: {error}")
    assert refused == []
