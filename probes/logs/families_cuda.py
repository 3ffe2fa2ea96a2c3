"""CUDA families: the CUDA status strings of PyTorch and other frameworks, graph capture and update failures in
any framework, C++ library errors that name the status (RAFT, RMM, thrust, compute-sanitizer), cuDNN status
errors, device-side assertions (THC/THCUNN and ATen paths), serving engines' KV-cache capacity errors,
llama.cpp/TensorRT/Triton allocation failures."""

from __future__ import annotations

import re

from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _first, _first_rank, _gpu_any, _int, _size
from gpuslo.probes.logs.units import (
    CUBLAS_STATUS,
    CUBLAS_TEXTS,
    GRAPH_CODES,
    cuda_status,
    find_scheme_status,
    find_status,
    status_for_code,
)

# ---- CUDA status strings --------------------------------------------------------------------------------


def _kind_for(code: int | None) -> str:
    if code == 2:
        return "cuda_oom"
    if code is not None and code in GRAPH_CODES:
        return "cuda_graph_error"
    return "cuda_error"


_CUDA_TEXT = re.compile(
    r"CUDA [Ee]rror:\s*(?P<text>[^\n]+?)(?:\s*(?:when calling|\n|CUDA kernel errors|$))"
    r"|Cuda failure (?:(?P<ncclnum>\d+) )?'(?P<nccl>[^'\n]+)(?:'|$)"  # a paste may cut the closing quote
    r"|cuda runtime error \((?P<code>\d+)\) : (?P<old>[^\n]+?)(?: at |$)"
    r"|THCudaCheck FAIL[^\n]*?error=(?P<thcode>\d+) : (?P<thtext>[^\n]+)"
    # Kaldi's CU_SAFE_CALL: 'cudaError_t 4 : "unspecified launch failure" returned from 'cudaMemcpy(...)'' (the
    # number is the toolkit's of the time, 4 before CUDA 10.1 renumbered it 719: the text names the status)
    r"|cudaError_t \d+ : \"(?P<kaldi>[^\"\n]+)\" returned from"
    # Gunrock/Warp/old ggml: "CUDA error 700 [file, 12]: ...", "CUDA error 2 at ggml-cuda.cu:359: out of memory"
    r"|CUDA error (?P<num>\d+)(?: \[[^\]]*\]| at [^\s:]+:\d+)?:\s*(?P<numtext>[^\n]+)"
    r"|CUDA failure (?P<ortnum>\d+): (?P<orttext>[^;\n]+)"  # ONNX Runtime: "CUDA failure 906: <text> ; GPU=0 ;"
    r"|CUDNN failure (?P<cudnnnum>\d+): (?P<cudnntext>[^;\n]+)"  # ... and "CUDNN failure 4000: <text> ; GPU=0 ;"
    # a CUresult number: torch_memory_saver's "CUresult error  result=2 file=... func=cu_mem_create"
    r"|CUresult error\s+result=(?P<curesult>\d+)"
    r"|Cuda Runtime \((?P<trt>[^)\n]+)\)"  # TensorRT: "Error Code 1: Cuda Runtime (out of memory)"
    # TensorRT 7/8: "safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)"
    r"|Cuda Error in [\w:]+: (?P<trtnum>\d+) \((?P<trttext>[^)\n]+)\)"
    # ... and its cuBLAS wrapper: "cuBLAS Error in CublasWrapper: 3 (Could not initialize cublas ...)", a cublasStatus_t
    r"|cuBLAS Error in [\w:]+: (?P<trtcublas>\d+) \("
    # Torch-TensorRT: "Unable to read CUDA capable devices. Return status: 35"
    r"|Unable to read CUDA capable devices\. Return status: (?P<rsnum>\d+)"
    # OpenMM's CUDA platform: "Error synchronizing on event for CCMA: Invalid error code (700) at .../cuda/..."
    r"|Invalid error code \((?P<invnum>\d+)\)"
    # Triton: "Internal: unable to create stream: operation not supported" (a cudaGetErrorString text, or nothing)
    r"|[Uu]nable to create (?:CUDA )?stream: (?P<stream>[^\n]+)"
    # TensorRT-LLM (a terminal may wrap the call's arguments: "...(ptr, n, mCudaSt\nream->get()): out of memory")
    r"|CUDA runtime error in (?P<trtllmapi>[:\w]+)\((?:.|\n)*?\): (?P<trtllm>[^\n(]+)"
    r"|HIP error:\s*(?P<hip>[^\n]+?)(?:\s*$|\n)"
    # CTranslate2's check: "CUDA failed with error out of memory"; ONNX Runtime's "CUDA error executing cudaMemcpy(...)"
    r"|CUDA failed with error (?P<ct2>[^\n]+?)\s*$|CUDA error executing (?P<ortexec>\w+)\("
    # a runtime that could not start: ggml "failed to initialize CUDA: unknown error", TensorRT "CUDA
    # initialization failure with error 35"
    r"|(?:[Ff]ailed to|[Cc]annot|[Uu]nable to) initiali[sz]e CUDA:\s*(?P<init>[^\n]+?)(?:\s*$|\n)"
    r"|CUDA initiali[sz]ation failure with error (?P<initnum>\d+)"
    r"|(?P<driver>CUDA_ERROR_[A-Z_]+)"
    r"|CUBLAS_STATUS_(?P<cublas>[A-Z_]+)"
    # the CUDA samples' helper_cuda/cutil checks: "file.cu(1571) : cudaSafeCall() Runtime API error 700: an illegal
    # memory access was encountered." (and "Driver API error" for cuSafeCallNoSync)
    r"|(?:Runtime|Driver) API error (?P<apinum>\d+): (?P<apitext>[^\n]+?)\.?\s*(?:\n|$)")
