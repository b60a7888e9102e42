"""tag: one tag per token (named entities as BIO / IOBES tags).

    data      .conll / .bio / .iob ("token tag" per line, a blank line between sentences), .jsonl
              (lists `tokens` + `tags`), .csv / .tsv (tokens and tags as space-separated strings);
              builtin:peoples-daily-ner (PER / LOC / ORG)
    model     BertForTokenClassification: each token's vector -> one logit per tag
    windows   a long sentence gives several windows; a word's tag comes from its first piece in the
              first window that holds it
    metrics   entity-level precision / recall / F1 (as seqeval), per entity type
    predict   {"tokens", "tags", "entities": [{"type", "text", "start", "end"}]}

Tags: O, or B- / I- / E- / S- + type (BIO or IOBES). Tokens must be non-empty. No entity in a tag
file is a BertkitWarning, not an error. Plain text to predict on is tagged per character (Chinese).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

from ..data import records
from ..data.batching import pad_rows
from ..data.builtin import peoples_daily_ner
from ..data.records import TaskDataError
from ..heads import IGNORE, BertForTokenClassification
from ..metrics import ENTITY_SCHEMES, bio_entities, entity_report
from ..options import opt
from ..text import is_empty_text
from .base import EMPTY_INPUT, Feature, Field, Opts, Task, label_id, model_inputs

if TYPE_CHECKING:
    from ..config import BertConfig
    from ..tokenizer import Tokenizer

TAG_PREFIXES = ("B", "I", "E", "S")


@dataclass
class TagExample:
    tokens: list[str]  # words or characters
    tags: list[str] | None = None  # one BIO (or IOBES) tag per token


@dataclass(kw_only=True)
class TagFeature(Feature):
    words: list[int | None]  # per token: the index of the word it starts (None: a later piece, [CLS], [SEP])
    labels: list[int] | None = None  # per token: its word's tag id on first pieces, -100 (IGNORE) elsewhere


@dataclass
class TagOptions:
    entity_scheme: str = opt(
        "seqeval",
        "tag: how tags make entities: seqeval (lenient: O I-LOC is an entity; "
        "seqeval's default mode), conlleval (lenient, as conlleval.pl: S- tags end "
        "nothing) or strict IOB2 / IOBES (seqeval's mode='strict')",
        choices=list(ENTITY_SCHEMES),
    )


class Tag(Task[TagExample, TagFeature]):
    """A tag per token: each token's vector -> logits over the tags."""

    name, example, model_class = "tag", TagExample, BertForTokenClassification
    metric, formats = "f1", ("conll", "jsonl", "csv", "tsv")
    fields = (Field("tokens", "texts", "field with the tokens"), Field("tags", "label", "field with the BIO tags"))
    options = TagOptions
    labelled_outputs = True
    loss_over_tokens = True

    # ----- data ---------------------------------------------------------------------------------
    def parse(
        self, path: str, lines: list[str], fmt: str, columns: dict[str, Any], *, labeled: bool
    ) -> list[TagExample]:
        return _read(path, records.table(path, lines, fmt), columns["tokens_field"], columns["tags_field"], labeled)

    def builtin_examples(self, split: str, labeled: bool) -> list[TagExample]:
        return [TagExample(chars, tags if labeled else None) for chars, tags in peoples_daily_ner(split)]

    def label_names(self, examples: list[TagExample]) -> list[str]:
        """ "O" first, then by entity type, B- before I- (then E-, S-). Every entity type gets all the tags of
        its scheme (B- and I-; and E-, S- when the data uses IOBES) even when one never occurs."""
        found = {tag for ex in examples for tag in ex.tags or []}
        if not found:
            raise TaskDataError("label_list: the examples have no tags (read with labeled=False?)")
        types = {tag[2:] for tag in found if tag != "O"}
        prefixes = TAG_PREFIXES if any(tag[0] in "ES" for tag in found if tag != "O") else TAG_PREFIXES[:2]
        return ["O"] + [f"{p}-{kind}" for kind in sorted(types) for p in prefixes]

    def empty_row(self, example: TagExample) -> dict[str, Any]:
        return {"tokens": example.tokens, "tags": None, "entities": [], "error": EMPTY_INPUT}

    # ----- features -----------------------------------------------------------------------------
    def encode(
        self,
        tok: Tokenizer,
        examples: list[TagExample],
        seq_len: int,
        stride: int,
        label2id: dict[str, int] | None,
        problem_type: str | None,
    ) -> list[TagFeature]:
        enc = tok(
            [e.tokens for e in examples],  # a batch of word lists (is_split_into_words)
            is_split_into_words=True,
            truncation=True,
            max_length=seq_len,
            stride=stride,
            return_token_type_ids=True,  # the features keep them (a BPE tokenizer returns none unless asked)
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        features = []
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            # a word's first piece starts at offset 0 of that word (also when a window cuts the word)
            words = [
                w if w is not None and off[0] == 0 else None
                for w, off in zip(enc.word_ids(i), enc["offset_mapping"][i])
            ]
            tags = examples[sample].tags  # the first piece of each word carries its tag; the rest are skipped
            labels = None
            if tags is not None:
                assert label2id is not None  # labelled examples are encoded with the model's label2id
                labels = [label_id(tags[w], label2id) if w is not None else IGNORE for w in words]
            features.append(
                TagFeature(
                    input_ids=enc["input_ids"][i],
                    token_type_ids=enc["token_type_ids"][i],
                    example=sample,
                    words=words,
                    labels=labels,
                )
            )
        return features

    def collate(self, features: list[TagFeature], pad_id: int) -> dict[str, torch.Tensor]:
        batch = model_inputs(features, pad_id)
        if features[0].labels is not None:  # per token: padded with IGNORE, which no loss counts
            rows = cast("list[list[int]]", [f.labels for f in features])  # a batch is labelled, or not, as a whole
            batch["labels"] = torch.from_numpy(pad_rows(rows, IGNORE))
        return batch

    def outputs(self, features: list[TagFeature], out: Any) -> list[torch.Tensor]:
        return [lg[: f.tokens].float().cpu() for f, lg in zip(features, out.logits)]

    # ----- results ------------------------------------------------------------------------------
    def report(
        self,
        config: BertConfig,
        features: list[TagFeature],
        outputs: list[torch.Tensor],
        examples: list[TagExample],
        opts: Opts,
    ) -> dict[str, Any]:
        return entity_report(
            cast("list[list[str]]", [e.tags for e in examples]),  # examples to evaluate on are labelled
            tag_predictions(features, outputs, examples, config.id2label),
            scheme=self.settings(opts).entity_scheme,
        )

    def predictions(
        self,
        config: BertConfig,
        features: list[TagFeature],
        outputs: list[torch.Tensor],
        examples: list[TagExample],
        opts: Opts,
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]]
        scheme, rows = self.settings(opts).entity_scheme, []
        for e, tags in zip(examples, tag_predictions(features, outputs, examples, config.id2label)):
            offsets: list[int]
            offsets, pos = [], 0  # character offsets of each token in the joined text (characters: no spaces)
            for token in e.tokens:
                offsets.append(pos)
                pos += len(token)
            text = "".join(e.tokens)
            ents = [
                {
                    "type": kind,
                    "text": text[offsets[a] : offsets[b - 1] + len(e.tokens[b - 1])],
                    "start": offsets[a],
                    "end": offsets[b - 1] + len(e.tokens[b - 1]),
                }
                for kind, a, b in bio_entities(tags, scheme)
            ]
            rows.append({"tokens": e.tokens, "tags": tags, "entities": ents})
        return rows

    def learning_warning(self, report: dict[str, Any] | None) -> str | None:
        if report and report.get("n_true", 0) > 0 and report.get("n_pred", 1) == 0:
            return f"the last evaluation found no entity at all (the data has {report['n_true']})"
        return None


