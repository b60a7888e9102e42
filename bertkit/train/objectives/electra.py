"""ELECTRA's replaced-token detection (--objective electra; Clark, Luong, Le, Manning, ICLR 2020).

    rows -> MaskingCollator, as mlm: mlm_probability of the ordinary tokens selected, 80% [MASK] / 10% random /
            10% kept
         -> generator: a small ElectraForMaskedLM (--generator-size of the model's width and heads, as many
            layers) that shares the model's token, position and type embeddings; its MLM loss on the selected
            tokens, and at each of them a token sampled from its softmax (no gradient flows through the sample)
         -> discriminator: ElectraForPreTraining (the encoder + a dense-activation-dense head, one logit per
            token) on the original rows with the samples in place: was each real token replaced? A sample equal
            to the original counts as original.
         loss = generator MLM (mean over the selected tokens of the step)
                + --disc-weight x binary cross-entropy (mean over the real tokens of the step)
    held out (15% masking; the same masks and samples at every evaluation): the generator's MLM accuracy, the
    discriminator's replaced-token AUC and accuracy, the share of real tokens replaced, the most local head
    saved: the discriminator at the top of --out (transformers' ElectraForPreTraining; bertkit finetune,
    evaluate, embed, serve take it as they take a BERT), the generator in <out>/generator (ElectraForMaskedLM:
    bertkit fill-mask)

Every sample is a pure function of (seed, step, the row's place in the global batch, the token's column), as
the masks are (data/seeded.py): a resumed run, and 2 processes x B rows, sample what 1 process x 2B does.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...config import BertConfig
from ...data.masking import MaskingCollator
from ...data.seeded import uniform
from ...electra import ElectraForMaskedLM, ElectraForPreTraining
from ...errors import TrainingError
from ...init import initialise, log_frequencies
from ...metrics import roc_auc
from ..batches import LOSS_UNITS, TOKENS, LossWeights, StepSampler
from .base import ModelConfig, Rows, Setup
from .mlm import EVAL_STEP, MaskingObjective, MLMScore, PretrainBatches, neighbour_attention_of

SAMPLE = 14  # the seeded stream of the generator's samples (masking draws from 11-13)
REAL = "real"  # the loss unit of the discriminator's mean: real (not padding) tokens
GENERATOR = "generator"  # the generator's folder inside a saved run


@dataclass
class ElectraOutput:
    """One forward pass of generator and discriminator over a batch."""

    generator_loss: torch.Tensor  # mean cross-entropy over the selected tokens
    generator_logits: torch.Tensor  # (N_selected, V)
    masked_positions: torch.Tensor  # (B, S) bool: where the selected tokens are
    discriminator_logits: torch.Tensor  # (B, S): > 0 says "replaced"
    replaced: torch.Tensor  # (B, S) bool: the sample differs from the original token
    real: torch.Tensor  # (B, S) bool: tokens, not padding

    @property
    def discriminator_loss(self) -> torch.Tensor:
        """Binary cross-entropy over the real tokens (their mean)."""
        return F.binary_cross_entropy_with_logits(
            self.discriminator_logits[self.real].float(), self.replaced[self.real].float()
        )


class ElectraPretraining(nn.Module):
    """Generator and discriminator as one module: what the loop trains, checkpoints, resumes and wraps (DDP,
    torch.compile) as it does any model. The generator uses the discriminator's embeddings module itself."""

    def __init__(self, generator: ElectraForMaskedLM, discriminator: ElectraForPreTraining) -> None:
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        generator.electra.embeddings = discriminator.electra.embeddings  # token, position and type embeddings
        generator.tie_weights()  # its output layer reads the shared word embeddings

    def set_attn_implementation(self, name: str) -> None:
        self.generator.set_attn_implementation(name)
        self.discriminator.set_attn_implementation(name)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        sample_u: torch.Tensor,
    ) -> ElectraOutput:
        """input_ids (B, S) masked as MLM masks them; labels (B, S) the original ids at the selected positions,
        -100 elsewhere; sample_u (B, S) uniforms in [0, 1), one per position, that pick the samples."""
        gen = self.generator(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            labels=labels,
            masked_positions_only=True,
        )
        masked = gen.masked_positions  # (B, S)
        with torch.no_grad():
            sampled = sample(gen.logits, sample_u[masked])  # (N,)
        discriminator_ids = input_ids.masked_scatter(masked, sampled)  # the originals, samples where selected
        replaced = torch.zeros_like(masked).masked_scatter(masked, sampled != labels[masked])
        logits = self.discriminator(
            input_ids=discriminator_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).logits  # (B, S)
        return ElectraOutput(gen.loss, gen.logits, masked, logits, replaced, attention_mask > 0)


