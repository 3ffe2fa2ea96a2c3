"""Training frameworks' own wordings (JAX/XLA, Megatron-LM, BigDL, c10d's store under ProcessGroupNCCL).

Each family reads a format, not one report's text:
- JAX's `jax_debug_nans`/`jax_debug_infs` checks raise "FloatingPointError: invalid value (nan) encountered in
  jit(f)" (also as "JaxStackTraceBeforeTransformation: FloatingPointError: ..." and for a primitive, "in mul"):
  a value of the computation became NaN or Inf (kind `loss_nonfinite`).
- Megatron-LM's iteration line counts the steps whose gradients were NaN ("number of nan iterations:   2 |");
  a count above zero is the run's loss going non-finite even when no loss is printed (Megatron-DeepSpeed prints
  no "lm loss" on such a step). A count of 0 is the ordinary line.
- A sentence-style trainer log that states its loss as non-finite ("Loss is Infinity." / "Loss is NaN.", BigDL's
  DistriOptimizer); "Loss is nan, stopping training" stays with families_loss.py.
- TensorFlow/XLA's status spelled "Resource exhausted: Failed to allocate request for 48.00MiB (50331648B) on device
  ordinal 0" (the PJRT client of jaxlib before the RESOURCE_EXHAUSTED spelling; "Resource exhausted: OOM when
  allocating" stays with TensorFlow's family), and XLA's "INTERNAL: Failed to allocate 98697216 bytes for new constant"
  (the device had no room for a compiled program's constants: an OOM).
- NCCL 2.0-2.2 (Horovod's era) WARNs without the word NCCL ("host:pid:tid [3] include/socket.h:194 WARN Call to recv
  failed : Connection reset by peer"), read as NCCL WARNs.
- ProcessGroupNCCL's bootstrap through the c10d store: "[3] is setting up NCCL communicator and retrieving
  ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: <why>". A timeout
  ("Timeout waiting for key: default_pg/0/0 after 1800000 ms") is the store's wait timing out (nccl_timeout, as
  families_nccl.py reads "Socket Timeout"); a peer that hung up ("Connection reset by peer", "Broken pipe",
  "Connection refused") is rank 0's store gone: ncclRemoteError, a cascade of whatever stopped rank 0.
- jaxlib's GPU kernels (XLA custom calls) check each cuBLAS/cuSOLVER/cuFFT call and raise "<file>:<line>: operation
  <call>(...) failed: <jaxlib's own status text>" ("cuBlas has not been initialized", "cuSolver execution failed",
  "cuFFT allocation failed"; jaxlib/gpu/gpu_kernel_helpers.cc): the library status of that call (an allocation
  failure is an OOM).
"""

from __future__ import annotations

import re

from gpuslo.probes.logs.families_cuda import cublas_found
from gpuslo.probes.logs.families_loss import _step, _value
from gpuslo.probes.logs.families_nccl import _warn
from gpuslo.probes.logs.families_oom import _xla_oom
from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _int

_JAX_NONFINITE = re.compile(r"FloatingPointError: invalid value \((nan|inf)\) encountered in (\S+)")


def _jax_nonfinite(text: str) -> Found | None:
    match = _JAX_NONFINITE.search(text)
    if not match:
        return None
    return Found("loss_nonfinite", _clean({"value": match.group(1), "metric": "computation",
                                           "detail": match.group(2).rstrip(".,;"),
                                           "error_name": "FloatingPointError"}))


def _nan_iterations(text: str) -> Found | None:
    count = _int(r"number of nan iterations:\s*(\d+)", text)
    if not count:
        return None
    return Found("loss_nonfinite", _clean({"value": "nan", "metric": "nan_iterations",
                                           "detail": f"{count} nan iterations", "step": _step(text)}))


def _loss_is(text: str) -> Found | None:
    match = re.search(r"\bLoss is (NaN|nan|-?Infinity|-?inf)\.", text)
    if not match:
        return None
    return Found("loss_nonfinite", _clean({"value": _value(match.group(1)), "metric": "loss",
                                           "step": _int(r"\[Iteration (\d+)\]", text)}))


_STORE_GET = (r"(\d+)\] is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId from \[\d+\] via c10d "
              r"key-value store by key '[^']*', but store->get\('[^']*'\) got error: ")


def _store_get(text: str) -> Found | None:
    match = re.search(_STORE_GET + r"(.*)", text)
    if not match:
        return None
    rank, why = int(match.group(1)), match.group(2)
    if re.search(r"[Tt]ime(?:d)? ?out", why):
        return Found("nccl_timeout", _clean({"op": "store:get", "timeout_ms": _int(r"after\s*(\d+)\s*ms", why)}),
                     rank=rank)
    return Found("nccl_error", {"error_name": "ncclRemoteError", "error_code": 6, "api": "store->get",
                                "detail": why.split(". ", 1)[0].strip()}, rank=rank)


# NCCL 2.0-2.2 (Horovod's era) printed WARN without the word NCCL: "host:pid:tid [3] include/socket.h:194 WARN Call to
# recv failed : Connection reset by peer"; the normaliser has taken the prefix (pid, GPU) off, the source location
# opens the text
_OLD_WARN = re.compile(r"^[\w./-]+\.(?:h|cc|cu|c|cpp):\d+ WARN (?=C)")


