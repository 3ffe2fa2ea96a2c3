"""Session h15q's slice (heldout28): the core families as public bug reports paste them; the three wordings the first
run missed, the issue summary it read as an incident, and the formats it read that nothing pinned (numbers changed)."""

from __future__ import annotations

from logprobe_helpers import events, one


def test_kaldi_cu_safe_call_names_the_status_by_its_text():
    """kaldi-asr/kaldi#2636: Kaldi's CU_SAFE_CALL prints `cudaError_t N : "<text>" returned from '<call>'`; N is the
    toolkit's number of the time (4 before CUDA 10.1 renumbered unspecified launch failure 719), the text decides."""
    found = one('ERROR (nnet3-train[5.4]:CopyToVec():cu-vector.cc:899) cudaError_t 4 : "unspecified launch failure" '
                "returned from 'cudaMemcpy(dst->Data(), this->data_, sizeof(Real) * dim_, cudaMemcpyDeviceToHost)'")
    assert (found.kind, found.attrs["error_name"], found.attrs["error_code"]) == (
        "cuda_error", "cudaErrorLaunchFailure", 719)
    oom = one("ERROR (nnet3-chain-train[5.5]:MallocPitchInternal():cu-allocator.cc:122) cudaError_t 2 : "
              "\"out of memory\" returned from 'cudaMallocPitch(&ans, pitch, row_bytes, num_rows)'")
    assert oom.kind == "cuda_oom"
    # a sentence that quotes the type is not Kaldi's line
    assert events('The cudaError_t value is what "cudaGetLastError" returns when a kernel launch failed.') == []


def test_a_training_step_that_raises_loss_is_nan():
    """jstmn/ikflow#23: a Lightning module's own check, `raise ValueError("loss is nan")`: the exception line reads,
    the traceback's source line above it does not."""
    found = one("ValueError: loss is nan")
    assert (found.kind, found.attrs["value"], found.attrs["error_name"]) == ("loss_nonfinite", "nan", "ValueError")
    assert one("RuntimeError: The loss is inf").attrs["value"] == "inf"
    assert events('    raise ValueError("loss is nan")') == []
    assert events("ValueError: loss is nan or the learning rate is too high, see the docs") == []  # not its end


def test_a_chinese_error_label_glued_to_the_exception_reads():
    """wyf3/llm_related#29: "报错" ("error:") glued to vLLM's ValueError is a label like a colon; a sentence glued
    to a class name (heldout21b's "显存一直提示torch.AcceleratorError: ...", "VRAM keeps saying") stays prose."""
    kv = one("报错ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
             "initializing the engine.")
    assert (kv.kind, kv.attrs["error_name"]) == ("cuda_oom", "InsufficientKVCacheMemory")
    illegal = one("训练时出错RuntimeError: CUDA error: an illegal memory access was encountered")
    assert illegal.attrs["error_code"] == 700
    assert events("运行时报错 RuntimeError: CUDA error: out of memory 怎么解决") == []  # a question goes on after it
    assert events("4070GPU 12G显存一直提示torch.AcceleratorError: CUDA error: out of memory") == []


def test_a_present_tense_sentence_that_introduces_the_paste_is_prose():
    """vllm-project/vllm#51279: "Job `PyTorch Fullgraph` fails during CUDA graph capture at engine startup:" fired the
    graph family (its start is the phrase "during CUDA graph capture"); the pasted error below it is the incident."""
    assert events("Job `PyTorch Fullgraph` fails during CUDA graph capture at engine startup:") == []
    assert events("The server crashes during CUDA graph capture:") == []
    pasted = one("torch.AcceleratorError: CUDA error: operation failed due to a previous error during capture\n"
                 "Search for `cudaErrorStreamCaptureInvalidated' ...")
    assert (pasted.kind, pasted.attrs["error_code"]) == ("cuda_graph_error", 901)
    # a program's line in the past tense, or with a logger's structure, still reads
    assert one("RuntimeError: model forward failed during CUDA graph capture").kind == "cuda_graph_error"


