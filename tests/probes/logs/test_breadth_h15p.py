"""Session h15p's slice (heldout27, heldout27b): TensorRT-LLM / TensorRT runtime lines, ONNX Runtime under Triton,
Ray-relayed and "[rankN]:"-prefixed trainer crashes, and the one look-alike that fired (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_an_issue_title_behind_its_template_emoji_is_prose():
    """pytorch/TensorRT#2675's title, "🐛 [Bug] Error Code 2: OutOfMemory (no further information)", fired TensorRT's
    error-code family: the title tag was only known without the emoji an issue template puts before it."""
    assert events("🐛 [Bug] Error Code 2: OutOfMemory (no further information)") == []
    assert events("⚠️ [Bug] CUDA error: an illegal memory access was encountered") == []  # two code points
    # TensorRT's own logger line still reads, and a log line that opens with an emoji but no title tag still reads
    # (sungwon-chae/arxiv_confi's trainer logger, heldout26)
    trt = one("[05/08/2024-20:47:56] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::151] Error Code 2: "
              "OutOfMemory (no further information)")
    assert (trt.kind, trt.attrs["api"]) == ("cuda_oom", "tensorrt")
    logger = one("❌ 오류 발생: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of 139.81 "
                 "GiB of which 24.12 MiB is free.")
    assert (logger.kind, logger.gpu, logger.attrs["requested_bytes"]) == ("cuda_oom", 0, 117440512)


def test_tensorrt_engine_build_and_myelin_teardown_lines():
    """huggingface/optimum-nvidia#146 (the builder's "Error Code 2: OutOfMemory (Requested size was N bytes.)") and
    NVIDIA/TensorRT-LLM#1575 (Myelin's "Error 700 destroying stream" after an illegal access)."""
    build = one("[08/11/2024-07:26:51] [TRT] [E] [virtualMemoryBuffer.cpp::resizePhysical::151] Error Code 2: "
                "OutOfMemory (Requested size was 16654532608 bytes.)")
    assert (build.kind, build.attrs["requested_bytes"]) == ("cuda_oom", 16654532608)
    teardown = one("[05/10/2024-22:17:08] [TRT] [E] 1: [graphContext.h::~MyelinGraphContext::55] Error Code 1: Myelin "
                   "([impl.cpp:cuda_object_deallocate:345] Error 700 destroying stream '0x55d1c3e0a0f0'.)")
    assert (teardown.kind, teardown.attrs["error_code"]) == ("cuda_error", 700)


def test_ray_and_onnx_runtime_wrappers_keep_the_cuda_status():
    """OpenRLHF/OpenRLHF#1050: Ray's log deduplication appends "[repeated 3x across cluster]" to a vLLM worker's
    allocator error; triton-inference-server/server#2979: ONNX Runtime's CudaCall line inside a Triton log names the
    status, the device and the call."""
    oom = one("(LLMRayActor pid=231877) CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62 "
              "[repeated 3x across cluster]")
    assert (oom.kind, oom.attrs["error_name"]) == ("cuda_oom", "cudaErrorMemoryAllocation")
    ort = one("2021-06-08 21:04:52.328145061 [E:onnxruntime:log, cuda_call.cc:119 CudaCall] CUDA failure 700: an "
              "illegal memory access was encountered ; GPU=0 ; hostname=node; expr=cudaEventRecord(ev, stream)")
    assert (ort.kind, ort.gpu, ort.attrs["error_code"], ort.attrs["api"]) == ("cuda_error", 0, 700, "cudaEventRecord")


def test_rank_prefixed_torch_oom_names_rank_and_device():
    """modelscope/ms-swift#5943: "[rank15]: torch.OutOfMemoryError: ... GPU 7 ..." (the rank prefix torchrun adds to a
    child's stderr) keeps both numbers apart."""
    found = one("[rank15]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB. GPU 7 has a total "
                "capacity of 79.11 GiB of which 2.61 GiB is free.")
    assert (found.kind, found.rank, found.gpu) == ("cuda_oom", 15, 7)