_API = re.compile(
    r"when calling `(\w+)|call='(\w+)|expr=(\w+)|CUDA runtime error in (?:::)?(\w+)|on CUDA API call to (\w+)"
    r"|failed call to (cu\w+)|at function (cuda\w+)\(|\b(cuda[A-Z]\w*)\(\)\s*error\b"
    r"|Call to (cu[A-Z]\w*) results in|\b(cu(?:da)?[A-Z]\w*)(?: retry)? failed\b"
    r"|\b(cuda(?!Error)\w+) returned|^\s*(cu[A-Za-z]\w*)\(|\b(cu(?!daError)\w*Graph\w*|cudaStream(?:Begin|End)Capture"
    r"|cuMem\w+)\b"
    # the call a check prints with its status: "CUDA error: cudaMemcpyAsync(dst, ...): invalid argument", HPL's
    # "CUDART Error: cudaMemcpyAsync( ... ) = 700 (an illegal memory access ...)"
    r"|CUDA error: (cu(?:da)?[A-Z]\w*)\(|\b(cu(?:da)?[A-Z]\w*)\([^\n]*\) = \d+ \("
    # tiny-cuda-nn's and other checks: "cudaEventRecord(m_event, m_stream) failed with error <text>"
    r"|\b(cu(?:da)?[A-Z]\w*)\([^\n()]*\) failed with error ", re.MULTILINE)
_STATED = ("text", "nccl", "old", "thtext", "kaldi", "numtext", "orttext", "trt", "trttext", "trtllm", "hip", "ct2",
           "driver", "init", "initnum", "curesult", "rsnum", "stream", "invnum", "apitext")


def _api(text: str) -> str | None:
    match = _API.search(text)
    return next((g for g in match.groups() if g), None) if match else None


def _cuda_gpu(text: str) -> int | None:
    return _first(_int(r"current\s*device:\s*(\d+)", text), _int(r"\bGPU=(\d+)", text),
                  _int(r"\bon\s*device\s*(\d+)", text), _int(r"\bdevice\s*ordinal\s*(\d+)", text),
                  _int(r"\bon\s+GPU\s+(\d+)\b(?![.:]\d)", text),  # Paddle: "Out of memory error on GPU 0."
                  _int(r"@ gpu (\d+)\]", text))  # Gunrock's "[file.cuh, 781 @ gpu 1] ... (CUDA error 77: ...)"


