"""What a fine-tuning task is, and what every command does with one.

    file / builtin:NAME --task.read--> examples (the task's dataclass; what they hold: task.fields)
    examples --task.encode--> features: one typed record (a Feature) per window of token ids (a long input
                              gives several windows overlapping by `stride` tokens), each knowing its example
    features --task.collate--> a padded batch --model--> output --task.outputs--> one result per feature
    results --task.report-->      metrics (bertkit evaluate; fine-tuning's evaluations)
            --task.predictions--> one JSON-ready row per example (bertkit predict, serve's /predict)

A task is one module of this package holding one Task object, and everything about the task is in it:
    fields   Field(name, kind) per input and label: data columns and the --NAME-field flags, serve's
             request checks and plain lines (from_texts) all come from them
    options  a dataclass of its own flags (qa: --max-answer-length); TaskOptions gathers every task's
    hooks    head (labels and problem_type before fine-tuning), write_report_files (after an evaluation),
             example_from (a request object -> an example), batch_group (which features serve may batch
             together), read_to_predict, evaluation_read, labelled (whether id2label names the outputs);
             a task whose loss or evaluation is not its model's own (embed, rerank): training_loss,
             prepare_model, write_model_files (the folder's extra files), evaluate_model, untrained, count
`finetune`, `evaluate`, `predict`, `serve` and `quickstart` look a task up in `bertkit.tasks.TASKS` and never
switch on its name. Adding a task = adding a module and its line in tasks/__init__.py.
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import torch

from ..data import records
from ..data.batching import id_batch
from ..data.builtin import BUILTIN_TASKS, TASK_SPLITS
from ..data.records import TaskDataError
from ..errors import TrainingError
from ..options import opt
from ..text import is_empty_text

if TYPE_CHECKING:
    from ..config import BertConfig
    from ..model import BertPreTrainedModel, InferenceModel
    from ..tokenizer import Tokenizer
    from ..train.loop import LossFn

EMPTY_INPUT = "empty input"  # the "error" of a predict row whose input has no text (text.is_empty_text)

FieldKind = Literal["text", "texts", "optional_text", "label"]
EXPECTS = {
    "text": "a string",
    "texts": "a non-empty list of strings",
    "optional_text": "a string or null",
    "label": "a label",
}  # what a /predict object must hold in a field of each kind
# A command's settings: a TaskOptions instance, or any object with its attributes (seq_len, stride, each task's
# options and --NAME-field columns). TaskOptions is a dataclass made at run time (task_options): no static type.
Opts = Any


@dataclass(frozen=True)
class Field:
    """One field of a task's examples: an attribute of its example dataclass, the key of a /predict object
    and the default column / key of data records (--NAME-field, Python NAME_field=, renames that), and what
    it holds:
        text           a string                        classify's text, qa's question and context
        texts          a non-empty list of strings     tag's tokens, choice's choices
        optional_text  a string, or nothing            classify's text_pair
        label          what the model learns: read from labelled data only, never an input to predict on
    """

    name: str
    kind: FieldKind
    help: str  # its --NAME-field flag's help, without the task names (TaskOptions adds them)

    @property
    def option(self) -> str:
        """The setting that names its column: text -> text_field (flag --text-field)."""
        return f"{self.name}_field"

    @property
    def required(self) -> bool:
        """An input every example must have (text and texts; not optional_text, not a label)."""
        return self.kind in ("text", "texts")

    @property
    def is_input(self) -> bool:
        return self.kind != "label"

    @property
    def expects(self) -> str:
        return EXPECTS[self.kind]

    def accepts(self, value: object) -> bool:
        """Whether a request's value fits this field (None, absent, is the caller's to judge)."""
        if self.kind == "texts":
            return isinstance(value, list) and bool(value) and all(isinstance(x, str) for x in value)
        return isinstance(value, str)

    def texts(self, value: str | list[str] | None) -> list[str]:
        """The strings a value of this field holds (to count its tokens, to see whether it is blank)."""
        return [] if value is None else list(value) if isinstance(value, list) else [value]


@dataclass
class Windows:
    """How long inputs become windows (every task)."""

    seq_len: int | None = opt(None, "tokens per window (default: the --seq-len the model was fine-tuned with)")
    stride: int | None = opt(
        None, "overlap of consecutive windows of a long input (default: a quarter of --seq-len, at most 32 tokens)"
    )


@dataclass
class LossChoice:
    """The loss of the tasks that name theirs as sentence-transformers does (embed, rerank)."""

    loss: str | None = opt(
        None,
        "embed / rerank: the loss, as sentence-transformers names it (embed: MultipleNegativesRankingLoss, "
        "CoSENTLoss; rerank: BinaryCrossEntropyLoss, MultipleNegativesRankingLoss, ListNetLoss); default: from the "
        "data (embed: CoSENTLoss with a label column, else MultipleNegativesRankingLoss; rerank: "
        "BinaryCrossEntropyLoss)",
    )


def task_options(tasks: Iterable[Task[Any, Any]]) -> type:
    """The settings dataclass fine-tuning, evaluation and prediction share (TaskOptions): the windows, every
    task's own options dataclass, and a --NAME-field flag for each field of each task (its help says which
    tasks read it; qa and choice share --question-field)."""
    tasks = list(tasks)
    readers: dict[str, list[tuple[str, Field]]] = {}
    for task in tasks:
        for field in task.fields:
            readers.setdefault(field.option, []).append((task.name, field))
    columns = []
    for option, found in readers.items():
        field, names = found[0][1], " / ".join(name for name, _ in found)
        columns.append((option, str, opt(field.name, f"{names}: {field.help}")))
    own = list(dict.fromkeys(task.options for task in tasks if task.options is not None))
    cls = dataclasses.make_dataclass("TaskOptions", columns, bases=(*reversed(own), Windows))  # Windows' flags first
    cls.__module__ = "bertkit.tasks"  # where it is published: pickles and tracebacks find it there
    cls.__doc__ = (
        "Settings fine-tuning, evaluation and prediction share: the windows, each task's options, where "
        "the data's fields are."
    )
    return cls


def default_stride(seq_len: int) -> int:
    """Windows of a long input overlap by a quarter of their length, at most 32 tokens."""
    return min(32, seq_len // 4)


@dataclass(kw_only=True)
class Feature:
    """One window of one example, as the model reads it; a task's own Feature adds what it needs to read the
    model's output back (tag: which word each token starts; qa: character offsets)."""

    input_ids: list[int]
    token_type_ids: list[int]
    example: int  # the index of its example in the list that was encoded
    # what the loss compares the output with (None: not labelled): a label's index, a number (regression), a vector
    labels: int | float | list[int] | list[float] | None = None

    @property
    def tokens(self) -> int:
        """Its real tokens (serve bounds a batch by them)."""
        return len(self.input_ids)


