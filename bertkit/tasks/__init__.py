"""Fine-tuning tasks, one module each; the commands look a task up here by name.

    task      module       example          model class
    classify  classify.py  ClassifyExample  BertForSequenceClassification
    tag       tag.py       TagExample       BertForTokenClassification
    qa        qa.py        QAExample        BertForQuestionAnswering
    choice    choice.py    ChoiceExample    BertForMultipleChoice

Each module's docstring says which files it reads, how long inputs become windows, its metrics
and its prediction rows; base.py says what a Task is. To add a task, add a module with a Task
subclass and its line in TASKS below: finetune, evaluate, predict and the quickstart loop over TASKS.
"""

from __future__ import annotations

import os

from ..config import BertConfig
from ..data.records import TaskDataError
from .base import EMPTY_INPUT, Task, TaskOptions, default_stride, evaluate, predict, read_examples, run_model
from .choice import CHOICE, ChoiceExample
from .classify import CLASSIFY, ClassifyExample
from .qa import QA_TASK, QAExample
from .tag import TAG, TagExample

TASKS: dict[str, Task] = {task.name: task for task in (CLASSIFY, TAG, QA_TASK, CHOICE)}


def get_task(name: str) -> Task:
    """The task called `name`; an unknown name is an error listing the known ones."""
    if name not in TASKS:
        raise TaskDataError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name]


def read_task(task: str, spec: str | os.PathLike, *, split: str | None = None, problem_type: str | None = None,
              labeled: bool = True, keep_empty: bool = False, **fields: str | None) -> list:
    """Examples of `task` (classify | tag | qa | choice) from a file or a builtin:NAME.

    fields: text_field, text_pair_field, label_field, tokens_field, tags_field, question_field,
    choices_field, answer_field, context_field (defaults: "text", "text_pair", ...; base.FIELDS).
    labeled=False reads data to predict on: labels (tags, answers, answer) are not read and are None
    (answers: []), so their fields need not exist.
    """
    return get_task(task).read(spec, split=split, problem_type=problem_type, labeled=labeled, keep_empty=keep_empty,
                               **fields)


def label_list(examples: list) -> list[str]:
    """The distinct labels of classify examples (sorted; numerically when all are integers) or the tags of
    tag examples ("O" first, then by entity type, B- before I-, then E-, S-)."""
    if not examples:
        raise TaskDataError("label_list: no examples")
    task = next((t for t in TASKS.values() if isinstance(examples[0], t.example)), None)
    names = task.label_names(examples) if task is not None else None
    if names is None:
        raise TaskDataError(f"label_list: {type(examples[0]).__name__} has no label list (classify and tag examples "
                            "do)")
    return names


def task_of(model_dir: str) -> str:
    """The task a fine-tuned directory was trained for, from config.json's architectures."""
    config = BertConfig.from_json(model_dir)
    by_class = {task.model_class.__name__: name for name, task in TASKS.items()}
    for arch in config.architectures or ():
        if arch in by_class:
            return by_class[arch]
    raise TaskDataError(f"{model_dir}: config.json's architectures {config.architectures} name no fine-tuned task "
                        f"head ({', '.join(by_class)}); pass --task")


__all__ = ["TASKS", "Task", "TaskOptions", "TaskDataError", "get_task", "read_task", "read_examples", "label_list",
           "task_of", "evaluate", "predict", "run_model", "default_stride", "EMPTY_INPUT", "ClassifyExample",
           "TagExample", "QAExample", "ChoiceExample"]