def cublas_found(status: str | None, code: int | None, api: str | None, *, gpu: int | None = None,
                 rank: int | None = None) -> Found:
    """A cuBLAS status (`CUBLAS_STATUS_` less its prefix; None: only the number is known) as an incident: an
    allocation failure is an OOM, any other status a CUDA error."""
    return Found("cuda_oom" if status == "ALLOC_FAILED" else "cuda_error",
                 _clean({"error_name": "CUBLAS_STATUS_" + status if status else None, "error_code": code,
                         "api": api}), gpu=gpu, rank=rank)


def _cuda(text: str) -> Found | None:
    match = _CUDA_TEXT.search(text)
    if not match:
        return None
    api_name = _api(text)
    if match.group("cudnnnum"):  # cudnnStatus_t numbers differ between cuDNN 8 and 9: the number, no name
        return Found("cuda_error", _clean({"error_code": int(match.group("cudnnnum")), "api": api_name or "cudnn"}),
                     gpu=_cuda_gpu(text), rank=_first_rank(text))
    if match.group("ortexec"):  # the failed call, without its status
        return Found("cuda_error", {"api": match.group("ortexec")}, gpu=_cuda_gpu(text))
    if match.group("trtcublas"):
        code = int(match.group("trtcublas"))
        status = next((name for name, value in CUBLAS_STATUS.items() if value == code), None)
        return cublas_found(status, code, "cublas", gpu=_cuda_gpu(text))
    if match.group("curesult"):
        api = re.search(r"func=(\w+)", text)
        api_name = api.group(1) if api else api_name
    if match.group("cublas"):
        status = match.group("cublas")
        if status == "SUCCESS":
            return None
        # the named status reads as its text and number forms do (ALLOC_FAILED an OOM)
        return cublas_found(status, CUBLAS_STATUS.get(status), api_name, gpu=_cuda_gpu(text))
    stated = next(match.group(g) for g in _STATED if match.group(g))
    name, code = cuda_status(stated)
    if match.group("stream") and code is None:
        return None  # "unable to create stream: <something that is not a CUDA status>"
    if match.group("invnum") and "cuda" not in text.lower():
        return None  # "Invalid error code (N)" names a CUDA status only from a CUDA platform
    if code is None:  # "CUDA error: Could not synchronize CUDA stream: CUDA_ERROR_ILLEGAL_ADDRESS: ..."
        name, code = find_status(text[match.start():]) or find_scheme_status(text[match.start():]) or (name, code)
    number = (match.group("code") or match.group("thcode") or match.group("num") or match.group("ortnum")
              or match.group("ncclnum")
              or match.group("initnum") or match.group("curesult") or match.group("trtnum") or match.group("rsnum")
              or match.group("invnum") or match.group("apinum"))
    if code is None and number:
        name, code = status_for_code(int(number)) or (name, int(number))
    cublas_text = CUBLAS_TEXTS.get(name.lower()) if code is None else None
    if cublas_text is not None:  # ggml prints cuBLAS's status string after "CUDA error: "
        return cublas_found(cublas_text, CUBLAS_STATUS[cublas_text], api_name, gpu=_cuda_gpu(text),
                            rank=_first_rank(text))
    if name.startswith("CUBLAS_STATUS_"):
        return None  # "CUDA error: CUBLAS_STATUS_..." is read by the CUBLAS branch on a second search
    if match.group("nccl") and api_name is None:
        api_name = "nccl"
    kind = _kind_for(code)
    requested = _oom_bytes(text) if kind == "cuda_oom" else None
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": api_name,
                               "requested_bytes": requested}), gpu=_cuda_gpu(text), rank=_first_rank(text))


