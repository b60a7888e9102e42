"""What a fine-tuning task is, and what every command does with one.

    file / builtin:NAME --task.read--> examples
    examples --task.encode--> feature rows: token ids per window (a long input gives several
                              windows overlapping by `stride` tokens), each knowing its example
    rows --task.collate--> a padded batch --model--> output --task.outputs--> one result per row
    results --task.report-->      metrics (bertkit evaluate; fine-tuning's evaluations)
            --task.predictions--> one JSON-ready row per example (bertkit predict)

A task is one module of this package (classify.py, tag.py, qa.py, choice.py) holding one Task
object; `finetune`, `evaluate`, `predict` and `quickstart` look it up in `bertkit.tasks.TASKS` and
never switch on its name. Adding a task = adding a module and its line in tasks/__init__.py.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from ..config import PROBLEM_TYPES
from ..data import records
from ..data.builtin import BUILTIN_TASKS, TASK_SPLITS
from ..data.records import TaskDataError
from ..errors import TrainingError
from ..metrics import ENTITY_SCHEMES, QA_LANGUAGES
from ..options import opt

EMPTY_INPUT = "empty input"  # the "error" of a predict row whose input was empty or whitespace

# read_task's field arguments and their defaults (the first five are also flags: TaskOptions)
FIELDS = {"text_field": "text", "text_pair_field": "text_pair", "label_field": "label", "tokens_field": "tokens",
          "tags_field": "tags", "question_field": "question", "choices_field": "choices", "answer_field": "answer",
          "context_field": "context"}


@dataclass
class TaskOptions:
    """Settings fine-tuning, evaluation and prediction share: where the data's fields are, the windows."""

    text_field: str = opt("text", "column / field with the text")
    text_pair_field: str = opt("text_pair", "column / field with the second text, if any")
    label_field: str = opt("label", "column / field with the label")
    tokens_field: str = opt("tokens", "tagging: field with the tokens")
    tags_field: str = opt("tags", "tagging: field with the BIO tags")
    seq_len: int | None = opt(None, "tokens per window (default: the --seq-len the model was fine-tuned with)")
    stride: int | None = opt(None, "overlap of consecutive windows of a long input (default: a quarter of "
                                   "--seq-len, at most 32 tokens)")
    max_answer_length: int = opt(30, "qa: longest answer span in tokens")
    entity_scheme: str = opt("conlleval", "tag: how tags make entities: conlleval (lenient: O I-LOC is an entity; "
                                          "seqeval's default) or strict IOB2 / IOBES (seqeval's mode='strict')",
                             choices=list(ENTITY_SCHEMES))
    qa_language: str = opt("auto", "qa: EM / F1 as the official SQuAD script (en) or CMRC 2018's (zh); auto: zh "
                                   "when most answers hold Chinese", choices=list(QA_LANGUAGES))

    def fields(self) -> dict[str, str]:
        """The *_field settings, as read_task's keyword arguments."""
        return {name: getattr(self, name) for name in FIELDS if hasattr(self, name)}


