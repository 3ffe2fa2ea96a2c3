"""Session h15i's readers and look-alike rules (training frameworks): one behaviour each, on the formats of public
reports (numbers changed), and the root/cascade reading of a multi-rank excerpt that joins them."""

from __future__ import annotations

from logprobe_helpers import READ_TIME, events, one

from gpuslo.engine.cascades import analyze_cascade
from gpuslo.probes.logs.catalog import TRIGGER_WORDS
from gpuslo.probes.logs.parser import LogParser, ParserSettings


def test_jax_debug_nans_and_infs_name_the_value_and_the_computation():
    """jax-ml/jax#25299, #25519: the check's FloatingPointError, bare or behind JaxStackTraceBeforeTransformation."""
    found = one("FloatingPointError: invalid value (nan) encountered in jit(train_step)")
    assert (found.kind, found.attrs["value"], found.attrs["detail"]) == ("loss_nonfinite", "nan", "jit(train_step)")
    assert one("jax._src.source_info_util.JaxStackTraceBeforeTransformation: FloatingPointError: invalid value (inf) "
               "encountered in mul").attrs["value"] == "inf"
    # numpy's own divide-by-zero warning in a code comment is not the JAX check
    assert events("np.divide(0, 0)  # FloatingPointError: divide by zero encountered in divide") == []


def test_megatrons_nan_iteration_counter_counts_only_above_zero():
    """Megatron's iteration line: "number of nan iterations:   2 |" is an incident; the everyday 0 is not."""
    line = (" iteration      {step}/   10000 | consumed samples:         7680 | elapsed time per iteration (ms): "
            "1532.4 | learning rate: 1.500E-05 | loss scale: 1.0 | number of skipped iterations:   {n} | number of nan "
            "iterations:   {n} |")
    found = one(line.format(step=120, n=2))
    assert (found.kind, found.attrs["detail"], found.attrs["step"]) == ("loss_nonfinite", "2 nan iterations", 120)
    assert events(line.format(step=121, n=0)) == []


def test_a_sentence_style_trainer_log_that_states_its_loss_infinite():
    """BigDL's DistriOptimizer (intel/ipex-llm#1486): "... Loss is Infinity. Current learning rate is ..."."""
    line = ("2017-08-20 16:11:46 INFO  DistriOptimizer$:295 - [Epoch 64 740096/1281167][Iteration {}] Train 1792 in "
            "4.0seconds. Throughput is 447.2 records/second. Loss is {}. Current learning rate is 0.046.")
    found = one(line.format(45459, "Infinity"))
    assert (found.attrs["value"], found.attrs["step"]) == ("inf", 45459)
    assert events(line.format(45458, "1.2645824")) == []


