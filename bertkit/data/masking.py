"""Masked-language-model batches: pad the rows, pick tokens to predict, corrupt them as BERT does.

    selection   each ordinary token (not special, not padding) is picked with probability
                mlm_probability; with wwm=True each whole word is picked with that probability and
                all its tokens go together (so about mlm_probability of the tokens are covered)
    corruption  of the picked tokens 80% become [MASK], 10% a random ordinary token, 10% stay
    labels      the original id at picked positions, -100 (ignored by the loss) everywhere else

Masks are a pure function of (seed, step, the batch's ids): the training loop passes its global step,
so a resumed run masks every batch exactly as before and each epoch (new steps) gets fresh masks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from ..errors import ConfigError
from ..labels import IGNORE
from .examples import Example



@dataclass
class MaskingCollator:
    """Examples -> dict of input_ids, token_type_ids, attention_mask, labels (+ next_sentence_label),
    all (B, S) int64 tensors right-padded to the longest row. Picklable, for DataLoader workers.
    attention_mask is 1 on tokens, or an example's document_ids (1, 2, ...) in packed rows; 0 = padding."""

    vocab_size: int
    mask_id: int
    pad_id: int
    special_ids: tuple[int, ...]
    mlm_probability: float = 0.15
    wwm: bool = False
    seed: int = 0
    _random_ids: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        for name in ("mask_id", "pad_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ConfigError(f"{name}={getattr(self, name)} is outside the vocabulary (size {self.vocab_size})")
        self.special_ids = tuple(sorted({int(i) for i in self.special_ids} | {self.mask_id, self.pad_id}))
        keep = torch.ones(self.vocab_size, dtype=torch.bool)
        keep[[i for i in self.special_ids if 0 <= i < self.vocab_size]] = False
        self._random_ids = keep.nonzero().flatten()  # replacements: any id but the special ones
        if len(self._random_ids) == 0:
            raise ConfigError("the vocabulary holds only special tokens: no random replacement is possible")

    def __call__(self, examples: list[Example], step: int = 0) -> dict[str, torch.Tensor]:
        if not examples:
            raise ConfigError("cannot collate an empty list of examples")
        input_ids, token_type_ids, attention_mask = self._pad(examples)
        word_ids = self._pad_words(examples, input_ids.shape[1]) if self.wwm else None
        g = torch.Generator().manual_seed(_seed(self.seed, step, input_ids))
        selected = self._select(input_ids, attention_mask, word_ids, g)
        labels = torch.where(selected, input_ids, IGNORE)
        # of the selected: 80% [MASK], 10% random, 10% unchanged (one draw per position)
        u = torch.rand(input_ids.shape, generator=g)
        random_ids = self._random_ids[torch.randint(len(self._random_ids), input_ids.shape, generator=g)]
        corrupted = torch.where(selected & (u < 0.8), self.mask_id, input_ids)
        corrupted = torch.where(selected & (u >= 0.8) & (u < 0.9), random_ids, corrupted)
        batch = {"input_ids": corrupted, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
                 "labels": labels}
        nsp = [e.next_sentence_label for e in examples]
        if any(label is not None for label in nsp):
            if any(label is None for label in nsp):
                raise ConfigError("some examples have a next_sentence_label and some do not; do not mix NSP and "
                                  "packed examples in one batch")
            batch["next_sentence_label"] = torch.tensor(nsp, dtype=torch.long)
        return batch

    # ----- pieces --------------------------------------------------------------------------------
    def _pad(self, examples: list[Example]):
        B, S = len(examples), max(len(e.input_ids) for e in examples)
        input_ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((B, S), dtype=torch.long)
        attention_mask = torch.zeros((B, S), dtype=torch.long)
        for i, e in enumerate(examples):
            n = len(e.input_ids)
            if len(e.token_type_ids) != n:
                raise ConfigError(f"example {i}: {n} input_ids but {len(e.token_type_ids)} token_type_ids")
            input_ids[i, :n] = torch.tensor(e.input_ids, dtype=torch.long)
            token_type_ids[i, :n] = torch.tensor(e.token_type_ids, dtype=torch.long)
            if e.document_ids is None:
                attention_mask[i, :n] = 1
            elif len(e.document_ids) != n:
                raise ConfigError(f"example {i}: {n} input_ids but {len(e.document_ids)} document_ids")
            else:  # packed documents: 1, 1, 2, 2, ... (the model keeps attention inside each)
                attention_mask[i, :n] = torch.tensor(e.document_ids, dtype=torch.long)
        if input_ids.min() < 0 or input_ids.max() >= self.vocab_size:
            raise ConfigError(f"input ids outside the vocabulary [0, {self.vocab_size}): "
                              f"min {input_ids.min().item()}, max {input_ids.max().item()}")
        return input_ids, token_type_ids, attention_mask

    def _pad_words(self, examples: list[Example], S: int) -> torch.Tensor:
        words = torch.full((len(examples), S), -1, dtype=torch.long)
        for i, e in enumerate(examples):
            if len(e.word_ids) != len(e.input_ids):
                raise ConfigError(f"example {i}: {len(e.input_ids)} input_ids but {len(e.word_ids)} word_ids; "
                                  "whole-word masking needs a word id per token")
            words[i, :len(e.word_ids)] = torch.tensor(e.word_ids, dtype=torch.long)
        return words

    def _select(self, input_ids, attention_mask, word_ids, g) -> torch.Tensor:
        """(B, S) bool: the positions to predict."""
        candidate = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(self.special_ids))
        if word_ids is None:
            selected = candidate & (torch.rand(input_ids.shape, generator=g) < self.mlm_probability)
        else:
            # one draw per (row, word): a word is picked with probability p, so each token is covered
            # with probability p (in expectation p of the tokens, whatever the word lengths)
            candidate &= word_ids >= 0
            draws = torch.rand((input_ids.shape[0], int(word_ids.max().clamp(min=0)) + 1), generator=g)
            selected = candidate & (draws.gather(1, word_ids.clamp(min=0)) < self.mlm_probability)
        if not selected.any() and candidate.any():  # at least one target, so the loss is defined
            pick = candidate.flatten().nonzero().flatten()
            index = pick[torch.randint(len(pick), (1,), generator=g)].item()
            row, col = divmod(index, input_ids.shape[1])
            if word_ids is None:
                selected[row, col] = True
            else:
                selected[row] = candidate[row] & (word_ids[row] == word_ids[row, col])
        return selected


def _seed(seed: int, step: int, input_ids: torch.Tensor) -> int:
    """A 63-bit generator seed from (seed, step, the batch's ids): the same inputs always give the same
    masks, while different steps (or different batches at one step) give unrelated ones."""
    h = hashlib.blake2b(f"{int(seed)}:{int(step)}:{tuple(input_ids.shape)}".encode(), digest_size=8)
    h.update(input_ids.numpy().tobytes())
    return int.from_bytes(h.digest(), "little") & (2**63 - 1)
