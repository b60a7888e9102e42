"""ModernBERT inference: bertkit's ModernBertModel (its defaults) against transformers' with SDPA, rounds interleaved
in one process, on fixed-length and variable-length batches, outputs compared.

    python bench/bench_modernbert.py [--rounds 10] [--steps 3] [--batch-size 32] [--seq-len 128] [--layers 6]
    python bench/bench_modernbert.py --pretraining [--rounds 10] [--steps 3]

The same random small ModernBERT (hidden 256, 4 heads, GeGLU 384, `--layers` layers, global every 3rd, window 128,
vocabulary 30,000), saved by bertkit and loaded by both. Fixed: every row `--seq-len` real tokens (bertkit: sdpa).
Variable: row lengths uniform in [seq_len // 8, seq_len], right padded (bertkit: padding removed before the
layers). Each round runs `--steps` batches of each workload per contender, the order turning every round; the
table reports the median round and the ratio of medians, and the largest difference on real tokens.

--pretraining: training steps of `bertkit pretrain`'s models instead, BERT's `mini` against `modern-mini` (about the
same parameter count): forward, backward and an AdamW step on the same 32 x 128 rows with 30% of the tokens
selected, the logits at those only (masked_positions_only, as pretraining runs), rounds interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch
from bench_cpu_anchors import cpu  # noqa: E402  (bench/ is on sys.path when run as a script)
from bench_fixed_interleaved import make_batches  # noqa: E402

SIZES = dict(
    vocab_size=30000,
    hidden_size=256,
    intermediate_size=384,
    num_attention_heads=4,
    max_position_embeddings=8192,
    global_attn_every_n_layers=3,
    local_attention=128,
    pad_token_id=0,
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--pretraining", action="store_true", help="time training steps of mini and modern-mini")
    args = p.parse_args(argv)
    if args.pretraining:
        print(pretraining(args))
        return 0
    ours, theirs = models(args.layers)
    workloads = {
        lengths: make_batches(args.steps, args.batch_size, args.seq_len, SIZES["vocab_size"], lengths == "variable")
        for lengths in ("fixed", "variable")
    }
    contenders = {"transformers-sdpa": theirs, "bertkit": ours}
    times = {(w, name): [] for w in workloads for name in contenders}
    with torch.inference_mode():
        differences = {w: largest_difference(ours, theirs, batches) for w, batches in workloads.items()}  # warm too
        for r in range(args.rounds):
            for w, batches in workloads.items():
                for name in list(contenders) if r % 2 == 0 else list(contenders)[::-1]:
                    start = time.perf_counter()
                    for batch in batches:
                        contenders[name](**batch)
                    times[w, name].append((time.perf_counter() - start) / args.steps)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    print(table(args, workloads, times, differences))
    return 0


def pretraining(args) -> str:
    """Median seconds per training step of BERT mini and modern-mini, as a markdown table."""
    import bertkit
    from bertkit.modernbert import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(0)
    contenders = {
        "mini (BERT)": bertkit.BertForMaskedLM(bertkit.BertConfig.from_preset("mini")),
        "modern-mini": ModernBertForMaskedLM(ModernBertConfig.from_preset("modern-mini")),
    }
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 21128, (args.steps, args.batch_size, args.seq_len), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, -100)
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in contenders.items()}
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(args.rounds + 1):  # round 0 warms up
        for name in list(contenders) if r % 2 == 0 else list(contenders)[::-1]:
            model, optimizer = contenders[name].train(), optimizers[name]
            start = time.perf_counter()
            for i in range(args.steps):
                loss = model(input_ids=ids[i], labels=labels[i], masked_positions_only=True).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if r:
                times[name].append((time.perf_counter() - start) / args.steps)
        print(f"round {r}/{args.rounds}", file=sys.stderr, flush=True)
    machine = cpu()
    base = statistics.median(times["mini (BERT)"])
    lines = [
        f"Pretraining steps, {args.batch_size} x {args.seq_len}, 30% selected; {machine['cpu']}, "
        f"{torch.get_num_threads()} threads, CPU flags: {', '.join(machine['flags']) or 'none'}; torch "
        f"{torch.__version__}; {args.rounds} rounds x {args.steps} steps "
        f"(`python bench/bench_modernbert.py --pretraining --rounds {args.rounds} --steps {args.steps}`)",
        "",
        "| model | parameters | median s / step | against mini |",
        "|---|---:|---:|---:|",
    ]
    for name, model in contenders.items():
        median = statistics.median(times[name])
        lines.append(f"| {name} | {model.num_parameters():,} | {median:.4f} | {median / base:.2f}x |")
    return "\n".join(lines)


def models(layers: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """bertkit's and transformers' ModernBertModel with the same random weights (saved by bertkit)."""
    import transformers

    from bertkit.modernbert import ModernBertConfig, ModernBertModel

    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        ModernBertModel(ModernBertConfig(**SIZES, num_hidden_layers=layers)).save_pretrained(folder)
        ours = ModernBertModel.from_pretrained(folder).eval()
        theirs = transformers.ModernBertModel.from_pretrained(
            folder, attn_implementation="sdpa", reference_compile=False
        ).eval()
    return ours, theirs


def largest_difference(ours: torch.nn.Module, theirs: torch.nn.Module, batches: list[dict]) -> float:
    """The largest |bertkit - transformers| of the last hidden state over the real tokens of `batches`."""
    worst = 0.0
    for batch in batches:
        keep = batch["attention_mask"].bool()
        a, b = ours(**batch).last_hidden_state[keep], theirs(**batch).last_hidden_state[keep]
        worst = max(worst, (a - b).abs().max().item())
    return worst


def table(args, workloads: dict, times: dict, differences: dict) -> str:
    import transformers

    machine = cpu()
    lines = [
        f"ModernBERT, hidden 256, {args.layers} layers, {args.batch_size} x {args.seq_len}; {machine['cpu']}, "
        f"{torch.get_num_threads()} threads, CPU flags: {', '.join(machine['flags']) or 'none'}; torch "
        f"{torch.__version__}, transformers {transformers.__version__}; {args.rounds} rounds x {args.steps} steps "
        f"(`python bench/bench_modernbert.py --rounds {args.rounds} --steps {args.steps} --layers {args.layers}`)",
        "",
        "| lengths | real tokens / pass | transformers-sdpa s | bertkit s | bertkit speed | max diff |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for w, batches in workloads.items():
        tokens = sum(int(b["attention_mask"].sum()) for b in batches) / len(batches)
        theirs, ours = (statistics.median(times[w, name]) for name in ("transformers-sdpa", "bertkit"))
        lines.append(
            f"| {w} | {tokens:,.0f} | {theirs:.4f} | {ours:.4f} | {theirs / ours:.2f}x | {differences[w]:.1e} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
