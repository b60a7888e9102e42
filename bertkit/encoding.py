"""The rows of one Tokenizer call: its texts through the backend as its Plan says, as lists of ids, masks and offsets.

    Tokenizer.__call__ --Plan, Rows(backend, plan, ...)--> Rows.lists(inputs, keys, ...)
      a batch of up to CHUNK_ROWS rows (or any with offsets): one backend call, the rows' encodings kept
      a bigger batch: CHUNK_ROWS rows a call, each chunk's encodings freed, padded here once all are known
      every backend call: the fast path (encode_batch_fast: no offsets, no word ids) unless offsets are asked for;
        long texts cut first where truncation drops their end anyway (cutting.py); without truncation a text over
        PIECE_CHARS goes in pieces (pieces.py); failures said in words (TokenizerError)
      Rows.tracked: the rows again with offsets and word ids, when a BatchEncoding made without is asked for them

The tokenizer passes in what it knows (its backend, special token ids, where a text may be cut, its length
warning): this module never imports tokenizer.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

from tokenizers import Encoding
from tokenizers import Tokenizer as Backend

from .cutting import Cut
from .errors import TokenizerError
from .pieces import Pieces, Row, is_long

# one input of the backend (tokenizers' EncodeInput): a text or a pair of texts; with is_split_into_words, one text's
# words or a pair of word lists
EncodeInput = str | tuple[str, str] | Sequence[str] | tuple[Sequence[str], Sequence[str]]


@dataclass(frozen=True)
class Plan:
    """How one call truncates and pads once transformers' defaults are applied: what the backend is set to."""

    truncation: str | bool = False  # False or one of TRUNCATION
    padding: str | bool = False  # False, "longest" or "max_length"
    max_length: int | None = None  # None: no length asked for, nor implied
    stride: int = 0
    pad_to_multiple_of: int | None = None


class Specials(NamedTuple):
    """The tokenizer's special token ids a row is built and padded with."""

    cls_id: int
    sep_id: int
    pad_id: int
    pad_token: str


FIELDS: dict[str, Callable[[Row], Any]] = {
    "input_ids": lambda e: e.ids,
    "token_type_ids": lambda e: e.type_ids,
    "attention_mask": lambda e: e.attention_mask,
    "special_tokens_mask": lambda e: e.special_tokens_mask,
    "offset_mapping": lambda e: e.offsets,
    "length": lambda e: len(e.ids),
}  # BatchEncoding keys of an Encoding


def row_keys(**wanted: bool) -> list[str]:
    """The BatchEncoding keys a call returns, in FIELDS' order: input_ids, and those of `wanted` that are True."""
    return [key for key in FIELDS if key == "input_ids" or wanted.get(key)]


def apply(backend: Backend, plan: Plan, specials: Specials) -> None:
    """Set the backend's truncation and padding for one call."""
    if plan.truncation:
        backend.enable_truncation(plan.max_length, stride=plan.stride, strategy=plan.truncation)
    else:
        backend.no_truncation()
    if plan.padding:
        backend.enable_padding(
            length=plan.max_length if plan.padding == "max_length" else None,
            pad_to_multiple_of=plan.pad_to_multiple_of,
            pad_id=specials.pad_id,
            pad_type_id=0,
            pad_token=specials.pad_token,
        )
    else:
        backend.no_padding()


