"""Masked-language-model masking of pretraining rows (MaskingCollator), as BERT does it.

Masking picks tokens to predict in padded rows (rows.py) and corrupts them as BERT does:

    selection   each ordinary token (not special, not padding) is picked with probability
                mlm_probability; with wwm=True each whole word is picked with that probability and
                all its tokens go together (so about mlm_probability of the tokens are covered).
                A row with a token to pick gets at least one (as Google's create_pretraining_data.py).
    corruption  of the picked tokens 80% become [MASK], 10% a random ordinary token, 10% stay
    labels      the original id at picked positions, -100 (ignored by the loss) everywhere else

Every draw is a pure function of (seed, step, the row's place in the global batch, the token's column or
the word's number) (seeded.py): a resumed run masks every batch exactly as before, each epoch (new steps)
gets fresh masks, and under torchrun each process masks only its own rows, exactly as one process
masking the whole batch would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..deprecated import moved
from ..errors import ConfigError
from ..labels import IGNORE
from .seeded import integers, uniform

if TYPE_CHECKING:
    from .rows import RowBatch

SELECT, CORRUPT, REPLACE = 11, 12, 13  # the seeded streams of the three draws


@dataclass
class MaskingCollator:
    """RowBatch -> dict of (B, S) int64 tensors: input_ids (corrupted), token_type_ids, attention_mask, labels
    (+ next_sentence_label). attention_mask is 1 on tokens, or the piece numbers (1, 2, ...) of packed rows."""

    vocab_size: int
    mask_id: int
    pad_id: int
    special_ids: tuple[int, ...]
    mlm_probability: float = 0.15
    wwm: bool = False
    seed: int = 0
    _random_ids: np.ndarray = field(init=False, repr=False, compare=False)
    _special: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        for name in ("mask_id", "pad_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ConfigError(f"{name}={getattr(self, name)} is outside the vocabulary (size {self.vocab_size})")
        self.special_ids = tuple(sorted({int(i) for i in self.special_ids} | {self.mask_id, self.pad_id}))
        self._special = np.zeros(self.vocab_size, dtype=bool)
        self._special[[i for i in self.special_ids if 0 <= i < self.vocab_size]] = True
        self._random_ids = np.flatnonzero(~self._special)  # replacements: any id but the special ones
        if len(self._random_ids) == 0:
            raise ConfigError("the vocabulary holds only special tokens: no random replacement is possible")

    def __call__(self, rows: RowBatch, step: int, positions: Sequence[int] | np.ndarray) -> dict[str, torch.Tensor]:
        """Mask `rows` (a rows.RowBatch), the rows at `positions` (B,) of the global batch of `step`."""
        input_ids = rows.input_ids
        if input_ids.size == 0:
            raise ConfigError("cannot collate an empty batch")
        if input_ids.min() < 0 or input_ids.max() >= self.vocab_size:
            raise ConfigError(
                f"input ids outside the vocabulary [0, {self.vocab_size}): min {input_ids.min()}, max {input_ids.max()}"
            )
        if self.wwm and rows.word_ids is None:
            raise ConfigError("whole-word masking needs the rows' word ids (rows.batch(..., words=True))")
        row = np.asarray(positions, dtype=np.int64)[:, None]  # (B, 1)
        column = np.arange(input_ids.shape[1])[None, :]  # (1, S)
        selected = self._select(input_ids, rows.attention_mask, rows.word_ids if self.wwm else None, step, row, column)
        # of the selected: 80% [MASK], 10% random, 10% unchanged (one draw per position)
        u = uniform(self.seed, CORRUPT, step, row, column)
        random_ids = self._random_ids[integers(self.seed, REPLACE, len(self._random_ids), step, row, column)]
        corrupted = np.where(selected & (u < 0.8), self.mask_id, input_ids)
        corrupted = np.where(selected & (u >= 0.8) & (u < 0.9), random_ids, corrupted)
        batch = {
            "input_ids": corrupted,
            "token_type_ids": rows.token_type_ids,
            "attention_mask": rows.attention_mask,
            "labels": np.where(selected, input_ids, IGNORE),
        }
        if rows.next_sentence_label is not None:
            batch["next_sentence_label"] = rows.next_sentence_label
        return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.int64)) for k, v in batch.items()}

    def _select(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        word_ids: np.ndarray | None,
        step: int,
        row: np.ndarray,
        column: np.ndarray,
    ) -> np.ndarray:
        """(B, S) bool: the positions to predict."""
        candidate = (attention_mask > 0) & ~self._special[input_ids]
        if word_ids is None:
            draws = uniform(self.seed, SELECT, step, row, column)  # (B, S)
        else:
            # one draw per (row, word): a word is picked with probability p, so each token is covered
            # with probability p (in expectation p of the tokens, whatever the word lengths)
            candidate &= word_ids >= 0
            draws = uniform(self.seed, SELECT, step, row, np.maximum(word_ids, 0))
        draws = np.broadcast_to(draws, input_ids.shape)
        selected = candidate & (draws < self.mlm_probability)
        lonely = candidate.any(axis=1) & ~selected.any(axis=1)  # rows that may have a target and have none
        for b in np.flatnonzero(lonely):  # the candidate with the smallest draw (its whole word with wwm)
            pick = np.flatnonzero(candidate[b])[np.argmin(draws[b][candidate[b]])]
            if word_ids is None:
                selected[b, pick] = True
            else:
                selected[b] = candidate[b] & (word_ids[b] == word_ids[b, pick])
        return selected


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "id_batch": "bertkit.data.batching:id_batch",
        },
    )