def default_stride(seq_len: int) -> int:
    """Windows of a long input overlap by a quarter of their length, at most 32 tokens."""
    return min(32, seq_len // 4)


class Task(ABC):
    """One fine-tuning task: its data, its model class, its features, its metrics, its predictions."""

    name: str
    example: type  # the dataclass of one example
    model_class: type
    metric: str  # the number that picks the best model (higher is better)
    formats: tuple[str, ...]  # file formats its reader takes (records.file_format's names)
    formats_note: str = ""  # what else it reads, for the error that lists the formats
    has_problem_type: bool = False  # classify only: regression / single- / multi-label (config.PROBLEM_TYPES)
    labelled_outputs: bool = False  # one model output per label (config.id2label numbers them)
    keeps_empty: bool = False  # prediction data may hold empty inputs, kept as rows of their own
    reads_lines: bool = True  # predict can take plain text, one input per line
    loss_over_tokens: bool = False  # the loss is a mean over the labelled tokens (label != -100), not the rows
    # what one input to predict on holds, as a `bertkit serve` /predict object: field -> "text" | "texts"
    # (a list of strings) | "optional text"
    input_fields: dict[str, str] = {}

    # ----- data ---------------------------------------------------------------------------------
    def read(self, spec: str | os.PathLike, *, split: str | None = None, problem_type: str | None = None,
             labeled: bool = True, keep_empty: bool = False, **fields: str | None) -> list:
        """Examples from a file or a builtin:NAME (the task module's docstring says what each file holds)."""
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise TypeError(f"read_task() got unexpected keyword argument(s) {', '.join(unknown)}; the fields are "
                            f"{', '.join(FIELDS)}")
        fields = {**FIELDS, **fields}
        if problem_type is not None and problem_type not in PROBLEM_TYPES:
            raise TaskDataError(f"problem_type must be None (decide from the labels) or one of "
                                f"{', '.join(p for p in PROBLEM_TYPES if p)}, got {problem_type!r}")
        if problem_type is not None and not self.has_problem_type:
            raise TaskDataError(f"problem_type applies to the classify task only, not {self.name!r}")
        if not isinstance(spec, (str, os.PathLike)):
            raise TaskDataError(f"task data is a file path or a builtin:NAME string, got {type(spec).__name__}")
        if isinstance(spec, str) and spec.startswith("builtin:"):
            return self._read_builtin(spec, split, problem_type, labeled)
        path = os.fspath(spec)
        if split is not None:
            raise TaskDataError(f"{path}: split={split!r} picks a part of a built-in data set; a file is read whole "
                                "(pass one file per split)")
        fmt = records.file_format(path, self.name, self.formats, self.formats_note)
        lines = records.file_lines(path)
        if keep_empty and (labeled or not self.keeps_empty):
            raise TaskDataError("keep_empty=True applies to unlabeled classify data only (labeled=False)")
        return self.parse(path, lines, fmt, fields, problem_type=problem_type, labeled=labeled, keep_empty=keep_empty)

    def _read_builtin(self, spec: str, split: str | None, problem_type: str | None, labeled: bool) -> list:
        if spec not in BUILTIN_TASKS:
            names = ", ".join(f"{name} ({kind})" for name, kind in BUILTIN_TASKS.items())
            raise TaskDataError(f"unknown built-in data set {spec!r}; choose one of: {names}")
        if BUILTIN_TASKS[spec] != self.name:
            raise TaskDataError(f"{spec} is a {BUILTIN_TASKS[spec]} data set, not {self.name}")
        if split is None:
            raise TaskDataError(f"{spec}: pass split= one of {', '.join(TASK_SPLITS)} (a fixed, seeded 80/10/10 split)")
        if split not in TASK_SPLITS:
            raise TaskDataError(f"{spec}: unknown split {split!r}; choose one of: {', '.join(TASK_SPLITS)}")
        if problem_type not in (None, "single_label_classification"):
            raise TaskDataError(f"{spec} is single-label classification; problem_type={problem_type!r} does not fit")
        return self.builtin_examples(split, labeled)

    @abstractmethod
    def parse(self, path: str, lines: list[str], fmt: str, fields: dict, *, problem_type: str | None,
              labeled: bool, keep_empty: bool) -> list:
        """The file's lines -> examples (each task reads its own records)."""

    def builtin_examples(self, split: str, labeled: bool) -> list:
        raise TaskDataError(f"the {self.name} task has no built-in data set")

    def label_names(self, examples: list) -> list[str] | None:
        """The model's outputs are named after these labels (None: the task's outputs are not labels)."""
        return None

    def decide_problem_type(self, examples: list, problem_type: str | None) -> str | None:
        """The config's problem_type for training on `examples` (classify decides; others have none)."""
        return problem_type

    def problem_type_to_read(self, config) -> str | None:
        """What read() must be told to read evaluation labels the way the model was trained."""
        return None

    @abstractmethod
    def from_texts(self, texts: list[str]) -> list:
        """Examples from plain inputs (command-line arguments, lines of a text file)."""

    def from_fields(self, values: dict, index: int):
        """An example from an object of input_fields (a /predict request's input number `index`; types checked)."""
        return self.example(**values)

    def is_empty(self, example) -> bool:
        """An input with nothing to predict on."""
        return False

    def empty_row(self, example) -> dict:
        """The predict row of an empty input: what it was, no prediction, and why."""
        return {"answer": None, "error": EMPTY_INPUT}

    # ----- features and batches -----------------------------------------------------------------
    @abstractmethod
    def encode(self, tok, examples: list, seq_len: int, stride: int, label2id: dict | None,
               problem_type: str | None) -> list[dict]:
        """Examples -> feature rows (plain lists): several windows per long example, each knowing its example."""

    def collate(self, rows: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
        """Pad to the longest row of the batch (labels included)."""
        return pad_batch(rows, pad_id)

    def outputs(self, rows: list[dict], out) -> list:
        """The model's output for each feature row, on the CPU in float32."""
        return list(out.logits.float().cpu())

    # ----- results ------------------------------------------------------------------------------
    @abstractmethod
    def report(self, config, features: list[dict], outputs: list, examples: list, opts) -> dict:
        """The task's metrics on labelled examples."""

    def score(self, report: dict, problem_type: str | None) -> float:
        """The number that picks the best model: the report's main metric (higher is better)."""
        return report[self.metric]

    @abstractmethod
    def predictions(self, config, features: list[dict], outputs: list, examples: list, opts) -> list[dict]:
        """One JSON-ready row per (non-empty) example, in order."""

    def learning_warning(self, report: dict | None, hint: str) -> str | None:
        """A sign in the last evaluation that the run learned nothing, ending with `hint` (None: no such sign)."""
        return None


# ----- what every task shares ---------------------------------------------------------------------
def pad_batch(rows: list[dict], pad_id: int, label_pad: int | None = None) -> dict[str, torch.Tensor]:
    """input_ids / token_type_ids / attention_mask padded to the longest row; labels as they are, or padded
    with label_pad when they are per token."""
    longest = max(len(r["input_ids"]) for r in rows)

    def pad(key, value):
        return torch.tensor([r[key] + [value] * (longest - len(r[key])) for r in rows])

    batch = {"input_ids": pad("input_ids", pad_id), "token_type_ids": pad("token_type_ids", 0),
             "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (longest - len(r["input_ids"]))
                                             for r in rows])}
    if "labels" in rows[0]:
        per_token = label_pad is not None
        batch["labels"] = pad("labels", label_pad) if per_token else torch.tensor([r["labels"] for r in rows])
    return batch