ExampleT = TypeVar("ExampleT")  # a task's example dataclass
FeatureT = TypeVar("FeatureT", bound=Feature)  # a task's Feature (or its own subclass of it)


@dataclass
class Head:
    """What fine-tuning puts on the encoder for a task, decided from the training examples."""

    labels: list[str] | None  # the outputs' names in order (config.id2label); None: they are not labels
    problem_type: str | None = None  # config.problem_type (classify: regression / single- / multi-label)
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # more config.json settings (rerank: num_labels 1)


class Task(ABC, Generic[ExampleT, FeatureT]):
    """One fine-tuning task: its fields, data, model class, features, metrics, predictions and hooks. Its type
    parameters: the dataclass of its examples and its features' class (classify: Task[ClassifyExample, Feature])."""

    name: str
    example: type[ExampleT]  # the dataclass of one example
    model_class: type[BertPreTrainedModel]
    metric: str  # the number that picks the best model (higher is better)
    formats: tuple[str, ...]  # file formats its reader takes (records.file_format's names)
    formats_note: str = ""  # what else it reads, for the error that lists the formats
    fields: tuple[Field, ...] = ()  # its examples' inputs and labels, in order
    options: type | None = None  # a dataclass of its own settings (flags); TaskOptions gathers them
    read_settings: tuple[str, ...] = ()  # read()'s keywords beyond the columns (classify: problem_type)
    labelled_outputs: bool = False  # one model output per label (config.id2label numbers them)
    reads_lines: bool = True  # predict can take plain text, one input per line
    loss_over_tokens: bool = False  # the loss is a mean over the labelled tokens (label != -100), not the rows

    # ----- settings -----------------------------------------------------------------------------
    def columns(self, opts: Opts) -> dict[str, str | None]:
        """Where its fields are in data records, from a command's --NAME-field settings (a field the command
        has no setting for, as with a task registered after the command's flags were made: its own name)."""
        return {f.option: getattr(opts, f.option, f.name) for f in self.fields}

    def settings(self, opts: Opts) -> Any:
        """Its own options (an instance of its `options` dataclass; None: it has none) as a command's settings
        hold them; one they lack keeps its default."""
        if self.options is None:
            return None
        return self.options(
            **{f.name: getattr(opts, f.name) for f in dataclasses.fields(self.options) if hasattr(opts, f.name)}
        )

    @property
    def input_fields(self) -> tuple[Field, ...]:
        """What one input to predict on holds (a /predict object's keys)."""
        return tuple(f for f in self.fields if f.is_input)

    # ----- data ---------------------------------------------------------------------------------
    def read(
        self, spec: str | os.PathLike[str], *, split: str | None = None, labeled: bool = True, **settings: Any
    ) -> list[ExampleT]:
        """Examples from a file or a builtin:NAME (the task module's docstring says what each file holds).
        settings: its fields' columns (text_field="body", ...; default: each field's name), and read_settings."""
        columns = {f.option: f.name for f in self.fields}
        unknown = sorted(set(settings) - set(columns) - set(self.read_settings))
        if unknown:
            raise TaskDataError(
                f"the {self.name} task does not read {', '.join(unknown)}; its settings are "
                f"{', '.join([*columns, *self.read_settings])}"
            )
        extra = {k: settings.pop(k) for k in list(settings) if k in self.read_settings}
        columns.update(settings)
        if not isinstance(spec, (str, os.PathLike)):
            raise TaskDataError(f"task data is a file path or a builtin:NAME string, got {type(spec).__name__}")
        if isinstance(spec, str) and spec.startswith("builtin:"):
            self._check_builtin(spec, split)
            assert split is not None  # _check_builtin refuses a missing split
            return self.builtin_examples(split, labeled, **extra)
        path = os.fspath(spec)
        if split is not None:
            raise TaskDataError(
                f"{path}: split={split!r} picks a part of a built-in data set; a file is read whole "
                "(pass one file per split)"
            )
        fmt = records.file_format(path, self.name, self.formats, self.formats_note)
        return self.parse(path, records.file_lines(path), fmt, columns, labeled=labeled, **extra)

    def _check_builtin(self, spec: str, split: str | None) -> None:
        if spec not in BUILTIN_TASKS:
            names = ", ".join(f"{name} ({kind})" for name, kind in BUILTIN_TASKS.items())
            raise TaskDataError(f"unknown built-in data set {spec!r}; choose one of: {names}")
        if BUILTIN_TASKS[spec] != self.name:
            raise TaskDataError(f"{spec} is a {BUILTIN_TASKS[spec]} data set, not {self.name}")
        if split is None:
            raise TaskDataError(f"{spec}: pass split= one of {', '.join(TASK_SPLITS)} (a fixed, seeded 80/10/10 split)")
        if split not in TASK_SPLITS:
            raise TaskDataError(f"{spec}: unknown split {split!r}; choose one of: {', '.join(TASK_SPLITS)}")

    @abstractmethod
    def parse(self, path: str, lines: list[str], fmt: str, columns: dict[str, Any], *, labeled: bool) -> list[ExampleT]:
        """The file's lines -> examples (each task reads its own records; columns: NAME_field -> column, None
        where a setting turned an optional field off). A task with read_settings takes them as further keywords
        of its own (classify: problem_type=, keep_empty=); so does its builtin_examples."""

    def builtin_examples(self, split: str, labeled: bool) -> list[ExampleT]:
        raise TaskDataError(f"the {self.name} task has no built-in data set")

    def read_to_predict(self, path: str, columns: dict[str, str | None]) -> list[ExampleT]:
        """A data file to predict on (labels not read); classify keeps every row, empty ones too, in its place."""
        return self.read(path, labeled=False, **columns)

    def evaluation_read(self, config: BertConfig) -> dict[str, Any]:
        """read()'s settings that read evaluation labels the way the model was trained (classify: numbers for a
        regression model)."""
        return {}

    def count(self, examples: list[ExampleT]) -> int:
        """How many examples there are, as the run's first line says it (embed: a retrieval set's queries)."""
        return len(examples)

    def label_names(self, examples: list[ExampleT]) -> list[str] | None:
        """The model's outputs are named after these labels (None: the task's outputs are not labels)."""
        return None

    def head(
        self,
        train: list[ExampleT],
        evaluation: list[ExampleT],
        problem_type: str | None = None,
        *,
        train_from: str = "the training data",
        eval_from: str = "the evaluation data",
    ) -> Head:
        """Before fine-tuning: one output per label of `train` (tasks with labelled outputs); a label only
        `evaluation` has is an error, since the model could never predict it. train_from / eval_from say where
        the examples came from, for that message."""
        if not self.labelled_outputs:
            return Head(None)
        labels = self.label_names(train)
        unseen: list[str] = []
        if evaluation:
            seen = self.label_names(evaluation)
            assert labels is not None and seen is not None, "a task with labelled outputs names them (label_names)"
            unseen = sorted(set(seen) - set(labels))
        if unseen:
            raise TrainingError(
                f"{eval_from}: labels {unseen} never occur in {train_from}; the model could never "
                "predict them: add such examples to the training data, or drop them from the "
                "evaluation data"
            )
        return Head(labels)

    def labelled(self, config: BertConfig) -> bool:
        """Whether config.id2label names the model's outputs (one output per label)."""
        return self.labelled_outputs

    # ----- inputs to predict on -------------------------------------------------------------------
    def from_texts(self, texts: list[str]) -> list[ExampleT]:
        """Examples from plain inputs (command-line arguments, lines of a text file): see from_line."""
        return [self.from_line(text, i) for i, text in enumerate(texts)]

    def from_line(self, line: str, index: int) -> ExampleT:
        """The example of one plain input (an argument, a line, a /predict string): its required input fields
        TAB-separated in field order (qa: question<TAB>context); a texts field is the part's characters
        (Chinese tagging works per character). A blank line is an empty input (its row says so)."""
        names = [f.name for f in self.input_fields]
        if not self.reads_lines:
            raise TaskDataError(
                f"{self.name} inputs do not fit on a plain line: predict reads a --file in the "
                f"task's format ({', '.join(self.formats)}) with {' and '.join(names)}"
            )
        fields = [f for f in self.input_fields if f.required]
        parts = line.split("\t", len(fields) - 1) if len(fields) > 1 else [line]
        if len(parts) < len(fields):
            if line.strip():
                raise TaskDataError(
                    f"{self.name} input {index + 1} needs '{'<TAB>'.join(f.name for f in fields)}', got {line[:40]!r}"
                )
            parts += [""] * (len(fields) - len(parts))
        return self.example_from({f.name: list(p) if f.kind == "texts" else p for f, p in zip(fields, parts)}, index)

    def example_from(self, values: dict[str, Any], index: int) -> ExampleT:
        """The example of input number `index` from its input fields' values (types already checked: a /predict
        object, or a plain line's parts); unlabelled."""
        return self.example(**values)

    def is_empty(self, example: ExampleT, tok: Tokenizer | None = None) -> bool:
        """An input with nothing to predict on: a required input field with no text the model can read ("",
        whitespace, zero-width or control characters: text.is_empty_text, by `tok`'s normaliser when given)."""
        return any(is_empty_text("".join(f.texts(getattr(example, f.name))), tok) for f in self.fields if f.required)

    def empty_row(self, example: ExampleT) -> dict[str, Any]:
        """The predict row of an empty input: what it was, no prediction, and why."""
        return {"answer": None, "error": EMPTY_INPUT}

    # ----- features and batches -----------------------------------------------------------------
    @abstractmethod
    def encode(
        self,
        tok: Tokenizer,
        examples: list[ExampleT],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[FeatureT]:
        """Examples -> features: several windows per long example, each knowing its example."""

    def collate(self, features: list[FeatureT], pad_id: int) -> dict[str, torch.Tensor]:
        """The model's inputs padded to the longest feature of the batch, and the labels as they are."""
        batch = model_inputs(features, pad_id)
        if features[0].labels is not None:
            batch["labels"] = torch.tensor([f.labels for f in features])
        return batch

    def outputs(self, features: list[FeatureT], out: Any) -> list[Any]:
        """The model's output for each feature, on the CPU in float32 (out: what the model returned, a ModelOutput
        or, from ONNX Runtime, a namespace of the same tensors)."""
        return list(out.logits.float().cpu())

    def batch_group(self, feature: FeatureT) -> Hashable:
        """Features of one group can share a batch (serve batches a request's features with others of its group;
        choice: features with as many choices)."""
        return None

    # ----- training -----------------------------------------------------------------------------
    def training_loss(self, opts: Opts, examples: list[ExampleT], tok: Tokenizer) -> LossFn | None:
        """The loss of a training micro-batch (the shared loop's LossFn) when the task computes its own (embed:
        a contrastive loss over pooled vectors; the training examples say which); None: the task model's own
        loss (out.loss)."""
        return None

    def prepare_model(self, model: BertPreTrainedModel, opts: Opts) -> None:
        """Before training: set up what the task needs of its model (embed: the unused pooler frozen)."""

    def write_model_files(self, model: BertPreTrainedModel, folder: str, opts: Opts) -> list[str]:
        """Files a trained model's folder needs beyond config, weights and tokenizer (embed: the sentence-transformers
        modules); the paths written."""
        return []

    def untrained(self, missing: list[str]) -> bool:
        """Whether a model folder lacks the task's trained weights, from the tensors its loading found missing."""
        return bool(missing)

    # ----- results ------------------------------------------------------------------------------
    def evaluate_model(
        self, model: InferenceModel, tok: Tokenizer, examples: list[ExampleT], opts: Opts
    ) -> dict[str, Any]:
        """The task's metrics of `model` on labelled examples (opts: seq_len, stride, the task's options)."""
        config = model.config
        features = self.encode(tok, examples, opts.seq_len, opts.stride, config.label2id, config.problem_type)
        return self.report(config, features, run_model(self, model, features, tok.pad_token_id), examples, opts)

    @abstractmethod
    def report(
        self, config: BertConfig, features: list[FeatureT], outputs: list[Any], examples: list[ExampleT], opts: Opts
    ) -> dict[str, Any]:
        """The task's metrics on labelled examples."""

    def score(self, report: dict[str, Any], problem_type: str | None) -> float:
        """The number that picks the best model: the report's main metric (higher is better)."""
        return report[self.metric]

    @abstractmethod
    def predictions(
        self, config: BertConfig, features: list[FeatureT], outputs: list[Any], examples: list[ExampleT], opts: Opts
    ) -> list[dict[str, Any]]:
        """One JSON-ready row per (non-empty) example, in order."""

    def learning_warning(self, report: dict[str, Any] | None) -> str | None:
        """A sign in the last evaluation that the run learned nothing, as a fact (None: no such sign);
        fine-tuning adds what to try."""
        return None

    def write_report_files(self, report: dict[str, Any], labels: list[str] | None, folder: str) -> list[str]:
        """Files beside the best model that show its evaluation `report` (classify: the confusion matrix PNG);
        the paths written."""
        return []


# ----- what every task shares ---------------------------------------------------------------------
def model_inputs(features: Sequence[Feature], pad_id: int) -> dict[str, torch.Tensor]:
    """input_ids / token_type_ids / attention_mask (B, S) of features, padded to the longest."""
    return id_batch([f.input_ids for f in features], pad_id, [f.token_type_ids for f in features])


def label_id(name: object, label2id: dict[str, int]) -> int:
    """The output index of label `name`; a label the model was not trained on is an error."""
    if str(name) not in label2id:
        raise TrainingError(
            f"label {name!r} is not one the model knows ({', '.join(label2id)}): the evaluation "
            "data has a class the training data had not"
        )
    return label2id[str(name)]


MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@torch.no_grad()
def run_model(
    task: Task[Any, FeatureT], model: InferenceModel, features: list[FeatureT], pad_id: int, batch_size: int = 32
) -> list[Any]:
    """The model's raw output per feature (task.outputs: logits, or (start, end) logits for qa)."""
    model.eval()
    device = next(model.parameters()).device
    outputs: list[Any] = []
    for i in range(0, len(features), batch_size):
        rows = features[i : i + batch_size]
        batch = {k: v.to(device) for k, v in task.collate(rows, pad_id).items() if k in MODEL_INPUTS}
        outputs += task.outputs(rows, model(**batch))
    return outputs


def evaluate(
    task: Task[ExampleT, Any], model: InferenceModel, tok: Tokenizer, examples: list[ExampleT], opts: Opts
) -> dict[str, Any]:
    """The task's metrics of `model` on labelled examples (opts: seq_len, stride, the task's options)."""
    return task.evaluate_model(model, tok, examples, opts)


def predict(
    task: Task[ExampleT, Any], model: InferenceModel, tok: Tokenizer, examples: list[ExampleT], opts: Opts
) -> list[dict[str, Any]]:
    """One JSON-ready row per example, in order; an empty input (no text the model can read: Task.is_empty) gets
    a row with "error": "empty input" (and label / answer null) instead of a prediction."""
    keep = [i for i, e in enumerate(examples) if not task.is_empty(e, tok)]
    rows = [task.empty_row(e) for e in examples]
    if keep:
        kept = [examples[i] for i in keep]
        config = model.config
        features = task.encode(tok, kept, opts.seq_len, opts.stride, None, config.problem_type)
        outputs = run_model(task, model, features, tok.pad_token_id)
        for i, row in zip(keep, task.predictions(config, features, outputs, kept, opts)):
            rows[i] = row
    return rows
