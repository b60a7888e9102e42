"""Masked-language modelling + a bag-of-words loss on the pooled [CLS] vector (--objective mlm-bow).

    rows -> MaskingCollator, as mlm -> BertForMaskedLM with BERT's pooler: the MLM loss on the selected tokens
         + --bow-weight x the bag-of-words loss: the MLM head (its vocabulary projection, tied to the word
           embeddings) at the pooled vector tanh(dense(h[CLS])) against the row's token distribution (original
           tokens, specials left out): -sum_v p_row(v) log softmax(head(pooled))_v, a mean over the rows
    held out: MLM loss, accuracy and perplexity at 15% masking, bow_loss, the most local head
    saved: BertForMaskedLM with the trained pooler (bert.pooler.*) in the same model.safetensors: transformers'
           BertForMaskedLM ignores the pooler, BertForSequenceClassification (and bertkit finetune) starts from it

Why: fine-tuning a classifier reads the pooled [CLS] vector, and MLM trains no part of it: no loss reads [CLS],
and with the local recipe its heads look at its neighbours. The bag-of-characters logistic regression, which
beats MLM-pretrained BERTs on the sentiment task at CPU budgets, says what a summary of a text needs first:
which tokens it holds (bench/results/pretraining_payoff.md measures what this gives).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...checkpoint import read_weights
from ...config import BertConfig
from ...errors import TrainingError
from ...heads import IGNORE, BertForMaskedLM, mlm_logits_and_loss
from ...init import initialise
from ...model import Pooler
from ..batches import LossWeights
from .base import ModelConfig, Rows, Setup
from .mlm import MaskedLM, MLMScore, neighbour_attention_of


class BagOfWordsPretraining(nn.Module):
    """BertForMaskedLM whose encoder has BERT's pooler, and the forward both losses read: (MLM loss over the
    selected tokens, their logits (N, V), where they are (B, S), bag-of-words logits of the pooled vector (B, V))."""

    def __init__(self, mlm: BertForMaskedLM, pooler: Pooler) -> None:
        super().__init__()
        self.mlm = mlm
        mlm.bert.pooler = pooler  # saved with the encoder as bert.pooler.*

    def set_attn_implementation(self, name: str) -> None:
        self.mlm.set_attn_implementation(name)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        **_: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.mlm.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits, loss, where = mlm_logits_and_loss(
            self.mlm.cls, out.last_hidden_state, labels, self.mlm.config.vocab_size, True, True
        )
        assert loss is not None and where is not None  # labels given, masked_positions_only
        return loss, logits, where, self.mlm.cls(out.pooler_output)  # ..., (B, V)


def bag_of_words_loss(
    bow_logits: torch.Tensor,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor,
    special_ids: torch.Tensor,
) -> torch.Tensor:
    """Mean over rows of the cross-entropy between softmax(bow_logits) (B, V) and each row's distribution of its
    original tokens (the label where a token was selected, else the input; padding and specials left out)."""
    original = torch.where(labels != IGNORE, labels, input_ids)  # (B, S)
    real = (attention_mask > 0) & ~torch.isin(original, special_ids)
    counts = torch.zeros_like(bow_logits, dtype=torch.float32).scatter_add_(1, original, real.float())  # (B, V)
    target = counts / counts.sum(1, keepdim=True).clamp(min=1)
    return -(target * F.log_softmax(bow_logits.float(), dim=-1)).sum(1).mean()


class MaskedLMWithBagOfWords(MaskedLM):
    """MLM, and the pooled [CLS] vector taught to say which tokens its row holds."""

    name = "mlm-bow"
    loss_title = "training loss: MLM on the masked tokens + bag of words on [CLS]"

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        if not self.cfg.bow_weight > 0:
            raise TrainingError(f"--bow-weight must be > 0, got {self.cfg.bow_weight}")
        self._special_ids = torch.tensor(self.tokenizer.all_special_ids)

    def build(self, config: ModelConfig, token_counts: torch.Tensor) -> nn.Module:
        assert isinstance(config, BertConfig)  # a ModernBERT trains --objective mlm only (pretrain.encoder_config)
        mlm = initialise(BertForMaskedLM(config), self.setup.init, token_counts=token_counts)
        pooler = Pooler(config)
        with torch.no_grad():  # BERT's initialisation of a linear layer
            pooler.dense.weight.normal_(0.0, config.initializer_range)
            pooler.dense.bias.zero_()
        return BagOfWordsPretraining(mlm, pooler)

    def load(self, folder: str) -> nn.Module:
        mlm, report = BertForMaskedLM.from_pretrained(folder, output_loading_info=True)
        names = report.unexpected_under("bert.pooler.")
        if len(names) != 2:
            raise TrainingError(
                f"--init-from {folder}: no trained pooler (bert.pooler.*) in its weights; "
                "--objective mlm-bow continues a run of mlm-bow"
            )
        report.unexpected = [k for k in report.unexpected if k not in names]  # the pooler is read below
        report.warn()
        state = read_weights(folder)
        pooler = Pooler(mlm.config)
        pooler.load_state_dict({k.removeprefix("bert.pooler."): state[k] for k in names})
        return BagOfWordsPretraining(mlm, pooler)

    def _special(self, device: torch.device) -> torch.Tensor:
        """(K,) the tokenizer's special ids on `device`, made once per device."""
        if self._special_ids.device != torch.device(device):
            self._special_ids = self._special_ids.to(device)
        return self._special_ids

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor], weights: LossWeights) -> torch.Tensor:
        mlm, _, _, bow_logits = model(**batch)
        bow = bag_of_words_loss(
            bow_logits,
            batch["input_ids"],
            batch["labels"],
            batch["attention_mask"],
            self._special(batch["input_ids"].device),
        )
        return mlm * weights.tokens + self.cfg.bow_weight * bow * weights.rows

    @torch.no_grad()
    def evaluate(self, model: nn.Module, rows: Rows) -> dict[str, float]:
        """evaluate_mlm's numbers and the mean bag-of-words loss over the held-out rows, from one forward pass."""
        assert isinstance(model, BagOfWordsPretraining)  # what build and load made (the loop passes it unwrapped)
        device, score, bow, count = next(model.parameters()).device, MLMScore(), 0.0, 0
        for positions, batch in self.heldout_batches(rows):
            batch = {k: v.to(device) for k, v in batch.items()}
            _, logits, where, bow_logits = model(**batch)
            score.add(logits, batch["labels"][where])  # (N, V), (N,)
            bow += float(
                bag_of_words_loss(
                    bow_logits, batch["input_ids"], batch["labels"], batch["attention_mask"], self._special(device)
                )
            ) * len(positions)
            count += len(positions)
        result = {**score.result(), "bow_loss": bow / max(1, count)}
        local = neighbour_attention_of(model.mlm, rows)
        if local is not None:
            result["neighbour_attention"] = local
        return result

    def save(self, model: nn.Module, folder: str) -> None:
        assert isinstance(model, BagOfWordsPretraining)  # what build and load made
        model.mlm.save_pretrained(folder)

    def describe(self, model: nn.Module) -> str:
        assert isinstance(model, BagOfWordsPretraining)  # what build and load made
        return f"BertForMaskedLM + pooler, {sum(p.numel() for p in model.parameters()):,} parameters"