def test_formats_the_first_run_read_stay_read():
    """Pinned from heldout28's first run: PyTorch 2.6+'s dump signal (OpenRLHF#1126), NCCL behind mpirun's timestamp
    and rank tag (nccl#230) and a markdown blockquote with autolinked names (nccl#1710), Xid in `dmesg -T`
    (TensorRT-LLM#15610), a fence glued to its first line (vllm#5901), MatConvNet's wrapped cuDNN status
    (matconvnet#1210), a retyped launch failure (CRNN#137), an mmengine line whose grad_norm turned nan (xtuner#187)."""
    dump = one("[rank2]:[E903 07:41:12.204417760 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 2] "
               "Received a dump signal due to a collective timeout from  rank 6 and we will try our best to dump the "
               "debug info. Last enqueued NCCL work: 381204, last completed NCCL work: 381203.")
    assert (dump.kind, dump.rank, dump.attrs["last_completed_seq"]) == ("nccl_timeout", 2, 381203)
    ib = one("2019-06-02T16:13:44.884Z: [1,12]<stdout>:container-e275-01-000057:1815:1864 [0] transport/net_ib.cu:80 "
             "NCCL WARN NET/IB : Got async event : local catastrophic error")
    assert (ib.kind, ib.rank, ib.pid, ib.attrs["error_name"]) == ("nccl_error", 12, 1815, "ncclSystemError")
    quoted = one("> node023:10522:10611 [0] transport/[net_ib.cc:1909](http://net_ib.cc:1909/) NCCL WARN NET/IB : Got "
                 "completion from peer [10.1.3.201](http://10.1.3.201/)<34108> with status=9 opcode=0 len=0 vendor err "
                 "138 (Send)")
    assert (quoted.kind, quoted.attrs["error_name"]) == ("nccl_error", "ncclRemoteError")
    xid = one("[Wed Jun 24 16:02:51 2026] NVRM: Xid (PCI:0000:70:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 1, "
              "SM 1): MMU Fault")
    assert (xid.kind, xid.attrs["xid"], xid.attrs["pci_bus"]) == ("gpu_xid", 13, "0000:70:00")
    glued = one("```[97012.114077] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics "
                "Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4")
    assert (glued.kind, glued.attrs["pci_bus"]) == ("gpu_xid", "0000:43:00")
    cudnn = one('forward: cuDNN error [cudnn:"../matconvnet/matlab/src/bits/impl/nnconv_cudnn.cu":83\n'
                "(CUDNN_STATUS_INTERNAL_ERROR)]")
    assert (cudnn.kind, cudnn.attrs["error_name"]) == ("cuda_error", "CUDNN_STATUS_INTERNAL_ERROR")
    assert one("RuntimeError:cuda error:unspecified launch failure").attrs["error_code"] == 719
    nan = one("10/30 22:19:57 - mmengine - INFO - Epoch(train) [1][240/735]  lr: 1.9813e-04  eta: 2:44:49  time: "
              "2.8874  data_time: 0.0042  memory: 10762  loss: 2.5128  grad_norm: nan")
    assert (nan.kind, nan.attrs["metric"], nan.attrs["value"]) == ("loss_nonfinite", "grad_norm", "nan")


def test_heldout28b_misses_cudnn_frontend_xgboost_nccl_and_a_command_line_before_the_label():
    """heldout28b (collected after the tuning above) missed three: TransformerEngine's cuDNN-frontend check
    (TransformerEngine#651), XGBoost's "NCCL failure :<text>" (dask-cuda#639), and "报错" after a command line whose
    words counted as a sentence (HuatuoGPT#50)."""
    te = one("/opt/te/transformer_engine/common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu:227 in function "
             "operator(): cuDNN Error: [cudnn_frontend] Error: No execution plans built successfully.. For more "
             "information, enable cuDNN error logging by setting CUDNN_LOGERR_DBG=1 and CUDNN_LOGDEST_DBG=stderr.")
    assert (te.kind, te.attrs["api"], te.attrs["error_name"]) == (
        "cuda_error", "cudnn_frontend", "No execution plans built successfully")
    xgb = one("Exception: XGBoostError('[09:41:27] /workspace/xgboost/src/tree/updater_gpu_hist.cu:794: Exception in "
              "gpu_hist: NCCL failure :unhandled system error /workspace/xgboost/src/common/device_helpers.cu(67)')")
    assert (xgb.kind, xgb.attrs["error_name"], xgb.attrs["error_code"]) == ("nccl_error", "ncclSystemError", 2)
    oom = one("远程服务器上执行python demo.py --model-name $model_dir报错torch.cuda.OutOfMemoryError: CUDA out of "
              "memory. Tried to allocate 270.00 MiB. GPU 。")
    assert (oom.kind, oom.attrs["requested_bytes"]) == ("cuda_oom", 270 * 2**20)
    # the sentence about a frontend error, and one that asks about the label's paste, stay prose
    assert events("How to debug tex.fused_attn_bwd getting a cuDNN frontend error with no informative message?") == []
    assert events("运行时报错 RuntimeError: CUDA error: out of memory 怎么解决") == []
