"""Does ELECTRA's discriminator learn on 2 CPU cores, and from what? A small probe of the objective's pieces.

A `tiny`-shaped ELECTRA (hidden 64, 2 layers, generator 1/4) on People's Daily rows of 64 tokens, 16 a step,
AdamW lr 7e-4, the local recipe, 30% masking, one thread; every 25 steps the discriminator's loss and
replaced-token AUC on that step's training batch. Variants change one thing:

    default    bertkit pretrain --objective electra as shipped (the generator starts at the unigram distribution)
    uniform    control: replacements drawn uniformly from the vocabulary instead of from the generator
    no-prior   the generator's output bias starts at zero (near-uniform samples first, as in the paper)

    python bench/electra_probe.py [VARIANT ...] [--steps 300]

Needs the tokenizer and data of bench/pretraining_payoff.py (runs/payoff/); prints a table row per variant.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("default", "uniform", "no-prior")


def probe(variant: str, steps: int) -> list[tuple[int, float, float]]:
    import bertkit.train.objectives.electra as electra
    from bertkit.data.dataset import PretrainingData
    from bertkit.data.rows import make_rows
    from bertkit.metrics import roc_auc
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.batches import StepSampler
    from bertkit.train.objectives import OBJECTIVES, Setup
    from bertkit.train.pretrain import PretrainConfig, build_model_config, set_dropout

    real_sample, real_bias = electra.sample, electra.initialise_output_bias
    if variant == "uniform":
        electra.sample = lambda logits, u: (u * (logits.shape[-1] - 10)).long() + 5  # ids past the special ones
    if variant == "no-prior":
        electra.initialise_output_bias = lambda generator, counts: None
    try:
        torch.manual_seed(0)
        folder = os.path.join(ROOT, "runs", "payoff")
        data = PretrainingData.open(os.path.join(folder, "data"))
        tok = Tokenizer.from_pretrained(os.path.join(folder, "tokenizer"))
        cfg = PretrainConfig(
            data=os.path.join(folder, "data"),
            model_config="tiny",
            seq_len=64,
            batch_size=16,
            out=os.path.join(folder, "probe"),
        )
        rows = make_rows(data.splits["train"], "stream", seq_len=64, cls_id=tok.cls_token_id, sep_id=tok.sep_token_id)
        objective = OBJECTIVES["electra"](Setup(cfg, tok, "local", 0.3))
        counts = torch.from_numpy(np.array(data.splits["train"].token_counts))
        counts[list(tok.all_special_ids)] = 0
        model = objective.build(build_model_config(cfg, tok).replace(hidden_size=64, intermediate_size=128), counts)
        set_dropout(model, 0.0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=7e-4)
        batches = objective.batches(rows, StepSampler(len(rows), 16, 1, 0))
        curve = []
        for step in range(steps + 1):
            batch = batches.batch(step, 0)
            batch.pop("loss_units")
            out = model(**batch)
            loss = out.generator_loss + 50 * out.discriminator_loss
            if step % 25 == 0:
                logits, replaced = out.discriminator_logits[out.real].detach(), out.replaced[out.real]
                curve.append((step, float(out.discriminator_loss), roc_auc(replaced.numpy(), logits.numpy())))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        return curve
    finally:
        electra.sample, electra.initialise_output_bias = real_sample, real_bias


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    torch.set_num_threads(1)
    for variant in args.variants:
        curve = probe(variant, args.steps)
        print(
            f"| {variant} | "
            + " / ".join(f"{auc:.2f}" for step, _, auc in curve if step % 75 == 0)
            + f" | {curve[-1][1]:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
