"""qa: extractive question answering (SQuAD-style): the answer is a span of the context.

    data      SQuAD JSON ({"data": [{"paragraphs": [{"context", "qas": [...]}]}]}), .jsonl with
              id / question / context / answers
    model     BertForQuestionAnswering: each context token -> a start and an end logit
    windows   a long context gives several windows overlapping by `stride` tokens; an answer outside a
              window is trained as [CLS] (position 0); the best valid span over all windows wins
    metrics   exact match and F1 as the official scripts score them: SQuAD v2.0's, Chinese CMRC 2018's
    predict   {"id", "answer", "start", "end", "score"} (character offsets into the context)

An answer whose text is not at answer_start in the context is moved to the occurrence of its text
nearest to answer_start, with one warning per file; an answer text that does not occur in the context
is an error. answers may be [{"text", "answer_start"}, ...], {"text": [...], "answer_start": [...]}
(the datasets layout) or plain strings (first occurrence). Empty answers or "is_impossible": true =
unanswerable. Ids must be unique. SQuAD JSON has no per-record line numbers, so errors there name the
record: data[i].paragraphs[j].qas[k] and its id. Plain text to predict on is "question<TAB>context".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..data import records
from ..data.records import TaskDataError
from ..heads import BertForQuestionAnswering
from ..metrics import QA_LANGUAGES, squad_scores
from ..options import opt
from .base import EMPTY_INPUT, Feature, Field, Opts, Task

if TYPE_CHECKING:
    from ..config import BertConfig
    from ..tokenizer import Tokenizer


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[tuple[int, str]]  # (character start in context, text); empty: unanswerable


@dataclass(kw_only=True)
class QAFeature(Feature):
    context_offsets: list[tuple[int, int] | None]  # per token: its characters in the context (None: not context)
    start_positions: int = 0  # the answer's first and last token in this window; 0, 0 ([CLS]): not in it
    end_positions: int = 0


@dataclass
class QAOptions:
    max_answer_length: int = opt(30, "qa: longest answer span in tokens")
    qa_language: str = opt(
        "auto",
        "qa: EM / F1 as the official SQuAD script (en) or CMRC 2018's (zh); auto: zh when most answers hold Chinese",
        choices=list(QA_LANGUAGES),
    )


class QA(Task[QAExample, QAFeature]):
    """An answer span in the context: a start and an end logit per token."""

    name, example, model_class = "qa", QAExample, BertForQuestionAnswering
    metric, formats = "f1", ("jsonl",)
    formats_note = " (or SQuAD JSON)"
    fields = (
        Field("question", "text", "field with the question"),
        Field("context", "text", "field with the context"),
        Field("answers", "label", "field with the answers"),
    )
    options = QAOptions

    # ----- data ---------------------------------------------------------------------------------
    def parse(
        self, path: str, lines: list[str], fmt: str, columns: dict[str, Any], *, labeled: bool
    ) -> list[QAExample]:
        question, context, answers = columns["question_field"], columns["context_field"], columns["answers_field"]
        squad = _squad_json(path, lines)
        if squad is not None:
            return _qa_squad(path, squad, question, context, answers, labeled)
        return _qa_jsonl(path, records.table(path, lines, fmt), question, context, answers, labeled)

    def example_from(self, values: dict[str, Any], index: int) -> QAExample:
        """An id numbers the inputs, as a line number does (answers are matched to questions by id)."""
        return QAExample(str(index), values["question"], values["context"], [])

    def empty_row(self, example: QAExample) -> dict[str, Any]:
        return {"id": example.id, "answer": None, "error": EMPTY_INPUT}

    # ----- features -----------------------------------------------------------------------------
    def encode(
        self,
        tok: Tokenizer,
        examples: list[QAExample],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[QAFeature]:
        enc = tok(
            [e.question for e in examples],
            [e.context for e in examples],
            truncation="only_second",
            max_length=seq_len,
            stride=stride,
            return_token_type_ids=True,  # the features keep them (a BPE tokenizer returns none unless asked)
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        features = []
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            seq_ids, offsets = enc.sequence_ids(i), enc["offset_mapping"][i]
            context_offsets = [o if s == 1 else None for o, s in zip(offsets, seq_ids)]
            start, end = answer_tokens(examples[sample].answers, context_offsets)
            features.append(
                QAFeature(
                    input_ids=enc["input_ids"][i],
                    token_type_ids=enc["token_type_ids"][i],
                    example=sample,
                    context_offsets=context_offsets,
                    start_positions=start,
                    end_positions=end,
                )
            )
        return features

    def collate(self, features: list[QAFeature], pad_id: int) -> dict[str, torch.Tensor]:
        batch = super().collate(features, pad_id)
        batch["start_positions"] = torch.tensor([f.start_positions for f in features])
        batch["end_positions"] = torch.tensor([f.end_positions for f in features])
        return batch

    def outputs(self, features: list[QAFeature], out: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [
            (s[: f.tokens].float().cpu(), e[: f.tokens].float().cpu())
            for f, s, e in zip(features, out.start_logits, out.end_logits)
        ]

    # ----- results ------------------------------------------------------------------------------
    def report(
        self,
        config: BertConfig,
        features: list[QAFeature],
        outputs: list[tuple[torch.Tensor, torch.Tensor]],
        examples: list[QAExample],
        opts: Opts,
    ) -> dict[str, Any]:
        settings = self.settings(opts)
        pred = qa_predictions(features, outputs, examples, settings.max_answer_length)
        return squad_scores(
            {k: v["answer"] for k, v in pred.items()},
            {e.id: [a[1] for a in e.answers] for e in examples},
            language=settings.qa_language,
        )

    def predictions(
        self,
        config: BertConfig,
        features: list[QAFeature],
        outputs: list[tuple[torch.Tensor, torch.Tensor]],
        examples: list[QAExample],
        opts: Opts,
    ) -> list[dict[str, Any]]:
        preds = qa_predictions(features, outputs, examples, self.settings(opts).max_answer_length)
        return [{"id": e.id, **preds[e.id]} for e in examples]


def answer_tokens(answers: list[tuple[int, str]], context_offsets: list[tuple[int, int] | None]) -> tuple[int, int]:
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


def best_span(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    context_offsets: list[tuple[int, int] | None],
    max_answer_length: int,
    n_best: int = 20,
) -> tuple[float, int, int] | None:
    """(score, start token, end token) of the best valid span: inside the context, start <= end,
    at most max_answer_length tokens; None when the window holds no valid span."""
    starts = torch.topk(start_logits, min(n_best, len(start_logits))).indices.tolist()
    ends = torch.topk(end_logits, min(n_best, len(end_logits))).indices.tolist()
    best: tuple[float, int, int] | None = None
    for s in starts:
        for e in ends:
            if context_offsets[s] is None or context_offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                continue
            score = float(start_logits[s] + end_logits[e])
            if best is None or score > best[0]:
                best = (score, s, e)
    return best


def qa_predictions(
    features: list[QAFeature],
    outputs: list[tuple[torch.Tensor, torch.Tensor]],
    examples: list[QAExample],
    max_answer_length: int,
) -> dict[str, dict[str, Any]]:
    """The best span over all windows of each question, as text and character offsets."""
    best: dict[int, tuple[float, int, int]] = {}
    for f, (start, end) in zip(features, outputs):
        span = best_span(start, end, f.context_offsets, max_answer_length)
        if span and (f.example not in best or span[0] > best[f.example][0]):
            first, last = f.context_offsets[span[1]], f.context_offsets[span[2]]
            assert first is not None and last is not None  # best_span keeps spans inside the context
            best[f.example] = (span[0], first[0], last[1])
    out: dict[str, dict[str, Any]] = {}
    for i, e in enumerate(examples):
        if i in best:
            score, a, b = best[i]
            out[e.id] = {"answer": e.context[a:b], "start": a, "end": b, "score": score}
        else:
            out[e.id] = {"answer": "", "start": -1, "end": -1, "score": None}
    return out


# ----- reading -----------------------------------------------------------------------------------
def _squad_json(path: str, lines: list[str]) -> dict[str, Any] | None:
    """The parsed file when it is one SQuAD JSON object ({"data": [...]}), else None (JSON Lines)."""
    text = "\n".join(lines)
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        first = next(line for line in lines if line.strip())
        try:
            json.loads(first)
            return None  # the first line is an object of its own: JSON Lines (read line by line)
        except json.JSONDecodeError:
            pass
        raise TaskDataError(f"{path}: line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    if isinstance(data, dict) and "data" in data:
        if not isinstance(data["data"], list):
            raise TaskDataError(f'{path}: "data" must be a list of articles, got {records.show(data["data"])}')
        return data
    return None


def _qa_squad(
    path: str, squad: dict[str, Any], question_field: str, context_field: str, answers_field: str, labeled: bool
) -> list[QAExample]:
    examples: list[QAExample]
    ids: dict[str, str]  # id -> where it was first used
    fixed: list[str]  # answers moved to their text (_align)
    examples, ids, fixed = [], {}, []
    for a, article in enumerate(squad["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise TaskDataError(f'{path}: data[{a}]: expected an object with a "paragraphs" list')
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise TaskDataError(f'{where}: expected an object with {context_field!r} and a "qas" list')
            context = records.string(where, None, paragraph, context_field, "context_field", required=True, strip=False)
            for q, qa in enumerate(paragraph["qas"]):
                spot = f"{where}.qas[{q}]"
                if not isinstance(qa, dict):
                    raise TaskDataError(f"{spot}: expected an object, got {records.show(qa)}")
                examples.append(
                    _qa_example(spot, None, qa, context, question_field, answers_field, labeled, ids, fixed)
                )
    return _qa_done(path, examples, fixed)


def _qa_jsonl(
    path: str, table: records.Table, question_field: str, context_field: str, answers_field: str, labeled: bool
) -> list[QAExample]:
    examples: list[QAExample]
    ids: dict[str, str]  # id -> where it was first used
    fixed: list[str]  # answers moved to their text (_align)
    examples, ids, fixed = [], {}, []
    for number, record in table.records:
        assert record is not None  # a blank line is a None record only with keep_empty
        context = records.string(path, number, record, context_field, "context_field", required=True, strip=False)
        examples.append(_qa_example(path, number, record, context, question_field, answers_field, labeled, ids, fixed))
    return _qa_done(path, examples, fixed)


def _qa_example(
    where: str,
    number: int | None,
    record: dict[str, Any],
    context: str,
    question_field: str,
    answers_field: str,
    labeled: bool,
    ids: dict[str, str],
    fixed: list[str],
) -> QAExample:
    spot = records.at(where, number)
    qid = record.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
        raise TaskDataError(f'{spot}: no "id" (a string); every question needs a unique id')
    qid = str(qid)
    label = f"{spot} (id {qid!r})" if number is None else spot
    if qid in ids:
        raise TaskDataError(f"{label}: id {qid!r} was already used at {ids[qid]}; ids must be unique")
    ids[qid] = f"line {number}" if number is not None else where
    question = records.string(where, number, record, question_field, "question_field", required=True)
    answers: list[tuple[int, str]] = []
    if labeled and not record.get("is_impossible", False):
        if answers_field not in record:
            raise TaskDataError(
                f'{label}: no "{answers_field}" field (use [] for an unanswerable question, or read with labeled=False)'
            )
        for start, text in _answer_items(label, record[answers_field]):
            answers.append(_align(label, context, start, text, fixed))
    return QAExample(qid, question, context, answers)


def _answer_items(label: str, value: Any) -> list[tuple[int | None, str]]:
    if isinstance(value, dict) and isinstance(value.get("text"), list):  # {"text": [...], "answer_start": [...]}
        starts = value.get("answer_start", [None] * len(value["text"]))
        if not isinstance(starts, list) or len(starts) != len(value["text"]):
            raise TaskDataError(f"{label}: answers has {len(value['text'])} texts but answer_start does not match")
        value = [{"text": t, "answer_start": s} for t, s in zip(value["text"], starts)]
    if not isinstance(value, list):
        raise TaskDataError(
            f"{label}: answers holds {records.show(value)}; expected a list like "
            '[{"text": "...", "answer_start": 12}]'
        )
    items = []
    for item in value:
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise TaskDataError(
                f'{label}: an answer must be {{"text": "...", "answer_start": N}} with a '
                f"non-empty text, got {records.show(item)}"
            )
        start = item.get("answer_start")
        if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
            raise TaskDataError(f"{label}: answer_start must be a character offset (an integer >= 0), got {start!r}")
        items.append((start, item["text"]))
    return items


def _align(label: str, context: str, start: int | None, text: str, fixed: list[str]) -> tuple[int, str]:
    if start is not None and context[start : start + len(text)] == text:
        return start, text
    found = [m.start() for m in re.finditer(re.escape(text), context)]
    if not found:
        raise TaskDataError(f"{label}: the answer {text!r} does not occur in the context")
    if start is None:
        return found[0], text
    best = min(found, key=lambda s: (abs(s - start), s))
    fixed.append(f"{label}: {text!r} at {start} -> {best}")
    return best, text


def _qa_done(path: str, examples: list[QAExample], fixed: list[str]) -> list[QAExample]:
    if fixed:
        records.warn(
            f"{path}: {len(fixed)} answer(s) were not at their answer_start and were moved to the nearest "
            f"occurrence of their text; first: {fixed[0].removeprefix(path + ': ')}"
        )
    return examples


QA_TASK = QA()
