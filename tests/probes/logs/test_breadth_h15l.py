"""Session h15l's readers (heldout23's misses and the known gaps of the previous stop): one behaviour each, on the
formats of public reports (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_cublas_alloc_failed_by_name_is_an_oom_as_its_text_and_number_are():
    """The named status after "CUDA error:" reads as the text and number forms of the same status do."""
    named = one("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    assert (named.kind, named.attrs["error_name"], named.attrs["error_code"]) == (
        "cuda_oom", "CUBLAS_STATUS_ALLOC_FAILED", 3)
    # another named status stays a CUDA error
    other = one("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle)`")
    assert (other.kind, other.attrs["error_code"]) == ("cuda_error", 13)


def test_cnmem_pool_statuses_are_an_oom_and_a_cuda_error_and_a_list_of_names_is_not():
    """Triton/FasterTransformer's "Failed to finalize CUDA memory manager: CNMEM_STATUS_CUDA_ERROR" (heldout22b's miss)
    and CNMeM's OUT_OF_MEMORY; Theano/Theano#3198's header comment listing the statuses gives nothing."""
    error = one("E0610 10:42:07.118230 1 cuda_memory_manager.cc:57] Failed to finalize CUDA memory manager: "
                "CNMEM_STATUS_CUDA_ERROR")
    assert (error.kind, error.attrs["error_name"], error.attrs["api"]) == (
        "cuda_error", "CNMEM_STATUS_CUDA_ERROR", "cnmem")
    oom = one("F0301 09:12:44.508112 4411 gpu_memory.cpp:108] Check failed: error == CNMEM_STATUS_SUCCESS (1 vs. 0) "
              "cnmemMalloc returned CNMEM_STATUS_OUT_OF_MEMORY")
    assert (oom.kind, oom.attrs["error_name"]) == ("cuda_oom", "CNMEM_STATUS_OUT_OF_MEMORY")
    assert events(" * CNMEM_STATUS_CUDA_ERROR,       if an error happens in one of the CUDA functions.\n"
                  " * CNMEM_STATUS_OUT_OF_MEMORY,   if the pool has no room left.") == []


def test_caffes_check_names_success_first_and_the_status_after_it():
    """BVLC/caffe#2197: "Check failed: status == CUDNN_STATUS_SUCCESS (8 vs. 0)  CUDNN_STATUS_EXECUTION_FAILED"."""
    found = one("F0325 10:14:52.331207 28841 cudnn_conv_layer.cu:65] Check failed: status == CUDNN_STATUS_SUCCESS "
                "(8 vs. 0)  CUDNN_STATUS_EXECUTION_FAILED")
    assert (found.kind, found.attrs["error_name"]) == ("cuda_error", "CUDNN_STATUS_EXECUTION_FAILED")
    assert events("F0325 10:14:52.331207 28841 net.cpp:65] all layers returned CUDNN_STATUS_SUCCESS") == []


def test_xlas_stream_already_in_an_error_state_is_a_cuda_error():
    """jax-ml/jax#13951: XLA's "Failed to complete all kernels launched on stream 0x...: ... already in an error
    state"."""
    found = one("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to complete all kernels launched on stream "
                "0x55e1a9c03f70: stream did not block host until done; was already in an error state")
    assert (found.kind, found.attrs["api"]) == ("cuda_error", "stream")


def test_a_ray_relay_printed_before_the_workers_own_error_is_one_incident():
    """The re-raise first, then the worker's torch OOM (Ray flushes the driver's traceback before the worker's
    stderr): one event, the relay's; another worker's OOM after the relay is another incident."""
    relay = ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_compute_log_prob() "
             "(pid=31207, ip=10.4.2.9, actor_id=7c1f2e)\n")
    task = ("(WorkerDict pid=31207, ip=10.4.2.9) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "3.25 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.02 GiB is free.\n")
    found = events(relay + task)
    assert [(e.kind, e.pid, e.labels["family"]) for e in found] == [("cuda_oom", 31207, "ray_task_oom")]
    assert len(events(relay + task.replace("pid=31207", "pid=4400"))) == 2
    # two relays of two tasks stay two incidents
    assert len(events(relay + relay.replace("pid=31207", "pid=4400"))) == 2


def test_nvidia_smi_lists_a_lost_device_handle_with_a_lower_case_gpu():
    """NordicHPC/sonar#72 (heldout23b's miss): `nvidia-smi -L` prints "for gpu <bdf>: Unknown Error"."""
    found = one("Unable to determine the device handle for gpu 0000:3b:00.0: Unknown Error")
    assert (found.kind, found.attrs["pci_bus"]) == ("gpu_fault", "0000:3b:00")


def test_a_page_heading_that_quotes_the_message_and_explains_it_after_an_em_dash_is_prose():
    """deadends.dev's page (heldout23b's false positive): the message, then "— This error can be fixed ..."."""
    assert events("RuntimeError: NCCL communicator was aborted on rank 0. Original reason for aborting was: Timeout "
                  "at NCCL sequence 42RESOLVABLE \u2014 This error can be fixed in most cases.") == []
    # the same message without the explanation is the incident; a dash with a word or two after it still reads
    assert one("RuntimeError: NCCL communicator was aborted on rank 0. Original reason for aborting was: Timeout "
               "at NCCL sequence 42").kind == "nccl_error"
    assert one("RuntimeError: CUDA error: out of memory \u2014 rank 3").kind == "cuda_oom"