def _oom_bytes(text: str) -> int | None:
    return _first(_int(r"\((\d+)\s*bytes\)", text), _size(r"allocat\w*\s*(?:SIZE)", text),
                  _int(r"(\d+)\s*bytes", text))


def _cuda_or_cublas(text: str) -> Found | None:
    cublas = re.search(r"CUBLAS_STATUS_[A-Z_]+", text)
    if not cublas:
        return _cuda(text)
    found = _cuda(cublas.group(0) + " " + text[cublas.end():])
    api = _api(text)  # the call may come before the status: "CUDA runtime error in cublasSetWorkspace(...): CUBLAS_..."
    if found is None or "api" in found.attrs or api is None:
        return found
    return Found(found.kind, {**found.attrs, "api": api}, gpu=found.gpu, rank=_first_rank(text))


def _graph(text: str) -> Found:
    named = re.search(r"\b(cudaError(?:StreamCapture\w+|CapturedEvent|GraphExecUpdateFailure))\b", text)
    status = find_status(named.group(1)) if named else None
    return Found("cuda_graph_error", _clean({
        "error_name": named.group(1) if named else "CUDAGraphCaptureError",
        "error_code": status[1] if status else None, "api": _api(text)}))


CUDA_STATUS_FAMILIES: tuple[Family, ...] = (
    # ggml follows its "CUDA error: ..." with "  current device: N, in function ..." and the failed call
    Family("cuda_status", _c(r"CUDA [Ee]rror:|Cuda failure|cuda runtime error \(|THCudaCheck FAIL|CUDA_ERROR_[A-Z]"
                             r"|CUBLAS_STATUS_(?!SUCCESS)|CUDA error \d+|CUDA failure \d+:|Cuda Runtime \("
                             r"|CUDA runtime error in |HIP error:|initiali[sz]e CUDA:|CUDNN failure \d+:"
                             r"|CUDA failed with error \w|CUDA error executing \w+\("
                             r"|CUresult error\s+result=\d|(?:Cuda|cuBLAS) Error in [\w:]+: \d+ \("
                             r"|Unable to read CUDA capable devices\. Return status: \d"
                             r"|Internal: unable to create (?:CUDA )?stream: \w|Invalid error code \(\d+\)"
                             r"|CUDA initiali[sz]ation failure with error \d|(?:Runtime|Driver) API error \d+:"
                             r"|cudaError_t \d+ : \""),
           _cuda_or_cublas,
           # ... and GPUMD-style blocks: "CUDA Error:" then "File:", "Line:", "Error code: 700", "Error text: ..."
           complete=_c(r"current\s*device:\s*\d+[^\n]*\n\s*\S|CUDA runtime error in [:\w]+\([^\n]*\): "
                       r"|\n\s*Error text:\s*\S"),
           max_lines=5, joiner="\n",
           # (a host's logger may print its prefix on each: "[ERROR] ggml_extend.hpp:72   -   current device: 0")
           accept=_c(r"^\s*(?:current device: \d+|cu[A-Za-z]\w*\(.*\)\s*$)|^[a-z_][\w>.-]*\([^()\n]*\)\): "
                     r"|^\[[A-Z]+\s*\][^\n]{0,60}?\s-\s+(?:current device: \d+|cu[A-Za-z]\w*\(.*\)\s*$)"
                     r"|^\s*(?:File|Line|Error code|Error text):\s")),
    Family("cuda_graph", _c(r"during CUDA graph capture|cudaErrorStreamCapture|cudaErrorCapturedEvent"
                            r"|CUDA graph capture failed"), _graph),
)


# ---- graph capture and update ---------------------------------------------------------------------------

_CAPTURE_FAILED = r"[Cc]apture cuda graph failed:\s*"


