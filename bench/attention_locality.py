"""How much of each head's attention falls on the token itself and its near neighbours.

A head that has learned word order puts much of its weight at offsets -1 / +1; a head that has
not attends almost uniformly, 1/S per position: the model is then a bag of characters whatever
its depth. This is what shows why a few minutes of CPU pretraining does not beat a
bag-of-characters classifier (bench/results/pretraining_budget.md).

    python bench/attention_locality.py MODEL_DIR [MODEL_DIR ...] [--corpus builtin:peoples-daily]
           [--rows 20] [--seq-len 128] [--json FILE]

Rows are full --seq-len windows from the corpus's held-out documents (the split `bertkit pretrain`
holds out with its default seed), so no padding enters the averages.
"""

from __future__ import annotations

import argparse
import json

import torch

from bertkit.data.corpus import read_corpus, split_heldout
from bertkit.metrics import neighbour_attention, offset_mass
from bertkit.model import BertModel
from bertkit.tokenizer import Tokenizer

OFFSETS = 2  # offsets -2..+2


def windows(tokenizer: Tokenizer, docs: list[str], seq_len: int, rows: int) -> torch.Tensor:
    """Up to `rows` windows [CLS] + seq_len-2 tokens + [SEP], one per document long enough."""
    out = []
    for doc in docs:
        ids = tokenizer.encode(doc, add_special_tokens=False)
        if len(ids) >= seq_len - 2:
            out.append([tokenizer.cls_token_id, *ids[: seq_len - 2], tokenizer.sep_token_id])
        if len(out) == rows:
            break
    if not out:
        raise SystemExit(f"no held-out document has {seq_len - 2} tokens; lower --seq-len")
    return torch.tensor(out)


@torch.no_grad()
def measure(model_dir: str, docs: list[str], seq_len: int, rows: int) -> dict:
    tokenizer = Tokenizer.from_pretrained(model_dir)
    # a task or MLM head in the directory goes unused here, which is fine: no warning
    model, _ = BertModel.from_pretrained(model_dir, add_pooling_layer=False, output_loading_info=True)
    input_ids = windows(tokenizer, docs, seq_len, rows)
    attentions = model(input_ids=input_ids, output_attentions=True).attentions  # from_pretrained: eval mode
    mass = offset_mass(list(attentions))  # (L, H, 5)
    local = mass.sum(-1)  # weight within +-2, per head
    return {
        "model": model_dir,
        "rows": len(input_ids),
        "seq_len": seq_len,
        "uniform_local": (2 * OFFSETS + 1) / seq_len,
        "max_local": round(float(local.max()), 4),
        "mean_local": round(float(local.mean()), 4),
        "neighbour": round(neighbour_attention(list(attentions)), 4),
        "offset_mass": [[[round(float(x), 4) for x in head] for head in layer] for layer in mass],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", help="model directories (with their tokenizer files)")
    p.add_argument("--corpus", default="builtin:peoples-daily")
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.rows < 1 or args.seq_len < 2 * OFFSETS + 3:
        p.error(f"--rows must be at least 1 and --seq-len at least {2 * OFFSETS + 3}")
    _, heldout = split_heldout(read_corpus(args.corpus), fraction=0.01, seed=0)
    results = []
    for model_dir in args.models:
        r = measure(model_dir, heldout, args.seq_len, args.rows)
        results.append(r)
        print(
            f"{model_dir}: attention within +-2 tokens, uniform would be {r['uniform_local']:.3f}: "
            f"mean over heads {r['mean_local']:.3f}, most local head {r['max_local']:.3f}; "
            f"the most any head puts on one neighbouring offset: {r['neighbour']:.3f}"
        )
        for layer, heads in enumerate(r["offset_mass"]):
            cells = "  ".join("/".join(f"{x:.2f}" for x in head) for head in heads)
            print(f"  layer {layer}  offsets -2/-1/0/+1/+2 per head: {cells}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