def sample(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(N,) ids drawn from softmax(logits (N, V)) (temperature 1) by inverting its cumulative sum at u (N,)."""
    cdf = logits.float().softmax(-1).cumsum(-1)  # (N, V)
    picked = torch.searchsorted(cdf, (u.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1))  # (N, 1)
    return picked.squeeze(-1).clamp_(max=logits.shape[-1] - 1)


class ElectraBatches(PretrainBatches):
    """MLM's batches + the uniforms of the generator's samples, and the real tokens counted for the
    discriminator's mean (a second loss unit: LossWeights.of(REAL))."""

    def __init__(self, rows: Rows, collator: MaskingCollator, sampler: StepSampler, seed: int) -> None:
        super().__init__(rows, collator, sampler)
        self.seed = seed

    def batch(self, step: int, micro: int) -> dict[str, Any]:
        out = super().batch(step, micro)
        out["sample_u"] = sample_uniforms(self.seed, step, self.places(micro), out["input_ids"].shape[1])
        out[LOSS_UNITS] = {TOKENS: out[LOSS_UNITS], REAL: int((out["attention_mask"] > 0).sum())}
        return out


def sample_uniforms(seed: int, step: int, places: np.ndarray, length: int) -> torch.Tensor:
    """(B, S) float32 uniforms keyed by (seed, step, the row's place, the column)."""
    u = uniform(seed, SAMPLE, step, np.asarray(places, dtype=np.int64)[:, None], np.arange(length)[None, :])
    return torch.from_numpy(np.ascontiguousarray(u, dtype=np.float32))


def generator_config(config: BertConfig, size: float) -> BertConfig:
    """The generator's shape: `size` of the discriminator's width, heads and feed-forward (at least one head
    of the discriminator's head width or less), as many layers, the discriminator's embedding width."""
    heads = max(1, round(config.num_attention_heads * size))
    hidden = max(heads, round(config.hidden_size * size / heads) * heads)
    return config.replace(
        hidden_size=hidden, num_attention_heads=heads, intermediate_size=max(1, round(config.intermediate_size * size))
    )


class Electra(MaskingObjective):
    """ELECTRA's replaced-token detection: every real token teaches the discriminator, not only the masked."""

    name = "electra"

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        if not 0.0 < self.cfg.generator_size <= 1.0:
            raise TrainingError(f"--generator-size must be in (0, 1], got {self.cfg.generator_size}")
        if not self.cfg.disc_weight > 0:
            raise TrainingError(f"--disc-weight must be > 0, got {self.cfg.disc_weight}")

    def build(self, config: ModelConfig, token_counts: torch.Tensor) -> nn.Module:
        assert isinstance(config, BertConfig)  # a ModernBERT trains --objective mlm only (pretrain.encoder_config)
        config = config.replace(model_type="electra", embedding_size=config.hidden_size)
        # the discriminator first: a recipe's embeddings (locality's position code) are its, then shared
        discriminator = initialise(ElectraForPreTraining(config), self.setup.init, token_counts=token_counts)
        generator = ElectraForMaskedLM(generator_config(config, self.cfg.generator_size))
        if self.setup.init != "bert":  # the recipe's output priors: what each head would guess knowing nothing
            initialise_output_bias(generator, token_counts)
            with torch.no_grad():  # at most mlm_probability of the tokens can be replaced: log-odds of that
                p = self.setup.mlm_probability
                discriminator.discriminator_predictions.dense_prediction.bias.fill_(math.log(p / (1 - p)))
        return ElectraPretraining(generator, discriminator)

    def load(self, folder: str) -> nn.Module:
        generator = os.path.join(folder, GENERATOR)
        if not os.path.isdir(generator):
            raise TrainingError(
                f"--init-from {folder}: no {GENERATOR}/ folder; --objective electra continues a run "
                "that saved its generator there (bertkit pretrain --objective electra)"
            )
        return ElectraPretraining(
            ElectraForMaskedLM.from_pretrained(generator), ElectraForPreTraining.from_pretrained(folder)
        )

    def batches(self, rows: Rows, sampler: StepSampler) -> ElectraBatches:
        return ElectraBatches(rows, self.collator, sampler, self.cfg.seed)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor], weights: LossWeights) -> torch.Tensor:
        out = model(**batch)
        generator, discriminator = out.generator_loss * weights.of(TOKENS), out.discriminator_loss * weights.of(REAL)
        return generator + self.cfg.disc_weight * discriminator

    @torch.no_grad()
    def evaluate(self, model: nn.Module, rows: Rows) -> dict[str, float]:
        assert isinstance(model, ElectraPretraining)  # what build and load made (the loop passes it unwrapped)
        device = next(model.parameters()).device
        score, scores, truth = MLMScore(), [], []
        for positions, batch in self.heldout_batches(rows):
            batch["sample_u"] = sample_uniforms(self.cfg.seed, EVAL_STEP, positions, batch["input_ids"].shape[1])
            batch.pop("next_sentence_label", None)
            out = model(**{k: v.to(device) for k, v in batch.items()})
            score.add(out.generator_logits, batch["labels"].to(device)[out.masked_positions])
            scores.append(out.discriminator_logits[out.real].float().cpu())
            truth.append(out.replaced[out.real].cpu())
        generator = score.result()
        logits, replaced = torch.cat(scores).numpy(), torch.cat(truth).numpy()
        result = {
            "loss": generator["loss"],
            "mlm_accuracy": generator["mlm_accuracy"],
            "replaced_auc": roc_auc(replaced, logits),
            "replaced_accuracy": float(((logits > 0) == replaced).mean()),
            "replaced_share": float(replaced.mean()),
        }
        local = neighbour_attention_of(model.discriminator, rows)
        if local is not None:
            result["neighbour_attention"] = local
        return result

    def save(self, model: nn.Module, folder: str) -> None:
        assert isinstance(model, ElectraPretraining)  # what build and load made
        model.discriminator.save_pretrained(folder)
        model.generator.save_pretrained(os.path.join(folder, GENERATOR))
        self.tokenizer.save_pretrained(os.path.join(folder, GENERATOR))  # bertkit fill-mask reads it there

    def describe(self, model: nn.Module) -> str:
        assert isinstance(model, ElectraPretraining)  # what build and load made
        d, g = model.discriminator.config, model.generator.config
        shared = sum(p.numel() for p in model.discriminator.electra.embeddings.parameters())
        return (
            f"ElectraForPreTraining (hidden {d.hidden_size}, {_heads(d)}), "
            f"{model.discriminator.num_parameters():,} parameters + generator ElectraForMaskedLM (hidden "
            f"{g.hidden_size}, {_heads(g)}), "
            f"{model.generator.num_parameters() - shared:,} more (the embeddings shared)"
        )


def _heads(config: BertConfig) -> str:
    return f"{config.num_attention_heads} head{'s' if config.num_attention_heads != 1 else ''}"


@torch.no_grad()
def initialise_output_bias(generator: ElectraForMaskedLM, token_counts: torch.Tensor) -> None:
    """The generator's output bias at log token frequencies, as the local recipe starts BERT's MLM head: its
    first samples follow the corpus's unigram distribution instead of a uniform one."""
    generator.generator_lm_head.bias.copy_(log_frequencies(token_counts).to(generator.generator_lm_head.bias.dtype))