def _capture_failed(families: tuple[Family, ...]):  # type: ignore[no-untyped-def]
    """SGLang/other servers' "Capture cuda graph failed: <error>": the error after the colon decides the
    family (an OOM is an OOM, a gloo timeout a timeout); an error no family knows is a graph error."""

    def extract(text: str) -> Found | None:
        rest = re.split(_CAPTURE_FAILED, text, maxsplit=1)[-1]
        for family in families:
            if family.name != "capture_failed" and family.starts(rest):
                found = family.extract(rest)
                if found is not None:
                    return found
        status = find_status(rest)
        name, code = status if status else (rest.split("\n", 1)[0].strip()[:200] or "CUDAGraphCaptureError", None)
        return Found("cuda_graph_error", _clean({"error_name": name, "error_code": code, "api": _api(rest)}))

    return extract


def _capture_generic(text: str) -> Found:
    """TensorRT's "The CUDA graph capture on the stream has failed", "Failed to end stream capture",
    `cudaStreamEndCapture ... failed`: the named status when the line has one."""
    status = find_status(text)
    name, code = status if status else ("CUDAGraphCaptureError", None)
    return Found(_kind_for(code) if code is not None else "cuda_graph_error",
                 _clean({"error_name": name, "error_code": code, "api": _api(text)}))


def _named_status(text: str) -> Found | None:
    """A status named outright: `Reason=cudaErrorIllegalAddress:...`, `... returned cudaErrorX(CUresult=910)`,
    `Program hit cudaErrorX (error 910)`, `parallel_for failed: cudaErrorIllegalAddress`, HIP's `hipErrorX`."""
    status = find_status(text)
    if status is None:
        return None
    name, code = status
    kind = _kind_for(code)
    requested = _first(_int(r"\((\d+)\s*bytes\)", text), _size(r"allocat\w*\s*(?:SIZE)", text)) \
        if kind == "cuda_oom" else None
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                               "requested_bytes": requested}), gpu=_cuda_gpu(text))


# ---- cuDNN, device-side assertions --------------------------------------------------------------------


def _cudnn(text: str) -> Found | None:
    # Caffe's CHECK names the expected status first: "Check failed: status == CUDNN_STATUS_SUCCESS (8 vs. 0)
    # CUDNN_STATUS_EXECUTION_FAILED" — the status is the first that is not SUCCESS
    match = re.search(r"\bCUDNN_STATUS_(?!SUCCESS\b)([A-Z_]+)", text)
    if not match:
        return None
    # cudnnStatus_t values differ between cuDNN 8 and 9 and the line does not print them: no error_code
    kind = "cuda_oom" if match.group(1) == "ALLOC_FAILED" else "cuda_error"
    return Found(kind, _clean({"error_name": match.group(0), "api": _api(text)}), gpu=_cuda_gpu(text))


def _cnmem(text: str) -> Found | None:
    """CNMeM's pool (Triton/FasterTransformer, Theano, Caffe): "Failed to finalize CUDA memory manager:
    CNMEM_STATUS_CUDA_ERROR"; OUT_OF_MEMORY is an OOM, CUDA_ERROR a CUDA error, the others are misuse."""
    match = re.search(r"\bCNMEM_STATUS_(OUT_OF_MEMORY|CUDA_ERROR)\b", text)
    if not match:
        return None
    return Found("cuda_oom" if match.group(1) == "OUT_OF_MEMORY" else "cuda_error",
                 {"error_name": match.group(0), "api": "cnmem"}, gpu=_cuda_gpu(text))


def _xla_stream(text: str) -> Found:
    """XLA's stream executor: "INTERNAL: Failed to complete all kernels launched on stream 0x...: stream did not
    block host until done; was already in an error state" (the CUDA error on that stream, unnamed)."""
    return Found("cuda_error", {"api": "stream"}, gpu=_cuda_gpu(text))


def _device_assert(text: str) -> Found:
    # ".../THCUNN/ClassNLLCriterion.cu:52: void kernel(...): block: [0,0,0], thread: [13,0,0] Assertion `t >= 0`
    # failed." — one line per failing thread; the echo check keeps the first
    return Found("cuda_error", {"error_name": "cudaErrorAssert", "error_code": 710})