def test_the_old_xla_resource_exhausted_spelling_is_an_oom_with_its_bytes():
    """kingoflolz/mesh-transformer-jax#90: PJRT's "Resource exhausted: Failed to allocate request for ... (NB)"."""
    found = one("2021-08-12 10:19:56.549710: E external/org_tensorflow/tensorflow/compiler/xla/pjrt/"
                "pjrt_stream_executor_client.cc:1981] Execution of replica 0 failed: Resource exhausted: Failed to "
                "allocate request for 96.00MiB (100663296B) on device ordinal 1")
    assert (found.kind, found.attrs["requested_bytes"], found.gpu) == ("cuda_oom", 100663296, 1)
    # TensorFlow's "Resource exhausted: OOM when allocating tensor with shape[...]" keeps its own family (and shape)
    tf = one("W tensorflow/core/framework/op_kernel.cc:1318] OP_REQUIRES failed at transpose_op.cc:199 : Resource "
             "exhausted: OOM when allocating tensor with shape[2,480,640,66] and type float on "
             "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
    assert tf.labels["family"] == "tf_oom"
    # octo-models/octo#22: no room for a compiled program's constants
    constant = one("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 83886080 bytes for new constant")
    assert (constant.kind, constant.attrs["requested_bytes"]) == ("cuda_oom", 83886080)
    # the word took SXid's place: every SXid line still holds "Xid"
    assert b"Resource exhausted" in TRIGGER_WORDS and b"SXid" not in TRIGGER_WORDS and b"Xid" in TRIGGER_WORDS
    assert one("nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 12028, Non-fatal, Link 55 egress non-posted PRIV error "
               "(First)").kind == "gpu_fault"


def test_a_store_get_that_failed_while_setting_up_the_communicator():
    """hiyouga/LlamaFactory#2135, NVIDIA/nccl#708: a peer that hung up is ncclRemoteError (a cascade of rank 0's
    end); a wait that timed out is the store's timeout with its milliseconds; "Socket Timeout" stays as it was."""
    head = ("RuntimeError: [{}] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d "
            "key-value store by key '0', but store->get('0') got error: ")
    reset = one(head.format(3) + "Connection reset by peer. This may indicate a possible application crash on rank 0 "
                "or a network set up issue.")
    assert (reset.kind, reset.rank, reset.attrs["error_name"], reset.labels["role"]) == (
        "nccl_error", 3, "ncclRemoteError", "cascade")
    waited = one(head.format(1) + "Timeout waiting for key: default_pg/0/0 after 1800000 ms")
    assert (waited.kind, waited.rank, waited.attrs["timeout_ms"]) == ("nccl_timeout", 1, 1800000)
    assert one(head.format(2) + "Socket Timeout").labels["family"] == "store_timeout"


def test_cublas_get_status_string_wordings_in_transformer_engine():
    """modelscope/ms-swift#5694 and NVIDIA/TransformerEngine#376: "cuBLAS Error:"/"CUBLAS Error:" + the status text."""
    assert one("megatron.core.utils: /TransformerEngine/transformer_engine/common/gemm/cublaslt.cu:412 in function "
               "cublas_gemm: cuBLAS Error: an unsupported value or parameter was passed to the function"
               ).attrs["error_name"] == "CUBLAS_STATUS_INVALID_VALUE"
    assert one("RuntimeError: /tmp/te/transformer_engine/common/include/transformer_engine/logging.h:38 in function "
               "check_cublas_: CUBLAS Error: the requested functionality is not supported"
               ).attrs["error_name"] == "CUBLAS_STATUS_NOT_SUPPORTED"


def test_verls_dash_separated_metric_dump_prints_a_nan_loss():
    """verl-project/verl#498: "step:1 - critic/kl:-0.000 - critic/vf_loss:nan - ..." is a record, not a sentence."""
    found = one("step:7 - critic/kl:-0.000 - critic/kl_coeff:0.040 - critic/vf_loss:nan - critic/vf_clipfrac:0.000")
    assert (found.attrs["metric"], found.attrs["step"]) == ("vf_loss", 7)
    assert one("02:31:56: train iter: 100 loss_net: nan loss_scale: 785.4200 norm: nan").attrs["metric"] == "loss_net"


def test_a_nan_metric_inside_a_sentence_is_prose():
    """Zielon/INSTA#17's title: after the value comes a sentence's words, not a record's next key or separator."""
    assert events("Getting loss = nan after some iterations") == []
    assert one("Epoch 3: 45%|####5     | 451/1000 [12:01<14:38, loss=nan, v_num=2]").attrs["metric"] == "loss"


def test_an_exception_quoted_after_whole_sentences_is_prose():
    """microsoft/deepspeed#5426: "..., and meet the underflow issues. Exception: Current loss scale ..." """
    assert events("I'm recently runing code in deepspeed, and meet the underflow issues. Exception: Current loss "
                  "scale already at minimum - cannot decrease scale anymore. Exiting run.") == []
    assert one("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
               ).attrs["metric"] == "loss_scale"


def test_a_log_record_quoted_inside_a_sentence_that_goes_on_is_prose():
    """NVIDIA/Megatron-LM#1207 (heldout20's first-run false positive): a backticked record mid-sentence; a paste
    that opens a code span at a record and does not go on as a sentence still reads."""
    record = ("[rank0]:[E1010 11:50:05.315197062 ProcessGroupNCCL.cpp:565] [Rank 0] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
              "for 600013 milliseconds before timing out.")
    assert events(f"I encountered a `{record}`, when training a LLaVA architecture model with the pipeline parallel "
                  "size set to 2.") == []
    assert one(f"error log `{record}`").kind == "nccl_timeout"


def test_a_nan_gradient_on_one_rank_is_the_root_of_the_store_and_watchdog_cascades():
    """A multi-rank excerpt put together from the formats above (Megatron rank 0's NaN grad norm, then rank 3's
    communicator setup losing rank 0's store and rank 1's watchdog timeout): the correlation names the NaN."""
    text = ("[rank0]: AssertionError: Rank 0: found NaN in local grad norm in backward pass before data-parallel "
            "communication collective. Device: 0, node: node-1\n"
            "[rank3]: RuntimeError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d "
            "key-value store by key '0', but store->get('0') got error: Connection reset by peer.\n"
            "[rank1]:[E1120 10:12:13.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600071 milliseconds before timing out.\n")
    parser = LogParser(ParserSettings(host="node-1", source="train.log", job="job-7"), clock=lambda: READ_TIME)
    found = parser.scan(text.encode(), 0) + parser.flush()
    assert [(e.kind, e.rank, e.labels["role"]) for e in found] == [
        ("loss_nonfinite", 0, "root"), ("nccl_error", 3, "cascade"), ("nccl_timeout", 1, "cascade")]
    cascade = analyze_cascade(found)
    assert cascade is not None and cascade.root is found[0] and len(cascade.cascades) == 2


def test_nccl_2_0_warns_without_the_word_nccl_read_as_nccl_warns():
    """Horovod-era NCCL (horovod/horovod#210, heldout15): "host:pid:tid [3] include/socket.h:194 WARN Call to recv
    failed : ..." — the NCCL prefix gives pid and GPU, the WARN text its result; a level word in other logs is not."""
    reset = one("ml-gpu-ser021:2211:2301 [2] include/socket.h:194 WARN Call to recv failed : Connection reset by peer")
    assert (reset.kind, reset.gpu, reset.pid, reset.attrs["error_name"]) == ("nccl_error", 2, 2211, "ncclRemoteError")
    refused = one("node3:7001:7090 [1] include/socket.h:361 WARN Connect to 10.0.0.7<41234> failed : Connection "
                  "refused")
    assert (refused.gpu, refused.attrs["error_name"]) == (1, "ncclSystemError")
    assert events("2024-05-01 10:00:00 WARN Client session timed out, have not heard from server in 20001ms") == []
    assert b"WARN C" in TRIGGER_WORDS and b"L communicator" not in TRIGGER_WORDS
