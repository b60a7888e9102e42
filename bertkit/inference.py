"""Loading a model and running it: the one home of that for the commands (evaluate, predict, fill-mask, embed),
`bertkit serve` and explain.

    model dir --load_task_model--> TaskModel(task, model, tokenizer), in eval mode, quantized if asked; refused
                                   when its head would be random weights or its id2label has gaps
              --load_mlm--------> BertForMaskedLM with its trained MLM head (cls.*), or an ELECTRA generator's
                                   ElectraForMaskedLM (generator_predictions.*, generator_lm_head.*), refused as above
    finiteness (NaN / Infinity: NonFiniteError, one line naming the model folder) is checked twice, the same way
              for float32, bf16 and int8: check_weights scans every weight once at load, before quantizing
              (int8 cannot be built from NaN); check_outputs looks at what every forward pass gives back (the
              task / MLM logits: a hook; embeddings: Encoder.embed_ids)
    examples --evaluate / predict--> the task's report / one row per example (tasks/base.py: encode ->
                                   collate -> run_model -> outputs -> report / predictions)
    what an MLM predicts for each [MASK] (fill-mask): masked_lm.py
    ids --encoder_forward--> last_hidden_state (B, S, H) and the mask of real tokens (embed.py pools them)

    from bertkit.inference import load_task_model, predict, with_windows
    from bertkit.tasks import TaskOptions
    loaded = load_task_model("runs/sent")
    opts = with_windows(TaskOptions(), loaded.tokenizer, loaded.model)  # the windows it was fine-tuned with
    rows = predict(loaded.task, loaded.model, loaded.tokenizer, loaded.task.from_texts(["质量很好"]), opts)
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor, nn

from .data.batching import id_batch
from .deprecated import moved
from .devices import CPU, Placement, place
from .errors import BertkitError, BertkitWarning
from .finite import check_outputs, check_weights, finite
from .quantize import calibration_rows
from .quantize import quantize as quantize_model
from .tasks import Task, default_stride, evaluate, get_task, predict, run_model, task_of
from .tokenizer import Tokenizer

if TYPE_CHECKING:
    from .config import BertConfig
    from .model import BertPreTrainedModel, InferenceModel
    from .tasks.base import Windows

WindowsT = TypeVar("WindowsT", bound="Windows")  # the settings with_windows fills in: TaskOptions, or a command's

__all__ = [
    "TaskModel",
    "load_task_model",
    "load_mlm",
    "check_label_ids",
    "finite",
    "check_weights",
    "check_outputs",
    "with_windows",
    "evaluate",
    "predict",
    "run_model",
    "encoder_forward",
]


# ----- loading -----------------------------------------------------------------------------------
@dataclass
class TaskModel:
    """A fine-tuned model directory loaded for inference."""

    task: Task
    model: InferenceModel  # the task's BertFor* model in eval mode, or an engine's stand-in for it
    tokenizer: Tokenizer


def load_task_model(
    model_dir: str, task: str | None = None, quantize: str | None = None, where: Placement = CPU
) -> TaskModel:
    """A fine-tuned model directory (task: from config.json's architectures unless named); refused when its task
    head would be new (random) weights. quantize: None (float32 as saved), "int8" or "bf16" (bertkit.quantize,
    for CPU inference); where: the device and float type it runs in (devices.placement)."""
    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit finetune --out` wrote")
    found = get_task(task or task_of(model_dir))
    model, report = found.model_class.from_pretrained(model_dir, output_loading_info=True)
    if found.untrained(report.missing):
        raise BertkitError(
            f"{model_dir}: has no trained {found.name} head (its weights would be random): fine-tune "
            "it first with `bertkit finetune`"
        )
    report.warn_unexpected(stacklevel=3)
    if found.labelled(model.config):
        check_label_ids(model_dir, model.config)
    check_weights(model, model_dir)
    _check_logits(model, model_dir)
    tok = Tokenizer.from_pretrained(model_dir)
    model = place(model.eval(), where)
    quantized = quantize_model(model, quantize, calibration(quantize, tok))  # in place: the hook stays
    return TaskModel(found, quantized, tok)


# The tensors of a masked-language model's head, by config.json's model_type
MLM_HEADS = {"bert": ("cls.",), "electra": ("generator_predictions.", "generator_lm_head.")}


def load_mlm(model_dir: str, quantize: str | None = None, where: Placement = CPU) -> BertPreTrainedModel:
    """A masked-language model with trained MLM head weights, in eval mode: a BertForMaskedLM (cls.*), or an
    ElectraForMaskedLM (an ELECTRA generator: generator_predictions.*, generator_lm_head.*); refused when they would
    be random."""
    from .electra import discriminator_has_no_mlm_head
    from .heads import BertForMaskedLM

    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit pretrain --out` wrote")
    model, report = BertForMaskedLM.from_pretrained(model_dir, output_loading_info=True)
    if report.missing and report.unexpected_under("discriminator_predictions."):  # an ELECTRA discriminator
        raise BertkitError(discriminator_has_no_mlm_head(model_dir, "bertkit fill-mask --model"))
    if report.missing:
        head = MLM_HEADS[model.model_type]
        what = (
            f"MLM head weights ({', '.join(p + '*' for p in head)})"
            if report.missing_under(*head)
            else f"weights {report.missing[:3]}"
        )
        raise BertkitError(
            f"{model_dir}: has no {what}, so fill-mask would predict from random weights; use a model "
            "pretrained with `bertkit pretrain` (a fine-tuned model keeps no MLM head)"
        )
    report.warn_unexpected(stacklevel=3)
    check_weights(model, model_dir)
    _check_logits(model, model_dir)
    model = place(model.eval(), where)
    return quantize_model(model, quantize, calibration(quantize, Tokenizer.from_pretrained(model_dir)))


def calibration(quantize: str | None, tok: Tokenizer) -> list[list[int]] | None:
    """What quantize() calibrates int8's smoothing on: the built-in sample in this model's tokens (int8 only)."""
    return calibration_rows(tok) if quantize == "int8" else None


def check_label_ids(model_dir: str, config: BertConfig) -> None:
    """id2label must number the classifier's outputs 0..num_labels-1, without gaps."""
    assert config.num_labels is not None, "BertConfig.__post_init__ sets num_labels"
    ids = sorted(config.id2label)
    if ids != list(range(config.num_labels)):
        raise BertkitError(
            f"{os.path.join(model_dir, 'config.json')}: id2label ids {ids} must be 0..."
            f"{config.num_labels - 1} without gaps (one per classifier output); renumber id2label "
            "and label2id"
        )


# ----- finiteness: the weights once at load, the outputs of every forward pass ------------------------
def _check_logits(model: nn.Module, model_dir: str) -> None:
    """Every forward pass of a task / MLM model checks its logits (check_outputs)."""

    def check(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        logits = [getattr(output, name, None) for name in ("logits", "start_logits", "end_logits")]
        check_outputs(model_dir, "outputs", *[t for t in logits if isinstance(t, torch.Tensor)])

    model.register_forward_hook(check)


def with_windows(opts: WindowsT, tok: Tokenizer, model: InferenceModel) -> WindowsT:
    """`opts` with the windows long inputs are cut into, as a transformers user expects them:
        --seq-len given          it wins (8 .. max_position_embeddings); a BertkitWarning says so when it differs
                                 from model_max_length (tokenizer_config.json: the length bertkit finetune trained
                                 with, where transformers' pipelines cut)
        no --seq-len             model_max_length, never past max_position_embeddings (a warning when it would
                                 be); one under 8 tokens is an error (windows of [CLS] [SEP] and next to no text)
    Without --stride, windows overlap by a quarter of their length, at most 32 tokens."""
    config = model.config
    limit, recorded = config.max_position_embeddings, tok.model_max_length
    if opts.seq_len is not None:
        if not 8 <= opts.seq_len <= limit:
            raise BertkitError(
                f"--seq-len {opts.seq_len} must be from 8 to the model's max_position_embeddings ({limit})"
            )
        if opts.seq_len != recorded:
            warnings.warn(
                f"windows of {opts.seq_len} tokens (--seq-len), where the model's tokenizer_config.json "
                f"says model_max_length {recorded} (the length it was fine-tuned with)",
                BertkitWarning,
                stacklevel=2,
            )
        seq_len = opts.seq_len
    else:
        if recorded < 8:
            raise BertkitError(
                f"the tokenizer's model_max_length (tokenizer_config.json) is {recorded}: windows that "
                f"short hold next to no text; pass --seq-len (8 to {limit}) or fix model_max_length"
            )
        if recorded > limit:
            warnings.warn(
                f"windows of {limit} tokens (the model's max_position_embeddings), not the model_max_length "
                f"{recorded} of its tokenizer_config.json: the model has no positions past {limit}",
                BertkitWarning,
                stacklevel=2,
            )
        seq_len = min(recorded, limit)
    stride = opts.stride if opts.stride is not None else default_stride(seq_len)
    return dataclasses.replace(opts, seq_len=seq_len, stride=stride)


# ----- embeddings --------------------------------------------------------------------------------
def encoder_forward(model: InferenceModel, rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """One forward pass of an encoder (a BertModel) over rows of ids padded to the longest: last_hidden_state
    (B, S, H) in float32 and the attention mask (B, S) of the real tokens, on the model's device."""
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in id_batch(rows, pad_id).items()}
    model.eval()
    with torch.inference_mode():
        return model(**batch).last_hidden_state.float(), batch["attention_mask"]


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "windows": "bertkit.inference:with_windows",
            "Candidate": "bertkit.masked_lm:Candidate",
            "MaskFill": "bertkit.masked_lm:MaskFill",
            "mask_positions": "bertkit.masked_lm:mask_positions",
            "token_text": "bertkit.masked_lm:token_text",
            "filled_text": "bertkit.masked_lm:filled_text",
            "mlm_logits": "bertkit.masked_lm:mlm_logits",
            "mask_fills": "bertkit.masked_lm:mask_fills",
            "fill_mask": "bertkit.masked_lm:fill_mask",
            "check_output": "bertkit.files:check_output",
            "to_json": "bertkit.files:to_json",
        },
    )