# ---- out of memory ------------------------------------------------------------------------------------


def _kv_capacity(text: str) -> Found:
    """The KV cache or the request pool of a serving engine cannot hold the work: vLLM's "max seq len (N) is
    larger than the maximum number of tokens that can be stored in KV cache (M)", SGLang's "Not enough memory
    ... --mem-fraction-static", "Prefill/Decode out of memory. Try to lower your batch size. Try to allocate N
    tokens. Available tokens: M", "alloc_req_slots runs out of memory", TGI's "Not enough memory to handle N
    total tokens"."""
    return Found("cuda_oom", _clean({
        "requested_tokens": _first(_int(r"max\s*seq\s*len\s*\((\d+)\)", text),
                                   _int(r"[Tt]ry\s*to\s*allocate\s*(\d+)\s*tokens", text),
                                   _int(r"handle\s*(\d+)\s*(?:total\s*|prefill\s*)?tokens", text)),
        "available_tokens": _first(_int(r"stored\s*in\s*KV\s*cache\s*\((\d+)\)", text),
                                   _int(r"[Aa]vailable\s*tokens:\s*(\d+)", text)),
        "error_name": "InsufficientKVCacheMemory"}))


def _alloc_failed(text: str) -> Found:
    """llama.cpp/ggml ("allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory", "failed to
    allocate CUDA0 buffer of size N"), TensorRT ("Requested amount of GPU memory (N bytes) could not be
    allocated"), Triton ("Failed to allocate CUDA memory with byte size N on GPU 0"), ONNX Runtime's BFCArena
    ("Failed to allocate memory for requested buffer of size N"), TensorRT 10's builder ("OutOfMemory (Requested
    size was N bytes.)")."""
    requested = _first(_size(r"allocating\s*(?:SIZE)", text), _int(r"buffer\s*of\s*size\s*(\d+)", text),
                       _int(r"Requested\s*size\s*was\s*(\d+)\s*bytes", text),
                       _int(r"GPU\s*memory\s*\((\d+)\s*bytes\)", text), _int(r"byte\s*size\s*(\d+)", text))
    gpu = _first(_int(r"on\s*device\s*(\d+)", text), _int(r"\bCUDA(\d+)\s*buffer", text),
                 _int(r"on\s*GPU\s*(\d+)", text), _gpu_any(text))
    api = re.search(r"\b(cudaMalloc\w*)\b", text)
    return Found("cuda_oom", _clean({"requested_bytes": requested, "api": api.group(1) if api else None,
                                     "error_name": "cudaErrorMemoryAllocation", "error_code": 2}), gpu=gpu)


def _executor_memory(text: str) -> Found:
    """TensorRT-LLM: "Failed to initialize executor on rank 1: Executor creation failed due to insufficient GPU
    memory." (the component that could not be created follows)."""
    return Found("cuda_oom", {"error_name": "InsufficientGPUMemory"}, rank=_first_rank(text))


