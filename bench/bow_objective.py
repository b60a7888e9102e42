"""An experimental objective for bench/pretraining_payoff.py: MLM + a bag-of-words loss on BERT's pooled [CLS].

Why: fine-tuning for classification reads the pooled [CLS] vector (tanh(dense(h[CLS]))), and MLM never trains
it: no loss reads [CLS], and with the local recipe its heads look at its neighbours, so after pretraining it
summarises the first few characters. The bag-of-characters logistic regression, which beats every BERT here,
says what a summary of a review needs: which characters it holds. So a second loss asks the pooled vector to
predict the row's tokens (the cross-entropy between the MLM head's softmax at the pooled vector and the row's
token distribution, original tokens, specials left out), weighted by --bow-weight (here: BOW_WEIGHT).

    python bench/bow_objective.py pretrain --objective mlm-bow [bertkit pretrain flags]

registers the objective in this process, then runs `bertkit pretrain`. Saved: BertForMaskedLM at --out with the
trained pooler's tensors (bert.pooler.*) added to model.safetensors: transformers' BertForMaskedLM ignores them,
BertForSequenceClassification (and `bertkit finetune`) starts from them.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.cli import main as cli_main
from bertkit.config import BertConfig
from bertkit.heads import IGNORE, BertForMaskedLM, mlm_logits_and_loss
from bertkit.init import initialise
from bertkit.model import Pooler
from bertkit.train.objectives import OBJECTIVES
from bertkit.train.objectives.mlm import MaskedLM, evaluate_mlm

BOW_WEIGHT = 1.0


class BowPretraining(nn.Module):
    """BertForMaskedLM and BERT's pooler, trained together: forward gives the MLM loss over the selected tokens,
    their logits and where they are, and the bag-of-words logits of the pooled [CLS] (B, V)."""

    def __init__(self, mlm: BertForMaskedLM, pooler: Pooler):
        super().__init__()
        self.mlm, self.pooler = mlm, pooler

    def set_attn_implementation(self, name: str) -> None:
        self.mlm.set_attn_implementation(name)

    def forward(self, input_ids, attention_mask, token_type_ids, labels, **_):
        hidden = self.mlm.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state  # (B, S, H)
        logits, loss, where = mlm_logits_and_loss(self.mlm.cls, hidden, labels, self.mlm.config.vocab_size, True,
                                                  True)
        return loss, logits, where, self.mlm.cls(self.pooler(hidden))  # ..., (B, V)


def bag_of_words_loss(bow_logits, input_ids, labels, attention_mask, special_ids) -> torch.Tensor:
    """Mean over rows of the cross-entropy between softmax(bow_logits) and the row's original-token distribution."""
    original = torch.where(labels != IGNORE, labels, input_ids)  # (B, S)
    real = (attention_mask > 0) & ~torch.isin(original, special_ids)
    counts = torch.zeros_like(bow_logits, dtype=torch.float32).scatter_add_(1, original, real.float())  # (B, V)
    target = counts / counts.sum(1, keepdim=True).clamp(min=1)
    return -(target * F.log_softmax(bow_logits.float(), dim=-1)).sum(1).mean()


class MaskedLMWithBagOfWords(MaskedLM):
    name = "mlm-bow"

    def build(self, config: BertConfig, token_counts: torch.Tensor) -> nn.Module:
        mlm = initialise(BertForMaskedLM(config), self.setup.init, token_counts=token_counts)
        pooler = Pooler(config)
        pooler.dense.weight.data.normal_(0.0, config.initializer_range)
        pooler.dense.bias.data.zero_()
        return BowPretraining(mlm, pooler)

    def load(self, folder: str) -> nn.Module:
        raise SystemExit("mlm-bow is a bench experiment: no --init-from")

    def loss(self, model, batch: dict, weights) -> torch.Tensor:
        mlm, _, _, bow_logits = model(**batch)
        special = torch.tensor(self.tokenizer.all_special_ids, device=batch["input_ids"].device)
        bow = bag_of_words_loss(bow_logits, batch["input_ids"], batch["labels"], batch["attention_mask"], special)
        return mlm * weights.tokens + BOW_WEIGHT * bow * weights.rows

    @torch.no_grad()
    def evaluate(self, model, rows) -> dict[str, float]:
        result = evaluate_mlm(model.mlm, rows, self.heldout_batches(rows))
        device, total, count = next(model.parameters()).device, 0.0, 0
        special = torch.tensor(self.tokenizer.all_special_ids, device=device)
        for positions, batch in self.heldout_batches(rows):
            batch = {k: v.to(device) for k, v in batch.items()}
            *_, bow_logits = model(**batch)
            total += float(bag_of_words_loss(bow_logits, batch["input_ids"], batch["labels"],
                                             batch["attention_mask"], special)) * len(positions)
            count += len(positions)
        result["bow_loss"] = total / max(1, count)
        return result

    def save(self, model: BowPretraining, folder: str) -> None:
        from safetensors.torch import load_file, save_file

        model.mlm.save_pretrained(folder)
        path = os.path.join(folder, "model.safetensors")
        state = load_file(path)
        state.update({f"bert.pooler.{k}": v.detach().contiguous() for k, v in model.pooler.state_dict().items()})
        save_file(state, path, metadata={"format": "pt"})


OBJECTIVES[MaskedLMWithBagOfWords.name] = MaskedLMWithBagOfWords

if __name__ == "__main__":
    sys.exit(cli_main(sys.argv[1:]))
