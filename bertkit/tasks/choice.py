"""choice: pick the right answer among a question's choices (SWAG-style multiple choice).

    data      .jsonl (question, choices list, answer), .csv / .tsv (choices "|"-separated, or
              columns choices0, choices1, ...)
    model     BertForMultipleChoice: each (question, choice) pair -> one score; softmax over choices
    metrics   accuracy
    predict   {"answer": index, "choice": its text, "probabilities": one per choice}

Answers: a JSON integer or a string of digits is a 0-based index; a single letter A, B, ... is an
index; any other string must be one of the choices. Every example needs the same number of choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..data import records
from ..data.batching import id_batch
from ..data.records import TaskDataError
from ..errors import TrainingError
from ..heads import BertForMultipleChoice
from .base import Feature, Field, Opts, Task

if TYPE_CHECKING:
    from ..config import BertConfig
    from ..tokenizer import Tokenizer


@dataclass
class ChoiceExample:
    question: str
    choices: list[str]
    answer: int | None = None  # index into choices


@dataclass(kw_only=True)
class ChoiceFeature(Feature):
    # one row per choice: [CLS] question [SEP] choice [SEP]. Not Feature's one flat row (hence the ignores): only
    # Choice's own collate and tokens read them, never the base's
    input_ids: list[list[int]]  # type: ignore[assignment]
    token_type_ids: list[list[int]]  # type: ignore[assignment]
    labels: int | None = None  # the right choice's index

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.input_ids)


class Choice(Task[ChoiceExample, ChoiceFeature]):
    """One of several answers: a score per (question, choice) pair."""

    name, example, model_class = "choice", ChoiceExample, BertForMultipleChoice
    metric, formats = "accuracy", ("jsonl", "csv", "tsv")
    fields = (
        Field("question", "text", "field with the question"),
        Field("choices", "texts", 'field with the choices (CSV / TSV: "|"-separated, or columns NAME0, NAME1, ...)'),
        Field("answer", "label", "field with the right choice (an index, a letter or its text)"),
    )
    reads_lines = False  # a question and its choices do not fit on a plain line

    def parse(
        self, path: str, lines: list[str], fmt: str, columns: dict[str, Any], *, labeled: bool
    ) -> list[ChoiceExample]:
        return _read(
            path,
            records.table(path, lines, fmt),
            columns["question_field"],
            columns["choices_field"],
            columns["answer_field"],
            labeled,
        )

    def encode(
        self,
        tok: Tokenizer,
        examples: list[ChoiceExample],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[ChoiceFeature]:
        counts = {len(e.choices) for e in examples}
        if len(counts) > 1:
            raise TrainingError(
                f"multiple choice needs the same number of choices in every example; found {sorted(counts)}"
            )
        features = []
        for i, e in enumerate(examples):
            enc = tok(
                [e.question] * len(e.choices),
                list(e.choices),
                truncation="only_first",
                max_length=seq_len,
                return_token_type_ids=True,
            )
            features.append(
                ChoiceFeature(
                    input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"], example=i, labels=e.answer
                )
            )
        return features

    def collate(self, features: list[ChoiceFeature], pad_id: int) -> dict[str, torch.Tensor]:
        """(batch, choices, longest choice): every choice of the batch padded as one row, then regrouped."""
        B, C = len(features), len(features[0].input_ids)
        flat = id_batch(
            [ids for f in features for ids in f.input_ids],
            pad_id,
            [types for f in features for types in f.token_type_ids],
        )
        batch = {k: v.view(B, C, -1) for k, v in flat.items()}
        if features[0].labels is not None:
            batch["labels"] = torch.tensor([f.labels for f in features])
        return batch

    def batch_group(self, feature: ChoiceFeature) -> int:
        return len(feature.input_ids)  # a batch is (B, C, S): its features have as many choices

    def report(
        self,
        config: BertConfig,
        features: list[ChoiceFeature],
        outputs: list[torch.Tensor],
        examples: list[ChoiceExample],
        opts: Opts,
    ) -> dict[str, Any]:
        return {"accuracy": sum(int(lg.argmax()) == e.answer for lg, e in zip(outputs, examples)) / len(examples)}

    def predictions(
        self,
        config: BertConfig,
        features: list[ChoiceFeature],
        outputs: list[torch.Tensor],
        examples: list[ChoiceExample],
        opts: Opts,
    ) -> list[dict[str, Any]]:
        return [
            {
                "answer": int(lg.argmax()),
                "choice": e.choices[int(lg.argmax())],
                "probabilities": [round(float(p), 6) for p in torch.softmax(lg, -1)],
            }
            for lg, e in zip(outputs, examples)
        ]


# ----- reading -----------------------------------------------------------------------------------
def _read(
    path: str, table: records.Table, question_field: str, choices_field: str, answer_field: str, labeled: bool
) -> list[ChoiceExample]:
    table.require(path, question_field, "question", "question_field")
    numbered: list[str] = []
    if table.fmt != "jsonl" and not table.has(choices_field):
        while table.has(f"{choices_field}{len(numbered)}"):
            numbered.append(f"{choices_field}{len(numbered)}")
        if not numbered:
            table.require(path, choices_field, "choices", "choices_field")
    if labeled:
        table.require(path, answer_field, "answer", "answer_field")
    examples: list[ChoiceExample] = []
    for number, record in table.records:
        assert record is not None  # a blank line is a None record only with keep_empty
        question = records.string(path, number, record, question_field, "question_field", required=True)
        if numbered:
            choices = [record[c].strip() for c in numbered if record[c].strip()]
        else:
            value = records.get(path, number, record, choices_field, "choices_field")
            if table.fmt != "jsonl" and isinstance(value, str):
                value = [c.strip() for c in value.split(records.MULTI_LABEL_SEP)]
            if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
                raise TaskDataError(
                    f"{path}: line {number}: field {choices_field!r} holds {records.show(value)}; "
                    "expected a list of strings"
                )
            choices = value
        if len(choices) < 2 or not all(c.strip() for c in choices):
            raise TaskDataError(
                f"{path}: line {number}: {len(choices)} choice(s), or an empty one; a question needs "
                "at least two non-empty choices"
            )
        answer: int | None = None
        if labeled:
            answer = _answer_index(
                f"{path}: line {number}: answer {answer_field!r}",
                records.get(path, number, record, answer_field, "answer_field"),
                choices,
            )
        examples.append(ChoiceExample(question, list(choices), answer))
    return examples


def _answer_index(where: str, value: Any, choices: list[str]) -> int:
    index = None
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            index = int(text)
        elif len(text) == 1 and "A" <= text <= "Z":
            index = ord(text) - ord("A")
        elif text in choices:
            index = choices.index(text)
        else:
            raise TaskDataError(f"{where} is {value!r}: not an index, a letter A-Z, nor one of the choices")
    else:
        raise TaskDataError(
            f"{where} holds {records.show(value)}; expected an index (0 = the first choice), a letter "
            "or a choice's text"
        )
    if not 0 <= index < len(choices):
        raise TaskDataError(f"{where} is {value!r}, but there are {len(choices)} choices (answers count from 0 / A)")
    return index


CHOICE = Choice()
