"""Training that went numerically wrong: a loss or gradient that became NaN or Inf (kind `loss_nonfinite`).

A root cause of its own (the run diverged or read bad data; nothing else failed first), and the usual start of
a cascade: ranks stop at different steps, so the others time out in their next collective. Read from the
trainers' own wordings: detectron2/fvcore, Megatron-LM's gradient checks, DETR-style loops, TensorFlow's
NanLossDuringTrainingError (and "Model diverged with loss = NaN"), Keras' TerminateOnNaN, fairseq's and
DeepSpeed's loss scaler at its floor, PyTorch's anomaly mode, and a loss metric printed as `nan` in a training
log line. A loss scaler that skips a step on overflow and carries on ("overflow detected, setting loss scale
to") is the fp16 scaler working, not this.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuslo.probes.logs.patterns import Family, Found, _c, _clean, _first, _int

_NONFINITE = r"(?:nan|NaN|NAN|-?inf|-?Inf|-?INF|-?infinity|-?Infinity)"


def _value(text: str) -> str | None:
    """`nan` or `inf` (either sign) for the first non-finite number the text prints, None when it names none."""
    match = re.search(r"(?<![\w.])(nan|-?inf(?:inity)?)(?:\.0+)?(?!\w|\.\d)", text, re.IGNORECASE)
    if not match:
        return None
    return "nan" if match.group(1).lower() == "nan" else "inf"


def _error_name(text: str) -> str | None:
    match = re.search(r"\b((?:\w+\.)*(?:FloatingPointError|NanLossDuringTrainingError|AssertionError|RuntimeError"
                      r"|ValueError))\b", text)
    return match.group(1).rsplit(".", 1)[-1] if match else None


def _step(text: str) -> int | None:
    step = _first(_int(r"iteration\s*[=:]?\s*(-?\d+)", text), _int(r"\bstep\s*[=:]?\s*(-?\d+)", text),
                  _int(r"Batch\s*(\d+):\s*Invalid", text))
    return step if step is not None and step >= 0 else None  # Megatron prints iteration -1 before the first step


def _became_nonfinite(text: str) -> Found:
    """detectron2/fvcore: "FloatingPointError: Loss became infinite or NaN at iteration=N!" then the loss_dict."""
    losses = re.search(r"loss_dict\s*=\s*(\{.*)", text, re.DOTALL)
    bad = re.search(r"'(\w+)':\s*(?:tensor\()?" + _NONFINITE + r"\b", losses.group(1)) if losses else None
    return Found("loss_nonfinite", _clean({
        "value": _value(bad.group(0)) if bad else None, "step": _step(text),
        "metric": bad.group(1) if bad else "loss", "error_name": _error_name(text) or "FloatingPointError"}))


def _grad_check(text: str) -> Found:
    """Megatron-LM: "Rank 11: found NaN in local grad norm in backward pass before data-parallel communication
    collective. Device: 3" and its rerun machine's "Rank 2, node n1, device 2, iteration 40: Unexpected result nan
    (message='found NaN in local grad norm for bucket #0 ...')"."""
    named = re.search(r"found\s*(NaN|Inf)\b", text)
    return Found("loss_nonfinite", _clean({
        "value": named.group(1).lower() if named else _value(text.split("Unexpected result", 1)[-1]),
        "step": _step(text), "metric": "grad_norm", "error_name": _error_name(text)}),
        rank=_int(r"\bRank\s*(\d+)\s*[:,]", text), gpu=_first(_int(r"\bDevice:\s*(\d+)", text),
                                                               _int(r"\bdevice\s*(\d+)\s*,", text)))


def _stated(metric: str, error_name: str | None = None) -> Callable[[str], Found]:
    """A family whose line says which value went wrong ("Loss is nan, stopping training")."""

    def extract(text: str) -> Found:
        value = None if "Nan/Inf" in text else _value(text)  # fairseq's "gradients are Nan/Inf" says either
        return Found("loss_nonfinite", _clean({"value": value, "step": _step(text), "metric": metric,
                                               "error_name": _error_name(text) or error_name}))

    return extract


def _loss_scale_floor(text: str) -> Found:
    """fairseq "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding." and
    DeepSpeed "Current loss scale already at minimum - cannot decrease scale anymore": every step overflowed
    (Inf gradients) until the fp16 scaler ran out of room."""
    return Found("loss_nonfinite", _clean({"value": "inf", "step": _step(text), "metric": "loss_scale",
                                           "error_name": _error_name(text)}))


