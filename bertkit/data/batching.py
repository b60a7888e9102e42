"""Rows of token ids of different lengths padded into one batch: the one place padding is done for tasks,
pretraining rows and inference.

    pad_rows(rows, value) -> (B, S) numpy array, S the longest row, each row followed by `value`
    id_batch(ids, pad_id, token_type_ids) -> the model's inputs: input_ids, token_type_ids, attention_mask
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch


def pad_rows(rows: Sequence[Sequence[int] | np.ndarray], value: int = 0, dtype: npt.DTypeLike = np.int64) -> np.ndarray:
    """Rows of different lengths (lists or 1-D arrays) -> one (B, S) array, S the longest row, each row
    followed by `value` (pad id, 0, -100, ...). Nested rows (a batch of choices) are flattened first by the
    caller and reshaped after: pad_rows(all choices).reshape(B, C, -1)."""
    out = np.full((len(rows), max((len(r) for r in rows), default=0)), value, dtype=dtype)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def id_batch(
    ids: Sequence[Sequence[int]], pad_id: int, token_type_ids: Sequence[Sequence[int]] | None = None
) -> dict[str, torch.Tensor]:
    """The model's inputs for rows of token ids, padded to the longest: input_ids (pad_id after each row),
    token_type_ids (0 where not given), attention_mask (1 on each row's tokens, 0 on its padding); (B, S) int64."""
    import torch  # here, not at the top: pretraining rows and `bertkit prepare`'s workers pad without torch

    types = token_type_ids if token_type_ids is not None else [[0] * len(r) for r in ids]
    return {
        "input_ids": torch.from_numpy(pad_rows(ids, pad_id)),
        "token_type_ids": torch.from_numpy(pad_rows(types, 0)),
        "attention_mask": torch.from_numpy(pad_rows([[1] * len(r) for r in ids], 0)),
    }
