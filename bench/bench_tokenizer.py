"""Batch-encoding throughput: bertkit's Tokenizer vs transformers' BertTokenizerFast, same process.

Both load the same vocabulary (learned from People's Daily by bertkit.train_vocab) and encode the
People's Daily paragraphs in batches, in the settings a training loop uses. Prints tokens/s for
each and the ratio; --json writes the numbers.

    python bench/bench_tokenizer.py [--batch-size 256] [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import torch
import transformers

from bertkit.data.builtin import peoples_daily_texts
from bertkit.tokenizer import Tokenizer
from bertkit.vocab import train_vocab

SETTINGS = {
    "lists, no padding": dict(),
    "pt tensors, pad to longest, truncate 128": dict(
        padding=True, truncation=True, max_length=128, return_tensors="pt"
    ),
    "pt tensors, pad to 512": dict(padding="max_length", truncation=True, max_length=512, return_tensors="pt"),
}


def throughput(tokenizer, texts, batch_size, kwargs, repeats):
    """Median tokens/s over `repeats` passes through all texts (tokens = non-padding ids)."""
    rates = []
    for _ in range(repeats):
        tokens, start = 0, time.perf_counter()
        for i in range(0, len(texts), batch_size):
            out = tokenizer(texts[i : i + batch_size], **kwargs)
            mask = out["attention_mask"]
            tokens += int(mask.sum()) if isinstance(mask, torch.Tensor) else sum(map(len, out["input_ids"]))
        rates.append(tokens / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()

    texts = peoples_daily_texts()
    with tempfile.TemporaryDirectory() as d:
        train_vocab(texts=texts, vocab_size=21128).save_pretrained(d)
        ours = Tokenizer.from_pretrained(d)
        theirs = transformers.BertTokenizerFast.from_pretrained(d)
        assert ours(texts[:64])["input_ids"] == theirs(texts[:64])["input_ids"], "tokenizers disagree"
        ours(texts[:512]), theirs(texts[:512])  # warm up
        results = []
        for name, kwargs in SETTINGS.items():
            a = throughput(ours, texts, args.batch_size, kwargs, args.repeats)
            b = throughput(theirs, texts, args.batch_size, kwargs, args.repeats)
            results.append(
                {
                    "setting": name,
                    "bertkit_tokens_per_s": round(a),
                    "transformers_tokens_per_s": round(b),
                    "ratio": round(a / b, 3),
                }
            )
            print(
                f"{name:<42} bertkit {a / 1e6:6.2f} M tok/s   transformers {b / 1e6:6.2f} M tok/s   ratio {a / b:5.2f}"
            )
    meta = {
        "texts": len(texts),
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "transformers": transformers.__version__,
        "tokenizers": __import__("tokenizers").__version__,
    }
    print(meta)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"meta": meta, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