def _anomaly(text: str) -> Found:
    """PyTorch anomaly mode: "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output."""
    function = re.search(r"Function '(\w+)' returned (nan|inf)", text)
    return Found("loss_nonfinite", _clean({
        "value": "nan" if function and function.group(2) == "nan" else "inf", "metric": "gradients",
        "error_name": _error_name(text), "detail": function.group(1) if function else None}))


# NaN only: a loss printed as `inf` is left to the families above (the prefilter has no cheap word for it)
# Lightning's progress bar prints "train_loss_step=nan.0"; verl's step line "critic/vf_loss:nan - critic/grad_norm:nan"
_METRIC = re.compile(r"(?:^|(?<=[\s,|{(\[/-]))'?((?:[A-Za-z][\w.]*[ _])?(?:[Ll]oss(?:_[a-z]+)?|grad[ _]norm))'?"
                     r"\s*[:=]\s*(?:nan|NaN)(?:\.0+)?(?!\w|\.\d)"
                     # then what a record prints next (its end, a separator, the next key), not a sentence's words
                     r"(?=\s*(?:$|[,|\]}\-;()'\"]|[\w/.]+\s*[:=]))")


# ... and in words: "Training loss at epoch 25 - nan", "Training batch 64 ends with loss NaN."
_METRIC_WORDS = re.compile(r"(?:^|(?<=\s))((?:[A-Za-z]+ )?loss)"
                           r"(?: at (?:epoch|step|iteration|iter|batch) \d+\s*[-:=]\s*|\s+)(?:nan|NaN)(?!\w|\.\d)")


def _metric(text: str) -> Found | None:
    """A training log line that prints a loss or the gradient norm as NaN: Megatron "lm loss: nan |" and "grad norm:
    nan |", Hugging Face "{'loss': nan, ...}" and "'grad_norm': nan", Keras "- loss: nan", mmdet/detectron2
    "total_loss: nan", Lightning "loss=nan", or says it in words ("loss at epoch 25 - nan", "ends with loss NaN")."""
    match = _METRIC.search(text) or _METRIC_WORDS.search(text)
    if not match:
        return None
    return Found("loss_nonfinite", _clean({"value": _value(text[match.end(1):]), "step": _step(text),
                                           "metric": match.group(1)}))


# RETURNN's step line: "ep 2 train, step 587, ctc_4 nan, ctc_8 nan, ce 0.412, fer 0.093" (each score named, then its
# value, comma-separated); a score printed as NaN
_STEP_SCORES = re.compile(r"(?:^|(?<=\s))ep \d+ \w+, step (\d+), (?:[^,]+, )*?([A-Za-z][\w/.:-]*) (?:nan|NaN)"
                          r"(?=,|\s*$)")


def _step_scores(text: str) -> Found | None:
    match = _STEP_SCORES.search(text)
    if not match:
        return None
    return Found("loss_nonfinite", {"value": "nan", "step": int(match.group(1)), "metric": match.group(2)})


LOSS_FAMILIES: tuple[Family, ...] = (
    Family("loss_became_nonfinite", _c(r"\w*Error: Loss became infinite or NaN at iteration=?\s*\d"), _became_nonfinite,
           complete=_c(r"loss_dict\s*="), max_lines=2, accept=_c(r"^\s*loss_dict\s*=")),
    Family("grad_norm_nonfinite", _c(r"found NaN in local grad norm|\w*Error: .{0,40}found Inf in local grad norm"
                                     r"|Unexpected result nan\b"
                                     r"|\w*Error: .{0,200}Unexpected result inf\b"), _grad_check),
    Family("loss_stated_nonfinite", _c(r"Loss is " + _NONFINITE + r", stopping training|NaN loss during training"
                                       r"|Model diverged with loss = NaN"
                                       r"|Batch \d+: Invalid loss, terminating training"
                                       r"|\w*Error: gradients are Nan/Inf"
                                       # a training step's own check: 'raise ValueError("loss is nan")' (Lightning
                                       # modules, ikflow); the exception line, not the source line (prose.py)
                                       r"|\w*Error: (?:[Tt]he )?[Ll]oss is " + _NONFINITE + r"\s*$"),
           _stated("loss")),
    Family("loss_scale_floor", _c(r"\w*Error: Minimum loss scale reached \(|Current loss scale already at minimum"),
           _loss_scale_floor),
    Family("anomaly_nonfinite", _c(r"Function '\w+' returned nan values|\w*Error: Function '\w+' returned inf values"),
           _anomaly),
    Family("step_scores_nonfinite", _STEP_SCORES, _step_scores),
    Family("loss_metric_nonfinite", _c(f"{_METRIC.pattern}|{_METRIC_WORDS.pattern}"), _metric),
)
