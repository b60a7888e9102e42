"""What one optimizer step is made of: its micro-batches (Batches: what the loop asks of the data), the
examples each holds (StepSampler: the data order), and the weight of each one's loss (LossWeights).

StepSampler and LossWeights keep a step the same however it is split: 2 processes of batch 4 see the examples
1 process of batch 8 sees, and their summed, weighted gradients are the gradient of the one mean it computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..data.seeded import Permutation
from ..errors import TrainingError
from .devices import all_processes


class Batches(Protocol):
    """The data a run trains on (train's `data`), addressed by step, so a resumed run sees the same batches."""

    def batch(self, step: int, micro: int) -> dict[str, Any]:
        """This process's share of micro-batch `micro` of optimizer step `step` (deterministic). A batch
        whose loss is a mean over counted tokens (MLM's masked ones, tagging's labelled ones) says how many
        under "loss_units": an int, or {unit name: count} for a loss that sums means over several kinds
        (ELECTRA: masked tokens and real tokens); see LossWeights. Every other value is a tensor (Any: a dict
        type cannot give one key a type of its own)."""


LOSS_UNITS = "loss_units"
TOKENS = "tokens"  # the unit an int "loss_units" counts


@dataclass(frozen=True)
class LossWeights:
    """What a micro-batch's mean losses are multiplied by, so that the step's gradient (summed over the
    micro-batches, averaged over the processes by DDP) is the gradient of one mean over the whole step,
    as one process holding every row would compute it.

    rows:   for a mean over rows: 1 / grad_accum (every micro-batch of every process holds as many rows)
    tokens: for a mean over counted tokens: units x world / (the units of the step, all processes), since
            micro-batches hold different numbers of them (2 processes x 4 rows then equal 1 x 8 rows);
            1 / grad_accum, as rows, when the batches do not count their units
    units:  the same weight for each named unit when "loss_units" is a dict (units["tokens"] is `tokens`)
    """

    rows: float
    tokens: float
    units: dict[str, float] = field(default_factory=dict)

    def of(self, unit: str) -> float:
        """The weight of a mean over `unit` (a name the batch counted; rows' weight if it counted none)."""
        return self.units.get(unit, self.tokens if unit == TOKENS else self.rows)


def loss_weights(units: list[int | dict[str, int]], grad_accum: int, world: int) -> list[LossWeights]:
    """The weights of a step's micro-batches, given how many units each holds on this process (one
    all-reduce of one integer per unit name under torchrun)."""
    counts = [u if isinstance(u, dict) else {TOKENS: u} for u in units]
    names = sorted(counts[0])
    totals = all_processes([sum(int(c[n]) for c in counts) for n in names], world)
    weights = []
    for c in counts:
        per = {n: int(c[n]) * world / max(1, total) for n, total in zip(names, totals)}
        weights.append(LossWeights(rows=1 / grad_accum, tokens=per.get(TOKENS, 1 / grad_accum), units=per))
    return weights


class StepSampler:
    """Which examples make up global micro-batch `index`: a seeded order per epoch, walked in turn.

    Every process walks the same global batches (batch_size x world) and takes its own rows, so a run with
    2 processes of batch 4 sees what 1 process of batch 8 sees, and a resumed run sees what the
    uninterrupted one saw. The order of an epoch is a seeded permutation (data/seeded.py) evaluated only at
    the positions asked for: no list of the data's size is ever made, whatever the number of examples.
    """

    def __init__(self, n: int, batch_size: int, grad_accum: int, seed: int, rank: int = 0, world: int = 1) -> None:
        self.n, self.batch_size, self.grad_accum, self.seed = n, batch_size, grad_accum, seed
        self.rank, self.world = rank, world
        self.global_batch = batch_size * world
        if n < self.global_batch:
            raise TrainingError(
                f"the data gives {n} examples, fewer than one batch of {self.global_batch}: "
                "lower --batch-size, or add data"
            )
        self._order: tuple[int, Permutation] | None = None  # the last epoch asked for, and its order

    def order(self, epoch: int) -> Permutation:
        """The seeded order of epoch `epoch`'s examples."""
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, Permutation(self.n, self.seed * 1_000_003 + epoch))
        return self._order[1]

    def own_rows(self) -> np.ndarray:
        """This process's rows of a global batch: rank r holds places r x batch_size onwards."""
        return self.rank * self.batch_size + np.arange(self.batch_size)

    def indices(self, step: int, micro: int) -> np.ndarray:
        """The examples of this process's rows of micro-batch `micro` of step `step` (batch_size,)."""
        start = (step * self.grad_accum + micro) * self.global_batch
        epoch, place = np.divmod(start + self.own_rows(), self.n)
        out = np.empty(self.batch_size, dtype=np.int64)
        for e in np.unique(epoch):  # a batch spans at most two epochs
            out[epoch == e] = self.order(int(e))(place[epoch == e])
        return out