class Rows:
    """One call's encoding: its backend, Plan and options; lists() encodes the inputs, tracked() again with offsets.
    `cut_pattern` says where a text may be cut (Tokenizer._cut_pattern), asked only when a text is cut;
    `check_length` warns of rows longer than the model takes (called when no max_length was asked for)."""

    def __init__(
        self,
        backend: Backend,
        plan: Plan,
        specials: Specials,
        cut_pattern: Callable[[], re.Pattern[str] | None],
        check_length: Callable[[list[Row]], None],
        *,
        add_special_tokens: bool,
        words: bool,
        batched: bool,
    ) -> None:
        self.backend, self.plan, self.specials = backend, plan, specials
        self.cut_pattern, self.check_length = cut_pattern, check_length
        self.add_special_tokens, self.words, self.batched = add_special_tokens, words, batched
        self.inputs: list[EncodeInput] = []  # the inputs as encoded (long ones cut), for tracked()

    def lists(
        self, inputs: list[EncodeInput], keys: list[str], pairs: bool, overflowing: bool, chunk_rows: int
    ) -> tuple[dict[str, Any], list[Row] | None, Callable[[], list[Row]] | None]:
        """The lists `keys` of every row of `inputs` (any `pairs` among them); the rows' encodings, None for a batch
        of more than `chunk_rows` rows (encoded that many at a time); and what makes them again with offsets and
        word ids (tracked), None where they have them. With `overflowing` each input's windows follow it as rows
        of their own."""
        plan = self.plan
        # Without offsets the backend's fast path skips tracking them (and word ids): less work per text.
        # BatchEncoding encodes again with tracking if word_ids() / sequence_ids() / char_to_token() ask for them.
        full = "offset_mapping" in keys or overflowing
        retrack = None if full else self.tracked
        cuts = plan.truncation in ("longest_first", "only_first") and not (pairs or self.words or overflowing)
        cut = Cut(plan.max_length, self.cut_pattern() if cuts and not plan.stride else None)
        if full or len(inputs) <= chunk_rows:
            self.inputs, encodings = cut.encode(inputs, lambda texts: self.encode(texts, full))
            if plan.max_length is None:
                self.check_length(encodings)
            return (*rows_data(encodings, keys, overflowing), retrack)
        # a big batch: chunk_rows rows at a time, padded here once all are known; its encodings are not kept
        data: dict[str, list[Any]] = {key: [] for key in keys}
        self.inputs, unpadded = inputs, replace(plan, padding=False)
        for start in range(0, len(inputs), chunk_rows):
            texts, encodings = cut.encode(
                inputs[start : start + chunk_rows], lambda texts: self.encode(texts, False, unpadded)
            )
            inputs[start : start + len(texts)] = texts
            if plan.max_length is None:
                self.check_length(encodings)
            for key in keys:
                data[key] += [FIELDS[key](e) for e in encodings]
            del encodings
        if plan.padding:
            pad_lists(data, plan, self.specials.pad_id)
        return data, None, retrack

    def tracked(self) -> list[Row]:
        """The rows of the inputs as encoded, with offsets and word ids (BatchEncoding's retrack)."""
        return self.encode(self.inputs, True)

    def encode(self, texts: list[EncodeInput], track: bool, plan: Plan | None = None) -> list[Row]:
        """The backend's encodings of `texts` as `plan` (the call's) says; offsets and word ids only when `track`
        (its fast path skips them); a text over PIECE_CHARS encoded whole goes in pieces (_whole)."""
        plan = plan if plan is not None else self.plan
        backend, add_special_tokens = self.backend, self.add_special_tokens
        run = backend.encode_batch if track or not hasattr(backend, "encode_batch_fast") else backend.encode_batch_fast
        try:
            if plan.truncation or self.words:
                apply(backend, plan, self.specials)
                return run(texts, add_special_tokens=add_special_tokens, is_pretokenized=self.words)
            return self._whole(
                cast("list[str | tuple[str, str]]", texts),
                plan,
                lambda batch: run(batch, add_special_tokens=add_special_tokens),
            )
        except BaseException as e:  # the backend's own checks; a Rust panic is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            check_surrogates(texts, self.batched, self.words)
            raise TokenizerError(
                f"cannot encode with truncation={plan.truncation!r}, max_length={plan.max_length}, "
                f"stride={plan.stride}: {e} (a stride must leave room for new tokens in every window)"
            ) from None

    def _whole(
        self, texts: list[str | tuple[str, str]], plan: Plan, run: Callable[[list[EncodeInput]], list[Encoding]]
    ) -> list[Row]:
        """Texts (or pairs) encoded without truncation by `run` (the backend), except that one with a text over
        PIECE_CHARS characters is encoded in pieces (a JoinedEncoding); all padded as the plan says."""
        long = {i for i, item in enumerate(texts) if is_long(item)}
        if not long:
            apply(self.backend, plan, self.specials)
            return list(run(list(texts)))
        apply(self.backend, replace(plan, padding=False), self.specials)  # the backend pads only the rows it sees
        pieces = Pieces(self.backend, self.cut_pattern())
        s = self.specials
        short = iter(run([item for i, item in enumerate(texts) if i not in long]))
        rows = [
            pieces.encode(item, (s.cls_id, s.sep_id) if self.add_special_tokens else None) if i in long else next(short)
            for i, item in enumerate(texts)
        ]
        if plan.padding:
            target = pad_target([len(row) for row in rows], plan)
            for row in rows:
                row.pad(target, pad_id=s.pad_id, pad_type_id=0, pad_token=s.pad_token)
        return rows


