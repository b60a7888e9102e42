"""Evaluating and predicting from settings: the work of `bertkit evaluate` / `bertkit predict` and of
bertkit.evaluate() / bertkit.predict().

    run_evaluate(EvaluateConfig(model=..., data=...)) -> the task's report (written to --json too when asked)
    run_predict(PredictConfig(model=..., texts=[...])) -> one row per input, in order (--output: JSON lines)

The settings dataclasses are the commands' flags (options.py): evaluate and predict share TaskOptions (the
data's fields, the windows, the tasks' own options) with `bertkit finetune`. What a task does with its
examples lives in bertkit/tasks/; loading and running a model in bertkit/inference.py (as `bertkit serve`
does); this module reads the inputs, checks the output paths first and writes the results.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

from .checkpoint import read_config
from .devices import Precision, device_opt, precision_opt
from .engines import DEFAULT_ENGINE, ENGINE_HELP, Engine, load_task_model
from .errors import BertkitError
from .files import atomic_write_text, check_output, to_json
from .inference import evaluate, predict, with_windows
from .metrics import finite_or_none
from .options import opt
from .quantize import CHOICES as QUANTIZE_CHOICES
from .quantize import FLAG_HELP as QUANTIZE_HELP
from .tasks import TASKS, Task, TaskDataError, TaskOptions, check_task_options, read_examples, task_of


@dataclass
class InferenceOptions(TaskOptions):
    """Settings `bertkit evaluate` and `bertkit predict` share (the data's fields, the windows: as fine-tuning's)."""

    model: str = opt("", "a fine-tuned model directory (bertkit finetune's --out)", required=True)
    task: str | None = opt(None, "default: from config.json", choices=TASKS)  # the registry: later tasks too
    quantize: str | None = opt(None, QUANTIZE_HELP, choices=QUANTIZE_CHOICES)
    engine: Engine = opt(DEFAULT_ENGINE, ENGINE_HELP)
    device: str = device_opt()
    precision: Precision = precision_opt()


@dataclass
class EvaluateConfig(InferenceOptions):
    """Score a fine-tuned model on labelled data (accuracy / F1 / EM as the task has them)."""

    data: str = opt("", "labelled data in the training format, or a builtin:NAME", required=True)
    split: str = opt("test", "split of a built-in dataset")
    json: str | None = opt(None, "also write the report here")


def file_lines_help(empty_row: str) -> str:
    """The rule of a plain-text --file, for `bertkit predict` and `bertkit embed` alike (read_input_lines), as their
    --file help states it; empty_row: what the command writes for an empty input."""
    return (
        f"one input per line, row i for line i + 1; a blank line keeps its row ({empty_row}); the newline that "
        "ends the file starts no line"
    )


@dataclass
class PredictConfig(InferenceOptions):
    """Predict for texts (arguments, or --file with one input per line; qa: question<TAB>context)."""

    texts: list[str] = opt(list, "inputs, one per argument", positional=True, nargs="*")
    file: str | None = opt(
        None,
        file_lines_help('"error": "empty input"') + "; or task data in the training format (.jsonl, .csv, ...)",
    )
    output: str | None = opt(None, "write the JSONL here instead of standard output")


def run_evaluate(cfg: EvaluateConfig) -> dict[str, Any]:
    """The report of `bertkit evaluate` (also written to --json); bertkit.evaluate in Python."""
    check_output(cfg.json, "--json", [cfg.data])
    loaded = load_task_model(cfg.model, _task(cfg, "evaluate"), **_runs_on(cfg))
    task, model, tok = loaded.task, loaded.model, loaded.tokenizer
    check_task_options(task, cfg, _whose(cfg, task))  # another task's option would change nothing
    # the labels read as the model was trained on them (classify: numbers for a regression model)
    config = model.config
    examples = read_examples(task, cfg, cfg.data, cfg.split, **task.evaluation_read(config))
    empty = next((i for i, e in enumerate(examples) if task.is_empty(e, tok)), None)
    if empty is not None:  # as the readers refuse "": a score on [CLS] [SEP] would count for nothing
        raise BertkitError(
            f"--data {cfg.data}: example {empty + 1} (in file order) has no text once whitespace, "
            "zero-width and control characters are left out; remove it"
        )
    report = evaluate(task, model, tok, examples, with_windows(cfg, tok, model))
    if cfg.json:
        atomic_write_text(cfg.json, to_json(finite_or_none(report), indent=2))
    return report


def run_predict(cfg: PredictConfig) -> list[dict[str, Any]]:
    """The rows of `bertkit predict`, one per input in order (written to --output as JSON lines when given);
    bertkit.predict in Python."""
    if bool(cfg.texts) == bool(cfg.file):
        raise BertkitError("pass texts as arguments or --file FILE (one of them)")
    check_output(cfg.output, "--output", [cfg.file])
    loaded = load_task_model(cfg.model, _task(cfg, "predict"), **_runs_on(cfg))
    task, model, tok = loaded.task, loaded.model, loaded.tokenizer
    check_task_options(task, cfg, _whose(cfg, task))  # another task's option would change nothing
    examples = _read_file(task, cfg) if cfg.file else task.from_texts(cfg.texts)
    rows = predict(task, model, tok, examples, with_windows(cfg, tok, model))
    if cfg.output:  # temp file + rename: no partial or empty file on failure
        atomic_write_text(cfg.output, "".join(to_json(row) + "\n" for row in rows))
    return rows


def _runs_on(cfg: InferenceOptions) -> dict[str, Any]:
    """What the loader takes of the settings: the engine, and where and how the model runs."""
    return {"quantize": cfg.quantize, "engine": cfg.engine, "device": cfg.device, "precision": cfg.precision}


# config.json architectures whose weights hold a trained masked-language-model head (what fill-mask needs)
MLM_ARCHITECTURES = ("BertForMaskedLM", "BertForPreTraining", "ElectraForMaskedLM")


def _task(cfg: InferenceOptions, command: str) -> str | None:
    """--task, else the task config.json's architectures name. A folder whose architectures name no task head (a
    pretraining run's --out, a downloaded bert-base-chinese) has nothing to predict with, and --task would only
    load a random head and be refused: the error says what works with it instead. A folder whose config.json
    names no architectures may still hold a head: tasks.task_of asks for --task there."""
    if cfg.task is not None or not os.path.isdir(cfg.model):
        return cfg.task  # load_task_model says what is wrong with a missing folder
    if command == "evaluate" and os.path.isfile(os.path.join(cfg.model, "modules.json")):
        return "embed"  # a sentence-transformers folder: its vectors are what is evaluated
    try:
        return task_of(cfg.model)
    except TaskDataError:
        architectures = read_config(cfg.model).architectures
        if not architectures:
            raise
        raise BertkitError(no_task_head(cfg.model, architectures, command)) from None


def no_task_head(model: str, architectures: list[str], command: str) -> str:
    """What to do with a model folder that has no fine-tuned task head: train one, or use the folder as it is."""
    generator = os.path.join(model, "generator")  # an ELECTRA pretraining run's MLM
    mlm = (
        model
        if set(architectures) & set(MLM_ARCHITECTURES)
        else generator
        if os.path.isfile(os.path.join(generator, "config.json"))
        else None
    )
    uses = (
        [f"`{shlex.join(['bertkit', 'fill-mask', '--model', mlm, '今天天气很[MASK]。'])}` predicts masked tokens"]
        if mlm
        else []
    )
    uses.append(
        f"`{shlex.join(['bertkit', 'embed', '--model', model, '--output', 'vectors.npy'])} TEXT...` gives "
        "sentence vectors"
    )
    return (
        f"--model {model}: a pretrained model without a task head (config.json's architectures: "
        f"{', '.join(architectures)}), so there is nothing to {command} with yet; train a head on it: "
        f"`{shlex.join(['bertkit', 'finetune', '--model', model])} --train DATA --out DIR`, then "
        f"`bertkit {command} --model DIR ...`; or use it as it is: {'; '.join(uses)}"
    )


TASK_DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".gz", ".conll", ".bio")


def _whose(cfg: InferenceOptions, task: Task[Any, Any]) -> str:
    """Where the task of evaluate / predict comes from, in words: --task, or the model's config.json."""
    return f"--task {cfg.task}" if cfg.task else f"--model {cfg.model} is a {task.name} model"


def _read_file(task: Task[Any, Any], cfg: PredictConfig) -> list[Any]:
    """--file as examples: task data by its suffix, else plain text (read_input_lines)."""
    assert cfg.file is not None, "run_predict reads --file only when it is given"

    if cfg.file.endswith(TASK_DATA_SUFFIXES) or not task.reads_lines:
        return task.read_to_predict(cfg.file, task.columns(cfg))
    return task.from_texts(read_input_lines(cfg.file))


def read_input_lines(path: str) -> list[str]:
    """A plain-text --file of `bertkit predict` or `bertkit embed` (file_lines_help): one input per line, in order, a
    blank line too: each command keeps its row, at its index, saying the input is empty; the newline that ends
    the last line starts no line. One-line errors for a missing file, a folder or text that is not UTF-8."""
    from .data.corpus import read_lines

    if not os.path.exists(path):
        raise BertkitError(f"--file {path}: no such file")
    return read_lines(path)  # a folder, or text that is not UTF-8 (with an iconv hint): one line naming the file