def _old_warn(text: str) -> Found | None:
    return _warn(_OLD_WARN.sub("NCCL WARN ", text, count=1))


# jaxlib's status texts (gpu_kernel_helpers.cc's ErrorString), less the library's name: the status and its number
_JAXLIB_STATUS: dict[str, dict[str, tuple[str, int]]] = {
    "cuBlas": {"has not been initialized": ("NOT_INITIALIZED", 1), "allocation failure": ("ALLOC_FAILED", 3),
               "invalid value error": ("INVALID_VALUE", 7), "architecture mismatch": ("ARCH_MISMATCH", 8),
               "mapping error": ("MAPPING_ERROR", 11), "execution failed": ("EXECUTION_FAILED", 13),
               "internal error": ("INTERNAL_ERROR", 14), "not supported error": ("NOT_SUPPORTED", 15),
               "license error": ("LICENSE_ERROR", 16)},
    "cuSolver": {"has not been initialized": ("NOT_INITIALIZED", 1), "allocation failed": ("ALLOC_FAILED", 2),
                 "invalid value error": ("INVALID_VALUE", 3), "architecture mismatch error": ("ARCH_MISMATCH", 4),
                 "mapping error": ("MAPPING_ERROR", 5), "execution failed": ("EXECUTION_FAILED", 6),
                 "internal error": ("INTERNAL_ERROR", 7), "not supported error": ("NOT_SUPPORTED", 9),
                 "zero pivot error": ("ZERO_PIVOT", 10)},
    "cuFFT": {"invalid plan": ("INVALID_PLAN", 1), "allocation failed": ("ALLOC_FAILED", 2),
              "invalid value": ("INVALID_VALUE", 4), "internal error": ("INTERNAL_ERROR", 5),
              "execution failed": ("EXEC_FAILED", 6), "setup failed": ("SETUP_FAILED", 7),
              "invalid size": ("INVALID_SIZE", 8), "invalid device": ("INVALID_DEVICE", 11)},
}
_JAXLIB_PREFIX = {"cuBlas": "CUBLAS_STATUS_", "cuSolver": "CUSOLVER_STATUS_", "cuFFT": "CUFFT_"}
_JAXLIB = re.compile(r"\boperation (?P<api>[A-Za-z_]\w*)\s*\(.*\) failed: (?P<lib>cuBlas|cuSolver|cuFFT) "
                     r"(?P<text>[^\n]+)")


def _jaxlib_status(text: str) -> Found | None:
    match = _JAXLIB.search(text)
    if not match:
        return None
    lib, api = match.group("lib"), match.group("api")
    status = _JAXLIB_STATUS[lib].get(match.group("text").strip().rstrip(".").strip())
    if lib == "cuBlas":
        return cublas_found(status[0] if status else None, status[1] if status else None, api)
    name = _JAXLIB_PREFIX[lib] + status[0] if status else None
    kind = "cuda_oom" if status and status[0] == "ALLOC_FAILED" else "cuda_error"
    return Found(kind, _clean({"error_name": name, "error_code": status[1] if status else None, "api": api}))


TRAINING_FAMILIES: tuple[Family, ...] = (
    Family("jax_nonfinite", _JAX_NONFINITE, _jax_nonfinite),
    Family("nccl_warn_unprefixed", _OLD_WARN, _old_warn),
    Family("nan_iterations", _c(r"number of nan iterations:\s*[1-9]"), _nan_iterations),
    Family("loss_is_nonfinite", _c(r"\bLoss is (?:NaN|nan|-?Infinity|-?inf)\.(?=\s|$)"), _loss_is),
    Family("xla_resource_exhausted", _c(r"Resource exhausted: (?:[Ff]ailed to allocate|[Oo]ut of memory)"), _xla_oom),
    Family("xla_constant_alloc", _c(r"INTERNAL: Failed to allocate \d+ bytes for new constant"), _xla_oom),
    # "Socket Timeout" stays with families_nccl.py's store_timeout
    Family("store_get_failed", _c(_STORE_GET + r"(?!Socket Timeout)"), _store_get),
    Family("jaxlib_library_status", _c(r"\) failed: (?:cuBlas|cuSolver|cuFFT) [a-z]"), _jaxlib_status),
)
# the literals every match of each start holds (catalog.py's _NEEDS)
NEEDS: dict[str, tuple[str, ...]] = {
    "jax_nonfinite": ("FloatingPointError: invalid value",), "nccl_warn_unprefixed": (" WARN C",),
    "nan_iterations": ("number of nan iterations",),
    "loss_is_nonfinite": ("Loss is ",), "xla_resource_exhausted": ("Resource exhausted: ",),
    "xla_constant_alloc": ("bytes for new constant",),
    "store_get_failed": ("is setting up NCCL communicator",),
    "jaxlib_library_status": (") failed: cuBlas ", ") failed: cuSolver ", ") failed: cuFFT "),
}