CUDA_FAMILIES_BEFORE: tuple[Family, ...] = (
    Family("cudnn_status", _c(r"\bCUDNN_STATUS_(?!SUCCESS)[A-Z]"), _cudnn),
    # a status stated as a result ("...: CNMEM_STATUS_CUDA_ERROR", "(CNMEM_STATUS_OUT_OF_MEMORY)"), not a list of names
    Family("cnmem_status", _c(r"(?:[:(]\s*|returned\s+)CNMEM_STATUS_(?:OUT_OF_MEMORY|CUDA_ERROR)\b(?!\s*,)"), _cnmem,
           structured=True),
    Family("xla_stream", _c(r"\bFailed to complete all kernels launched on stream\b"), _xla_stream, structured=True),
    Family("device_assert", _c(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `"), _device_assert),
    Family("kv_capacity", _c(r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV"
                             r" cache"
                             r"|Not enough memory\. Please try to increase --mem-fraction-static"
                             r"|Not enough memory to allocate KV cache|Not enough memory to handle \d+ [a-z ]*tokens"
                             r"|\w*Error: (?:Prefill|Decode) out of memory\. Try to lower your batch size"
                             r"|\w*Error: \w+_slots runs out of memory"), _kv_capacity,
           complete=_c(r"[Aa]vailable\s*tokens:\s*\d"), max_lines=3,
           accept=_c(r"^\s*(?:Try to allocate \d+ tokens|Avail?able tokens:)")),
    # "allocating N MiB on device 0: cudaMalloc failed" and the next line's "failed to allocate CUDA0 buffer of size"
    Family("alloc_failed", _c(r"cudaMalloc failed: out of memory|failed to allocate CUDA\d* buffer of size \d"
                              r"|Requested amount of GPU memory \(\d+ bytes\) could not be allocated"
                              r"|Failed to allocate CUDA memory with byte size \d"
                              # ONNX Runtime's arena (the CUDA provider's device memory)
                              r"|BFCArena::AllocateRawInternal(?:\(.{0,160}\))? Failed to allocate memory for "
                              r"requested buffer of size \d"
                              # ... and its signature at the end of a line that a table cell or a console wrapped
                              r"|BFCArena::AllocateRawInternal\(.{0,160}\)\s*$"
                              # TensorRT 10's builder: "Error Code 2: OutOfMemory (Requested size was N bytes.)"
                              r"|OutOfMemory \(Requested size was \d+ bytes"), _alloc_failed,
           complete=_c(r"failed to allocate CUDA\d* buffer of size \d|Requested size|could not be allocated|byte size"
                       r"|requested buffer of size"),
           max_lines=2, accept=_c(r"failed to allocate CUDA\d* buffer of size \d"
                                  r"|^\s*Failed to allocate memory for requested buffer of size \d")),
    Family("executor_memory", _c(r"Executor creation failed due to insufficient GPU memory"), _executor_memory),
)
def _cudnn_frontend(text: str) -> Found:
    message = text.split("[cudnn_frontend] Error:", 1)[-1].strip()
    # the message is the name (as "Capture cuda graph failed: <text>" is): the event schema has no free-text field here
    return Found("cuda_error", _clean({"api": "cudnn_frontend",
                                       "error_name": message.split(". For more", 1)[0].rstrip(".")[:200] or None}))


CUDA_FAMILIES_AFTER: tuple[Family, ...] = (
    Family("capture_generic", _c(r"CUDA graph capture on the stream has failed|[Ff]ailed to end stream capture"
                                 r"|cudaStreamEndCapture\b.{0,80}\bfailed|stream capture (?:failed|invalidated)"),
           _capture_generic),
    Family("cuda_named", _c(r"\b(?:cuda|hip)Error[A-Z]\w+"), _named_status),
    Family("cuda_phrase", _c(r"CUDA driver version is insufficient for CUDA runtime version|no CUDA-capable device is"
                             r" detected|an illegal memory access was encountered|device-side assert triggered"
                             r"|unspecified launch failure|uncorrectable ECC error encountered|operation would make "
                             r"the legacy stream depend on a capturing blocking stream"
                             r"|capturing stream has unjoined work"
                             r"|operation not permitted when stream is capturing"), _named_status),
    # C++ wrappers: "cudaGraphExecUpdate(...) failed with error the graph update was not performed ..."
    Family("cuda_call_failed", _c(r"\bcu[A-Za-z]\w*\(.*\) failed with error "), _named_status),
    # TransformerEngine's NVTE_CHECK_CUDNN_FE: "<file>.cu:227 in function operator(): cuDNN Error: [cudnn_frontend]
    # Error: No execution plans built successfully.." (the frontend's message; no cudnnStatus_t name)
    Family("cudnn_frontend", _c(r"cuDNN Error: \[cudnn_frontend\] Error: \S"), _cudnn_frontend),
)