def read_examples(task: Task, opts: TaskOptions, spec: str, split: str | None, **kw) -> list:
    """The examples of `spec` read with a command's field settings (a built-in data set: its `split`)."""
    if spec.startswith("builtin:"):
        kw["split"] = split
    return task.read(spec, **opts.fields(), **kw)


def label_id(name, label2id) -> int:
    """The output index of label `name`; a label the model was not trained on is an error."""
    if str(name) not in label2id:
        raise TrainingError(f"label {name!r} is not one the model knows ({', '.join(label2id)}): the evaluation "
                            "data has a class the training data had not")
    return label2id[str(name)]


MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@torch.no_grad()
def run_model(task: Task, model, features: list[dict], pad_id: int, batch_size: int = 32) -> list:
    """The model's raw output per feature row (task.outputs: logits, or (start, end) logits for qa)."""
    model.eval()
    device = next(model.parameters()).device
    outputs = []
    for i in range(0, len(features), batch_size):
        rows = features[i:i + batch_size]
        batch = {k: v.to(device) for k, v in task.collate(rows, pad_id).items() if k in MODEL_INPUTS}
        outputs += task.outputs(rows, model(**batch))
    return outputs


def evaluate(task: Task, model, tok, examples: list, opts) -> dict:
    """The task's metrics of `model` on labelled examples (opts: seq_len, stride, max_answer_length)."""
    config = model.config
    features = task.encode(tok, examples, opts.seq_len, opts.stride, config.label2id, config.problem_type)
    return task.report(config, features, run_model(task, model, features, tok.pad_token_id), examples, opts)


def predict(task: Task, model, tok, examples: list, opts) -> list[dict]:
    """One JSON-ready row per example, in order; an empty input gets a row with "error": "empty input"
    (and label / answer null) instead of a prediction."""
    keep = [i for i, e in enumerate(examples) if not task.is_empty(e)]
    rows = [task.empty_row(e) for e in examples]
    if keep:
        kept = [examples[i] for i in keep]
        config = model.config
        features = task.encode(tok, kept, opts.seq_len, opts.stride, None, config.problem_type)
        outputs = run_model(task, model, features, tok.pad_token_id)
        for i, row in zip(keep, task.predictions(config, features, outputs, kept, opts)):
            rows[i] = row
    return rows
