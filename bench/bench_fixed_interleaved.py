"""Inference of bertkit's plain API against transformers' SDPA model, rounds interleaved in one process.

    python bench/bench_fixed_interleaved.py [--rounds 12] [--steps 3] [--batch-size 32] [--seq-len 128]
                                            [--lengths fixed|variable]

`--lengths variable` draws each row's length uniformly from [S // 8, S] with right padding (bench_vs_hf.py's
variable workload): `--steps` different batches, the same for both contenders.

bench_vs_hf.py times training and inference of several contenders at once (interleaved rounds too); this one
isolates fixed-length inference of the plain API. The same saved `mini` model (4 layers, hidden 256) runs
in both, every batch all real tokens unless `--lengths variable`, under torch.inference_mode; each round runs `--steps` forward passes of each,
the order turning every round, and the table reports the median round and the ratio of medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lengths", choices=("fixed", "variable"), default="fixed")
    args = p.parse_args(argv)
    import transformers

    import bertkit
    from bertkit import kernels

    config = bertkit.BertConfig.from_preset("mini")
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        bertkit.BertModel(config, add_pooling_layer=False).save_pretrained(folder)
        ours = bertkit.BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
        theirs = transformers.BertModel.from_pretrained(
            folder, attn_implementation="sdpa", add_pooling_layer=False
        ).eval()
    batches = make_batches(args.steps, args.batch_size, args.seq_len, config.vocab_size, args.lengths == "variable")
    contenders = {"transformers-sdpa": theirs, "bertkit": ours}
    with torch.inference_mode():
        for model in contenders.values():
            for batch in batches:
                model(**batch)
        times = {name: [] for name in contenders}
        for r in range(args.rounds):
            for name in list(contenders) if r % 2 == 0 else list(contenders)[::-1]:
                start = time.perf_counter()
                for batch in batches:
                    contenders[name](**batch)
                times[name].append((time.perf_counter() - start) / args.steps)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches) / len(batches)  # real tokens a pass
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"mini, {args.batch_size} x {args.seq_len}, {args.lengths} lengths ({tokens:,.0f} real tokens a pass), "
        f"{torch.get_num_threads()} threads, "
        f"kernels {kernels.choice()} ({kernels.cpu_kind()}), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {args.rounds} rounds x {args.steps} steps\n"
    )
    print("| contender | median s / pass | tokens/s | spread (min-max s) |\n|---|---:|---:|---|")
    for name, t in times.items():
        print(f"| {name} | {median[name]:.4f} | {tokens / median[name]:,.0f} | {min(t):.4f}-{max(t):.4f} |")
    print(f"\nbertkit / transformers-sdpa speed: {median['transformers-sdpa'] / median['bertkit']:.3f}x")
    return 0


def make_batches(n: int, batch_size: int, seq_len: int, vocab_size: int, variable: bool) -> list[dict]:
    """`n` batches of (batch_size, seq_len) ids; variable: lengths uniform in [seq_len // 8, seq_len], right padded."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n):
        if variable:
            lengths = torch.randint(max(1, seq_len // 8), seq_len + 1, (batch_size,), generator=g)  # (B,)
        else:
            lengths = torch.full((batch_size,), seq_len)
        mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()  # (B, S)
        ids = torch.randint(1000, vocab_size, (batch_size, seq_len), generator=g) * mask
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


if __name__ == "__main__":
    raise SystemExit(main())
