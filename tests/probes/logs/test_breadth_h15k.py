"""Session h15k's readers and look-alike rule (heldout22's misses): one behaviour each, on the formats of public
reports (numbers changed), plus the trigger-word swap they needed."""

from __future__ import annotations

from logprobe_helpers import events, one

from gpuslo.probes.logs.catalog import TRIGGER_WORDS


def test_the_cuda_samples_safe_call_check_states_the_status_by_number_and_text():
    """niessner/BundleFusion#77: cutil/helper_cuda's "file(line) : cudaSafeCall() Runtime API error N: <text>."."""
    found = one("Source/SiftGPU/ProgramCU.cu(1388) : cudaSafeCall() Runtime API error 700: an illegal memory access "
                "was encountered.")
    assert (found.kind, found.attrs["error_name"], found.attrs["error_code"]) == (
        "cuda_error", "cudaErrorIllegalAddress", 700)
    # the number alone decides a text the table lacks; an OOM by number is an OOM
    assert one("kernel.cu(12) : cudaSafeCall() Runtime API error 2: out of memory.").kind == "cuda_oom"
    assert b"API error" in TRIGGER_WORDS and b"CUFFT" not in TRIGGER_WORDS
    # a CUFFT status still reads through the word its line holds ("Error")
    assert one("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR").kind == "cuda_error"
    # prose naming the check is not one
    assert events("The sample wraps each call in cudaSafeCall, which prints a Runtime API error 700: and a text.") == []


def test_ggml_prints_cublas_status_strings_after_cuda_error_and_a_host_logger_prefixes_its_device_line():
    """leejet/stable-diffusion.cpp#1773: ggml inside another program's logger ("[ERROR] file:line - ...")."""
    found = one("[ERROR] ggml_extend.hpp:72   - CUDA error: the function failed to launch on the GPU\n"
                "[ERROR] ggml_extend.hpp:72   -   current device: 1, in function ggml_cuda_op_mul_mat_cublas at "
                "ggml/src/ggml-cuda/ggml-cuda.cu:1804\n"
                "[ERROR] ggml_extend.hpp:72   -   cublasSgemm_v2(ctx.cublas_handle(id), CUBLAS_OP_T, CUBLAS_OP_N, m, "
                "n, k, &alpha, a, k, b, k, &beta, c, m)")
    assert (found.kind, found.gpu, found.attrs["error_name"], found.attrs["error_code"]) == (
        "cuda_error", 1, "CUBLAS_STATUS_EXECUTION_FAILED", 13)


def test_gunrocks_location_names_the_gpu_it_failed_on():
    """gunrock/gunrock#250: "[file.cuh, 781 @ gpu 3] FullQueue_Core failed. (CUDA error 77: ...)" (CUDA 9's 77 is
    today's 700, cudaErrorIllegalAddress)."""
    found = one("[/opt/gunrock/app/enactor_loop.cuh, 781 @ gpu 3] FullQueue_Core failed. (CUDA error 77: an illegal "
                "memory access was encountered)")
    assert (found.kind, found.gpu, found.attrs["error_code"]) == ("cuda_error", 3, 700)


def test_a_cli_error_glued_to_the_models_streamed_chinese_output_is_a_log_line():
    """ollama/ollama#9247: the answer streams, then ollama's error follows on the same line with no separator."""
    found = one("勾股定理的内容是Error: an error was encountered while running the model: CUDA error: unspecified "
                "launch failure\n  current device: 2, in function ggml_backend_cuda_synchronize at ggml-cuda.cu:2317\n"
                "  cudaStreamSynchronize(cuda_ctx->stream())")
    assert (found.kind, found.gpu, found.attrs["error_name"]) == ("cuda_error", 2, "cudaErrorLaunchFailure")
    # a Chinese sentence that names the error with a space before it is still prose
    assert events("训练时报错 RuntimeError: CUDA error: unspecified launch failure 怎么解决") == []


def test_rays_re_raise_of_a_tasks_out_of_memory_error_is_an_oom_of_that_worker():
    """RootedTime/EasyR1#9: RayTaskError(OutOfMemoryError) at the driver, the worker's traceback elsewhere."""
    found = one("ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() "
                "(pid=20417, ip=10.1.7.7, actor_id=b2ba64f6, repr=<verl.single_controller.ray.base.WorkerDict object "
                "at 0x7b8aac2e25c0>)")
    assert (found.kind, found.pid, found.attrs["error_name"]) == ("cuda_oom", 20417, "OutOfMemoryError")
    # another exception class re-raised is not an OOM
    assert all(e.kind != "cuda_oom" for e in events(
        "ray.exceptions.RayTaskError(ValueError): ray::Runner.run() (pid=1, ip=10.1.7.7)"))


def test_nvidia_smis_detect_wording_of_the_device_handle_failure():
    """jamesstringer90/Easy-GPU-PV#276: "Unable to detect the device handle for GPU...: Unknown Error"."""
    found = one("Unable to detect the device handle for GPU0000:C1:00.0: Unknown Error")
    assert (found.kind, found.attrs["pci_bus"], found.attrs["fault"]) == ("gpu_fault", "0000:c1:00", "gpu_inaccessible")


def test_a_ray_re_raise_of_the_tasks_own_oom_is_the_same_incident():
    """A Ray driver's log holds the task's own OOM (its stderr, "(WorkerDict pid=N, ...)") and then the caller's
    re-raise, `RayTaskError(OutOfMemoryError)`, naming the class without its module: one incident, one event
    (RootedTime/EasyR1#9's format; the two were two root OOMs for one page)."""
    task = ("(WorkerDict pid=118848, ip=10.130.71.7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "12.47 GiB. GPU 0 has a total capacity of 79.11 GiB of which 8.85 GiB is free.\n")
    relay = ("Traceback (most recent call last):\n"
             '  File "/workspaces/EasyR1/verl/single_controller/ray/base.py", line 47, in func\n'
             "    output = ray.get(output)\n"
             "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() "
             "(pid=118848, ip=10.130.71.7, actor_id=b2ba64f62469495ea505301701000000)\n")
    found = events(task + relay)
    assert [(e.kind, e.pid, e.gpu, e.attrs["requested_bytes"]) for e in found] == [
        ("cuda_oom", 118848, 0, 13389560545)]
    # the re-raise alone is still the incident; another task's OOM (another pid) is another incident
    assert [e.labels["family"] for e in events(relay)] == ["ray_task_oom"]
    assert len(events(task + relay.replace("pid=118848", "pid=200"))) == 2


def test_a_check_that_prints_its_location_then_the_bare_cuda_text_is_that_error():
    """harnets/multiverse#3 (Madrona): "Error at <file>.cpp:N in <function>", then the CUDA error text alone."""
    found = one("Error at /src/madrona/src/mw/cuda_exec.cpp:1829 in GPUEngineState madrona::initEngineAndUserState("
                "uint32_t, void *)\nan illegal memory access was encountered")
    assert (found.kind, found.attrs["error_name"], found.attrs["error_code"]) == (
        "cuda_error", "cudaErrorIllegalAddress", 700)
    assert one("Error at kernels.cu:12\nout of memory").kind == "cuda_oom"
    # the same header over text that names no CUDA error is not an incident, nor is the header alone
    assert events("Error at config.cpp:88 in load()\nthe file settings.json was not found") == []
    assert events("Error at config.cpp:88 in load()") == []
