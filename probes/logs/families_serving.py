"""CUDA failures as serving engines and GPU tools print them, in formats the status families do not read:

- the FasterTransformer-lineage check macro (`[FT][ERROR]`, LMDeploy's `[TM][ERROR]`, TensorRT-LLM's
  `[TensorRT-LLM][ERROR]`): `CUDA runtime error: <cudaGetErrorString text> <file>:<line>`, whatever the text
  (the status families read only its OOM and `in <api>(...)` forms);
- ggml's abort (llama.cpp, ollama, whisper.cpp): `<path>/ggml-cuda.cu:<line>: CUDA error`, alone when the
  process dies before the detail (ollama's runner reports only that line) or followed by `CUDA error: <text>`,
  `current device: N, in function ...` and the failed call, which the block takes as one incident;
- a C++ throw that names its source location before a cudaGetErrorString text and nothing else:
  `Error (gpu_burn-drv.cpp:298): system not yet initialized`, `foo.cu:88: an illegal memory access was
  encountered`: the location says a program's check printed it, the exact text says which CUDA status.

Each family returns the status's own kind (an out-of-memory status is `cuda_oom`).
"""

from __future__ import annotations

import re

from gpuslo.probes.logs.families_cuda import _api, _cuda_gpu, _cuda_or_cublas, _kind_for, _oom_bytes
from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _first_rank
from gpuslo.probes.logs.units import CUDA_ERRORS, cuda_status

# cudaGetErrorString texts that units.CUDA_ERRORS does not hold (kept here, read only by these families)
_MORE_STATUSES: dict[str, tuple[str, int]] = {
    "api call is not supported in the installed cuda driver": ("cudaErrorCallRequiresNewerDriver", 36),
    "initialization error": ("cudaErrorInitializationError", 3),
    "driver shutting down": ("cudaErrorCudartUnloading", 4),
    "invalid argument": ("cudaErrorInvalidValue", 1),
}


def _status_of(message: str) -> tuple[str, int | None]:
    """The (name, code) of a cudaGetErrorString text; an unknown text is its own name (code None)."""
    cleaned = message.strip().rstrip(".").strip()
    more = _MORE_STATUSES.get(cleaned.lower())
    if more:
        return more
    return cuda_status(cleaned)


def _found(name: str, code: int | None, text: str) -> Found:
    kind = _kind_for(code)
    return Found(kind, _clean({"error_name": name, "error_code": code, "api": _api(text),
                               "requested_bytes": _oom_bytes(text) if kind == "cuda_oom" else None}),
                 gpu=_cuda_gpu(text), rank=_first_rank(text))


# ---- the FasterTransformer-lineage macro -----------------------------------------------------------------

_FT_RUNTIME = _c(r"\[[A-Za-z][\w-]{0,24}\]\[ERROR\] CUDA runtime error: ")
# the location the macro appends: " /path/file.cu:32", " C:\\path\\file.h:233", " (/app/x.cpp:48)"
_FT_WHERE = re.compile(r"\s+\(?(?:[A-Za-z]:\\|/|\.\.?/)?[\w./\\-]*\.(?:cu|cuh|cc|cpp|c|h|hpp):\d+\)?\s*$")


def _ft_runtime(text: str) -> Found | None:
    line = text.split("\n", 1)[0]
    match = _FT_RUNTIME.search(line)
    assert match is not None
    message = _FT_WHERE.sub("", line[match.end():]).strip()
    if not message:
        return None
    name, code = _status_of(message)
    return _found(name, code, line)


# ---- ggml's abort ---------------------------------------------------------------------------------------

# the whole path is the start, so the words of a path are not read as a sentence in front of it
_GGML_ABORT = _c(r"(?<![\w.\\/-])(?:[A-Za-z]:)?[\\/]?(?:[\w.-]+[\\/])*ggml-cuda\.cu:\d+: CUDA error\b(?!:)")


def _ggml_abort(text: str) -> Found | None:
    """The abort line, and the detail lines the block took: the detail decides the status (as the status family
    reads it); without one the line says only that a CUDA call failed."""
    rest = text.split("\n", 1)[1] if "\n" in text else ""
    if rest.strip():
        found = _cuda_or_cublas(rest)
        if found is not None:
            return found
    return Found("cuda_error", {}, gpu=_cuda_gpu(text))


# ---- a source location, then a cudaGetErrorString text and nothing more ------------------------------------

_MIN_WORDS = 3  # "misaligned address" and "unknown error" are too short to tell a CUDA status by their text
_TEXTS = sorted({text.rstrip(".") for text in (*CUDA_ERRORS, *_MORE_STATUSES) if len(text.split()) >= _MIN_WORDS},
                key=len, reverse=True)
# the location, then one of those texts and the end of the line: the start matches only what the reader reads,
# so a location before any other message ("device_helpers.cuh:414: Memory allocation error on worker 0: ...")
# stays for the families after this one
_LOCATED = _c(r"(?<![\w./\\-])[\w./\\-]+\.(?:cu|cuh|cc|cpp|c|h|hpp):\d+\)?:\s+(?i:" + "|".join(map(re.escape, _TEXTS))
              + r")\.?\s*$")
_LOCATION = re.compile(r"\.(?:cu|cuh|cc|cpp|c|h|hpp):\d+\)?:\s+")


def _located(text: str) -> Found | None:
    line = text.split("\n", 1)[0]
    match = _LOCATED.search(line)
    assert match is not None
    where = _LOCATION.search(line, match.start())
    assert where is not None
    name, code = _status_of(line[where.end():])
    return _found(name, code, line)


SERVING_FAMILIES: tuple[Family, ...] = (
    Family("ft_runtime_error", _FT_RUNTIME, _ft_runtime),
    # complete at the device line's next line (the failed call), as the status family's block does
    Family("ggml_cuda_abort", _GGML_ABORT, _ggml_abort,
           complete=_c(r"current\s*device:\s*\d+[^\n]*\n\s*\S"), max_lines=4, joiner="\n",
           accept=_c(r"^\s*(?:CUDA error: |current device: \d+|cu[A-Za-z]\w*\(.*\)\s*$)")),
    Family("located_cuda_text", _LOCATED, _located),
)
# literals every match of each start contains (catalog.py's `needs`)
NEEDS: dict[str, tuple[str, ...]] = {
    "ft_runtime_error": ("][ERROR] CUDA runtime error: ",),
    "ggml_cuda_abort": ("ggml-cuda.cu:",),
    # the texts' heads, not the locations (glog prints "file.cc:399]" on every line): the regex runs only on a
    # line that holds one of the texts it ends with
    "located_cuda_text": tuple(sorted({t[:12] for t in _TEXTS} | {t.lower()[:12] for t in _TEXTS})),
}
__all__ = ["NEEDS", "SERVING_FAMILIES"]