def tag_predictions(
    features: list[TagFeature], outputs: list[torch.Tensor], examples: list[TagExample], id2label: dict[int, str]
) -> list[list[str]]:
    """Each word's tag from its first piece; a word seen in several windows keeps the first window's."""
    preds: list[list[str | None]] = [[None] * len(e.tokens) for e in examples]
    for f, logits in zip(features, outputs):
        best = logits.argmax(-1).tolist()
        for j, w in enumerate(f.words):  # only first pieces carry a word index
            if w is not None and preds[f.example][w] is None:
                preds[f.example][w] = id2label[best[j]]
    return [[t or "O" for t in p] for p in preds]


# ----- reading -----------------------------------------------------------------------------------
def _read(path: str, table: records.Table, tokens_field: str, tags_field: str, labeled: bool) -> list[TagExample]:
    if table.fmt == "conll":
        tokens_field, tags_field = "tokens", "tags"
    else:
        table.require(path, tokens_field, "tokens", "tokens_field")
        if labeled:
            table.require(path, tags_field, "tags", "tags_field")
    examples: list[TagExample] = []
    for number, record in table.records:
        assert record is not None  # a blank line is a None record only with keep_empty
        if table.fmt == "conll":
            tokens, tags = record["tokens"], record["tags"]
            if labeled and (tags is None or None in tags):
                missing = record["lines"][tags.index(None)] if tags is not None else number
                raise TaskDataError(
                    f'{path}: line {missing}: a token without a tag; a line is "token tag" (or read with labeled=False)'
                )
        else:
            tokens = _sequence(path, number, record, tokens_field, "tokens_field", table.fmt)
            tags = _sequence(path, number, record, tags_field, "tags_field", table.fmt) if labeled else None
        for i, token in enumerate(tokens):
            if is_empty_text(token):
                raise TaskDataError(
                    f"{path}: line {number}: token {i} is empty; every token needs a character "
                    "the tokenizer keeps (not only zero-width or control characters)"
                )
        if not labeled:
            examples.append(TagExample(list(tokens)))
            continue
        if len(tags) != len(tokens):
            raise TaskDataError(
                f"{path}: line {number}: {len(tokens)} tokens but {len(tags)} tags; every token needs exactly one tag"
            )
        for i, tag in enumerate(tags):
            if tag != "O" and not (len(tag) > 2 and tag[0] in TAG_PREFIXES and tag[1] == "-"):
                at = record["lines"][i] if table.fmt == "conll" else number
                raise TaskDataError(
                    f"{path}: line {at}: tag {tag!r} (token {tokens[i]!r}) is not O or B-/I-/E-/S- + "
                    "an entity type, e.g. B-PER"
                )
        examples.append(TagExample(list(tokens), list(tags)))
    if labeled and all(tag == "O" for ex in examples for tag in ex.tags or ()):  # labelled: tags never None
        records.warn(
            f"{path}: every tag is 'O': there is no entity to learn; check {records.option('tags_field')} and the file"
        )
    return examples


def _sequence(path: str, number: int, record: dict[str, Any], field: str, kwarg: str, fmt: str) -> list[str]:
    value = records.get(path, number, record, field, kwarg)
    if fmt != "jsonl":
        return value.split()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise TaskDataError(
            f"{path}: line {number}: field {field!r} holds {records.show(value)}; expected a list of "
            'strings like ["EU", "rejects"]'
        )
    return value


TAG = Tag()
