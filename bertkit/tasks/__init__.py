"""Fine-tuning tasks, one module each; the commands look a task up here by name.

    task      module       example          fields                            model class
    classify  classify.py  ClassifyExample  text, text_pair?, label            BertForSequenceClassification
    tag       tag.py       TagExample       tokens, tags                       BertForTokenClassification
    qa        qa.py        QAExample        question, context, answers         BertForQuestionAnswering
    choice    choice.py    ChoiceExample    question, choices, answer          BertForMultipleChoice
    embed     embed.py     EmbedExample     texts by column order, label?      BertModel (+ pooling: an ST folder)
    rerank    rerank.py    RerankExample    query, documents, labels           BertForSequenceClassification (1 output)

Each module's docstring says which files it reads, how long inputs become windows, its metrics
and its prediction rows; base.py says what a Task is. To add a task, add a module with a Task
subclass and its line in TASKS below (a task's ELECTRA directory loads through the same BERT class:
bertkit.electra.ELECTRA_CLASSES): finetune, evaluate, predict, serve and the quickstart loop over
TASKS, and TaskOptions (the commands' --NAME-field flags and the tasks' own options) is made from it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from ..checkpoint import read_config
from ..data.records import TaskDataError
from ..electra import ELECTRA_CLASSES
from ..model import BertModel
from ..modernbert import MODERNBERT_CLASSES
from .base import (
    EMPTY_INPUT,
    ExampleT,
    Feature,
    Field,
    Head,
    Opts,
    Task,
    Windows,
    default_stride,
    evaluate,
    predict,
    run_model,
    task_options,
)
from .choice import CHOICE, ChoiceExample
from .classify import CLASSIFY, ClassifyExample
from .embed import EMBED, EmbedExample
from .qa import QA_TASK, QAExample
from .rerank import RERANK, RerankExample
from .tag import TAG, TagExample

TASKS: dict[str, Task[Any, Any]] = {task.name: task for task in (CLASSIFY, TAG, QA_TASK, CHOICE, EMBED, RERANK)}

if TYPE_CHECKING:

    class TaskOptions(Windows):
        """What a type checker knows of TaskOptions: the windows' fields; each task's options and --NAME-field
        columns are made at run time from TASKS, so they read as Any."""

        def __getattr__(self, name: str) -> Any: ...

else:  # a dataclass: the windows, each task's options and field columns, made from TASKS
    TaskOptions = task_options(TASKS.values())


def get_task(name: str) -> Task[Any, Any]:
    """The task called `name`; an unknown name is an error listing the known ones."""
    if name not in TASKS:
        raise TaskDataError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name]


def read_task(
    task: str, spec: str | os.PathLike[str], *, split: str | None = None, labeled: bool = True, **settings: Any
) -> list[Any]:
    """Examples of `task` (classify | tag | qa | choice) from a file or a builtin:NAME.

    settings: the columns of the task's fields, NAME_field= (text_field, text_pair_field, label_field,
    tokens_field, tags_field, question_field, context_field, answers_field, choices_field, answer_field;
    default: the field's name), and the task's own reading settings (classify: problem_type, keep_empty).
    A setting of another task is an error; None means "not given". labeled=False reads data to predict on:
    labels (tags, answers, answer) are not read and are None (answers: []), so their fields need not exist.
    """
    return _read(get_task(task), spec, split=split, labeled=labeled, **settings)


def read_examples(
    task: Task[ExampleT, Any], opts: Opts, spec: str, split: str | None, **settings: Any
) -> list[ExampleT]:
    """The examples of `spec` read with a command's settings: the columns of the task's fields (its
    --NAME-field flags), a built-in data set's `split`, and reading settings (None: not given)."""
    if spec.startswith("builtin:"):
        settings["split"] = split
    return _read(task, spec, **task.columns(opts), **settings)


def check_task_options(task: Task[Any, Any], opts: Opts, whose: str) -> None:
    """Refuse another task's own option (--entity-scheme, --qa-language, --max-answer-length, ...) set on a
    command for `task`: it would change nothing (as _read refuses another task's reading setting by name). Set
    means away from its default (a default is what it would run with anyway). whose: where the task comes from,
    for the message ("--task classify", "--model DIR is a classify model")."""
    own = {f.name for f in dataclasses.fields(task.options)} if task.options is not None else set()
    for other in TASKS.values():
        for field in dataclasses.fields(other.options) if other.options is not None else ():
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            if field.name in own or getattr(opts, field.name, default) == default:
                continue
            owners = [
                t.name
                for t in TASKS.values()
                if t.options is not None and field.name in {f.name for f in dataclasses.fields(t.options)}
            ]
            flag = "--" + field.name.replace("_", "-")
            raise TaskDataError(
                f"{flag} applies to the {' / '.join(owners)} task only, not {task.name!r} ({whose}); leave {flag} out"
            )


def _read(task: Task[ExampleT, Any], spec: str | os.PathLike[str], **settings: Any) -> list[ExampleT]:
    """task.read(spec, **settings); a setting of another task is refused by name (None: not given, dropped)."""
    own = {"split", "labeled", *task.read_settings, *(f.option for f in task.fields)}
    for key in [k for k in settings if k not in own]:
        if settings[key] is None:
            del settings[key]
            continue
        owners = [t.name for t in TASKS.values() if key in t.read_settings or key in {f.option for f in t.fields}]
        if owners:
            raise TaskDataError(f"{key} applies to the {' / '.join(owners)} task only, not {task.name!r}")
    return task.read(spec, **settings)


def label_list(examples: list[Any]) -> list[str]:
    """The distinct labels of classify examples (sorted; numerically when all are integers) or the tags of
    tag examples ("O" first, then by entity type, B- before I-, then E-, S-)."""
    if not examples:
        raise TaskDataError("label_list: no examples")
    task = next((t for t in TASKS.values() if isinstance(examples[0], t.example)), None)
    names = task.label_names(examples) if task is not None else None
    if names is None:
        raise TaskDataError(
            f"label_list: {type(examples[0]).__name__} has no label list (classify and tag examples do)"
        )
    return names


def task_of(model_dir: str) -> str:
    """The task a fine-tuned directory's head was trained for, from config.json's architectures (a BERT task class or
    its ELECTRA counterpart: ElectraForSequenceClassification is classify as BertForSequenceClassification is). An
    embedding model has no head (its task's class is the plain BertModel): `bertkit evaluate` knows it by modules.json.
    rerank's folder is a classifier with one output: classify, registered first, serves and predicts with it."""
    config = read_config(model_dir)
    by_class: dict[str, str] = {}
    for name, task in TASKS.items():
        for cls in (task.model_class, ELECTRA_CLASSES.get(task.model_class), MODERNBERT_CLASSES.get(task.model_class)):
            if cls is not None and cls is not BertModel:
                by_class.setdefault(cls.__name__, name)
    for arch in config.architectures or ():
        if arch in by_class:
            return by_class[arch]
    raise TaskDataError(
        f"{model_dir}: config.json's architectures {config.architectures} name no fine-tuned task "
        f"head ({', '.join(by_class)}); pass --task"
    )


__all__ = [
    "TASKS",
    "Task",
    "TaskOptions",
    "Field",
    "Feature",
    "Head",
    "TaskDataError",
    "get_task",
    "read_task",
    "read_examples",
    "label_list",
    "task_of",
    "evaluate",
    "predict",
    "run_model",
    "default_stride",
    "task_options",
    "check_task_options",
    "EMPTY_INPUT",
    "ClassifyExample",
    "TagExample",
    "QAExample",
    "ChoiceExample",
    "EmbedExample",
    "RerankExample",
]