def rows_data(encodings: list[Row], keys: list[str], overflowing: bool) -> tuple[dict[str, Any], list[Row]]:
    """The lists `keys` of each row, and the rows: with `overflowing`, each encoding's windows follow it as rows of
    their own and overflow_to_sample_mapping says which input each row came from."""
    rows, sample = encodings, None
    if overflowing:
        rows, sample = [], []
        for i, enc in enumerate(encodings):
            for window in [enc, *enc.overflowing]:
                rows.append(window)
                sample.append(i)
    data: dict[str, Any] = {key: [FIELDS[key](e) for e in rows] for key in keys}
    if sample is not None:
        data["overflow_to_sample_mapping"] = sample
    return data, rows


def pad_target(lengths: list[int], plan: Plan) -> int:
    """The length the backend pads a batch to (tokenizers' pad_encodings: the longest row or max_length, then up
    to a multiple of pad_to_multiple_of)."""
    target = plan.max_length if plan.padding == "max_length" else max(lengths, default=0)
    assert target is not None  # Tokenizer._plan gives padding="max_length" a max_length
    if plan.pad_to_multiple_of and target % plan.pad_to_multiple_of:
        target += plan.pad_to_multiple_of - target % plan.pad_to_multiple_of
    return target


def pad_lists(data: dict[str, list[Any]], plan: Plan, pad_id: int) -> None:
    """Pad rows as the backend pads a batch (to pad_target; rows already as long are left alone; on the right)."""
    target = pad_target([len(r) for r in data["input_ids"]], plan)
    fill = {
        "input_ids": pad_id,
        "token_type_ids": 0,
        "attention_mask": 0,
        "special_tokens_mask": 1,
        "offset_mapping": (0, 0),
    }
    for key, value in fill.items():
        for row in data.get(key, ()):
            if len(row) < target:
                row.extend([value] * (target - len(row)))
    if "length" in data:
        data["length"] = [max(n, target) for n in data["length"]]


def check_surrogates(texts: Sequence[EncodeInput], batched: bool, split: bool = False) -> None:
    """Raise a TokenizerError naming the first text (and word) with a lone surrogate, if any: the backend takes
    only text that UTF-8 can hold, and says so in words of its own (a TypeError, or a panic)."""
    for i, item in enumerate(texts):
        parts = item if isinstance(item, tuple) else (item,)
        for j, part in enumerate(parts):
            name = (f"text[{i}]" if batched else "text") if j == 0 else (f"text_pair[{i}]" if batched else "text_pair")
            words = part if split else [part]
            for w, word in enumerate(words):
                found = _SURROGATE.search(word) if isinstance(word, str) else None
                if found:
                    raise TokenizerError(
                        f"{name}{f', word {w}' if split else ''}: character {found.start()} is a lone surrogate "
                        f"({found.group()!r}), half of a UTF-16 pair, which is not text (bytes decoded with "
                        "errors='surrogateescape', or a JSON escape of half a pair?); decode the text properly, or "
                        "replace such characters: text.encode('utf-8', 'replace').decode('utf-8')"
                    )


_SURROGATE = re.compile("[\ud800-\udfff]")
