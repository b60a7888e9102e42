"""What a pretraining objective is: the one seam between `bertkit pretrain` and what it learns.

    objective = OBJECTIVES[name](setup)              setup: the run's options, tokenizer, recipe, printer
    model = objective.build(config, token_counts)    fresh weights (or objective.load(--init-from))
    data = objective.batches(rows, sampler)          step-addressed batches of inputs and targets
    loss = objective.loss(model, batch, weights)     this micro-batch's share of the step's loss (LossWeights)
    objective.evaluate(model, rows)                  held-out metrics: a dict of numbers
    objective.save(model, folder)                    what the run leaves at the top of --out

`model` is one nn.Module holding everything the objective trains (ELECTRA: generator and discriminator),
so the shared loop (train/loop.py) optimises, checkpoints, resumes, wraps it in DDP and compiles it as
any model; loss() calls it only through its forward, which is what DDP and torch.compile see.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, cast

import numpy as np
import torch
from torch import nn

from ...config import BertConfig
from ...modernbert import ModernBertConfig
from ...tokenizer import Tokenizer
from ..batches import Batches, LossWeights, StepSampler
from ..runlog import TRAIN_TITLE

if TYPE_CHECKING:
    from ...data.rows import RowBatch
    from ...model import BertPreTrainedModel

ModelConfig = BertConfig | ModernBertConfig  # what --model-config builds


class Rows(Protocol):
    """What an objective reads of a split's rows (data/rows.py: StreamRows, DocumentRows, PairRows)."""

    pairs: bool  # rows with a next-sentence label (PairRows)

    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray, words: bool = False) -> RowBatch: ...


class Options(Protocol):
    """What the objectives read of the run's options (train/pretrain.py's PretrainConfig holds them)."""

    seed: int
    batch_size: int
    eval_rows: int  # held-out rows evaluated
    wwm: bool  # whole-word masking
    generator_size: float  # ELECTRA: the generator's width, a share of the discriminator's
    disc_weight: float  # ELECTRA: the discriminator's loss weight
    bow_weight: float  # mlm-bow: the bag-of-words loss weight


@dataclass
class Setup:
    """What every objective is built from."""

    cfg: Options  # the run's options
    tokenizer: Tokenizer
    init: str  # the recipe's starting weights (bertkit.init): "local" or "bert"
    mlm_probability: float  # share of tokens selected (masked, or replaced) in training rows
    say: Callable[..., None] = lambda *a: None  # rank 0's progress printer


class Objective(ABC):
    """One pretraining objective; a subclass and its line in OBJECTIVES (objectives/__init__.py) add one."""

    name: ClassVar[str]
    pairs: ClassVar[bool] = False  # trains on sentence pairs (data/rows.py PairRows) instead of --packing rows
    # what the training loss is, in words: loss.png's title over it (the held-out losses are drawn apart)
    loss_title: ClassVar[str] = TRAIN_TITLE

    def __init__(self, setup: Setup) -> None:
        self.setup, self.cfg, self.tokenizer = setup, setup.cfg, setup.tokenizer

    @abstractmethod
    def build(self, config: ModelConfig, token_counts: torch.Tensor) -> nn.Module:
        """Fresh weights for a model of `config` (the tokenizer's vocabulary; a ModernBertConfig for --objective mlm
        only, pretrain.encoder_config refuses the others one); token_counts (vocab_size,):
        how often each id occurs in the training split (special ids 0), for recipes that start from them."""

    @abstractmethod
    def load(self, folder: str) -> nn.Module:
        """The weights a run continues from (--init-from): a folder an earlier run of this objective saved."""

    @abstractmethod
    def batches(self, rows: Rows, sampler: StepSampler) -> Batches:
        """Step-addressed batches cut from `rows` (data/rows.py), this process's rows of each global batch."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor], weights: LossWeights) -> torch.Tensor:
        """This micro-batch's share of the step's loss (weights: loop.LossWeights)."""

    @abstractmethod
    def evaluate(self, model: nn.Module, rows: Rows) -> dict[str, float]:
        """Held-out metrics on the first --eval-rows rows of `rows`, the same rows and masks every time."""

    def save(self, model: nn.Module, folder: str) -> None:
        """Write the trained model at the top of --out (the run adds its tokenizer)."""
        # a bertkit model saves itself; an objective whose model is another module overrides save
        cast("BertPreTrainedModel", model).save_pretrained(folder)

    def describe(self, model: nn.Module) -> str:
        """One line on the model(s) for the run's log."""
        return f"{type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters"
