"""Training and inference throughput: bertkit vs transformers, same weights, same batches, one process.

    python bench/bench_vs_hf.py --device cpu|cuda [--quick] [--json FILE]
                                [--steps N] [--warmup N] [--batch-size B] [--seq-len S] [--compile]
                                [--workloads train,infer]

What is measured, for these contenders:

    transformers-eager   transformers' BertForMaskedLM / BertModel, attn_implementation="eager"
    transformers-sdpa    the same with attn_implementation="sdpa" (transformers' default)
    bertkit              bertkit's best path: attn_implementation "varlen" (padding removed before the
                         layers, one fused q/k/v GEMM, attention on groups of similar length on CPU or
                         torch.nn.attention.varlen.varlen_attn on CUDA), and in training the MLM
                         vocabulary projection only at the masked positions (masked_positions_only)
    bertkit-defaults     the plain Python API, no flag: from_pretrained(dir), model(**batch)
                         (attn_implementation "auto"; in training mode with labels, sparse MLM logits)
    bertkit-varlen-dense training only: varlen with the full (B, S, V) vocabulary projection, so
                         the encoder's own speed shows (masked_positions_only=False)

  train   one MLM optimizer step: forward + loss, backward, AdamW step (bertkit's make_optimizer:
          decay / no-decay groups, fused on CUDA, for every contender; fused AdamW is also what
          transformers' Trainer picks on torch >= 2.8)
  infer   one encoder forward (BertModel, no pooler) under torch.inference_mode

each on two kinds of batch of B x S tokens:

  fixed     every sequence S tokens long (the attention mask is all ones)
  variable  lengths uniform integers in [S // 8, S], right padding: what a real corpus looks like

Every contender loads the same saved weights (one bertkit model written to a temporary folder) and
gets the same pre-generated list of batches (torch.Generator, fixed seed): 15% of the real tokens
carry an MLM label (input replaced by [MASK]), the others -100. On CUDA all contenders run under
bf16 autocast. Attention dropout is 0.0 for every contender (torch's flash varlen kernel has none);
hidden dropout stays 0.1. torch.set_num_threads is left alone.

Throughput counts only real (non-padding) tokens: tokens/s = real tokens of the timed steps /
their wall time (torch.cuda.synchronize before and after on CUDA). "vs sdpa" divides by
transformers-sdpa's tokens/s on the same (shape, workload, batch kind). Peak memory is
torch.cuda.max_memory_allocated, reset before each contender loads (CUDA only; on CPU one process
cannot separate the contenders, so "-").

MFU (CUDA only) = useful FLOPs / time / peak, where the peak is the bf16 throughput of a few
8192 x 8192 x 8192 matmuls measured in the same run. Useful FLOPs are the same for every contender:
work on padding, and the MLM projection at unmasked positions, count as waste, not as useful work:

    train, per step = 6 * (P_layers + P_transform) * real_tokens          dense weights, fwd + bwd
                    + 6 * 2 * L * H * sum_i n_i^2                         attention: q k^T and p v
                    + 6 * H * V * masked_tokens                           vocabulary projection
    infer, per step = 2 * P_layers * real_tokens + 2 * 2 * L * H * sum_i n_i^2

    P_layers     parameters of the encoder layers (bert.encoder.layer.*)
    P_transform  parameters of the MLM transform (cls.predictions.transform.*: dense + LayerNorm)
    L, H, V      layers, hidden size, vocabulary size
    n_i          real length of sequence i in the batch, so sum_i n_i^2 = sum over real tokens
                 of their own sequence's length (the seq_len of the attention term)

(Inference runs the encoder only, so it has no transform or vocabulary term.)

Configs: CPU: the `mini` preset (4 layers, hidden 256, 4 heads, vocab 21128) at 32 x 128
(--quick: 16 x 64, fewer steps, well under a minute on 2 cores). CUDA: bert-base-chinese
(12 layers, hidden 768, vocab 21128) at 256 x 128 and 64 x 512 (--quick: 256 x 128 only).
The table goes to stdout, progress lines to stderr; --json FILE writes {"meta", "results"}.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's bertkit

import bertkit  # noqa: E402
from bertkit.files import atomic_write_text  # noqa: E402
from bertkit.train.optim import make_optimizer  # noqa: E402
from bertkit.train.settings import TrainConfig  # noqa: E402

CONTENDERS = ("transformers-eager", "transformers-sdpa", "bertkit", "bertkit-defaults", "bertkit-varlen-dense")
TRAIN_ONLY = ("bertkit-varlen-dense",)  # in inference it is "bertkit"
WORKLOADS = ("train", "infer")
KINDS = ("fixed", "variable")
BASELINE = "transformers-sdpa"
MASK_PROB = 0.15
IGNORE = -100
LR = 1e-4  # small enough that the loss stays sane over the timed steps

# (preset, [(batch, seq_len), ...], warmup, steps) per device and --quick
CONFIGS = {
    ("cpu", False): ("mini", [(32, 128)], 2, 8),
    ("cpu", True): ("mini", [(16, 64)], 1, 3),
    ("cuda", False): ("bert-base-chinese", [(256, 128), (64, 512)], 5, 20),
    ("cuda", True): ("bert-base-chinese", [(256, 128)], 3, 10),
}


def import_transformers():
    try:
        import transformers
    except ImportError:
        raise SystemExit("transformers is a bench-only dependency: pip install 'transformers>=4.57'") from None
    with contextlib.suppress(Exception):  # "some weights were not used" (the cls.* keys of the encoder) etc.
        transformers.logging.set_verbosity_error()
    return transformers


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ----- batches -------------------------------------------------------------------------------------
def make_batches(
    n: int, batch_size: int, seq_len: int, vocab_size: int, variable: bool, seed: int = 0
) -> list[dict[str, torch.Tensor]]:
    """n MLM batches on the CPU, the same for the same arguments (own torch.Generator).

    Each: input_ids, attention_mask, labels (B, S); lengths (B,). Right padding with id 0; 15% of
    the real tokens (at least one per batch) are labelled with their id and replaced by [MASK].
    """
    g = torch.Generator().manual_seed(seed * 2 + int(variable))
    mask_id = 103 if vocab_size > 103 else 1  # [MASK] in BERT vocabularies
    low = max(1, seq_len // 8)
    batches = []
    for _ in range(n):
        if variable:
            lengths = torch.randint(low, seq_len + 1, (batch_size,), generator=g)  # (B,)
        else:
            lengths = torch.full((batch_size,), seq_len)
        real = torch.arange(seq_len)[None, :] < lengths[:, None]  # (B, S) bool
        ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=g) * real  # (B, S), 0 = [PAD]
        chosen = (torch.rand(batch_size, seq_len, generator=g) < MASK_PROB) & real
        if not chosen.any():  # every batch has a loss
            chosen[0, 0] = True
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
        ids = torch.where(chosen, torch.full_like(ids, mask_id), ids)
        batches.append({"input_ids": ids, "attention_mask": real.long(), "labels": labels, "lengths": lengths})
    return batches


def batch_stats(batch: dict[str, torch.Tensor]) -> dict[str, int]:
    """Real tokens, labelled tokens and sum of squared lengths (the attention term) of one batch."""
    lengths = batch["lengths"].long()
    return {
        "real": int(lengths.sum()),
        "masked": int((batch["labels"] != IGNORE).sum()),
        "sum_sq": int((lengths * lengths).sum()),
    }


def fingerprint(batches: list[dict[str, torch.Tensor]]) -> str:
    """A short digest of every tensor of every batch: equal digests, equal batches."""
    h = hashlib.sha256()
    for b in batches:
        for key in sorted(b):
            h.update(key.encode())
            h.update(b[key].cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# ----- useful FLOPs ----------------------------------------------------------------------------------
def flop_counts(model: bertkit.BertForMaskedLM) -> dict[str, int]:
    cfg = model.config
    return {
        "p_layers": sum(p.numel() for p in model.bert.encoder.layer.parameters()),
        "p_transform": sum(p.numel() for p in model.cls.predictions.transform.parameters()),
        "L": cfg.num_hidden_layers,
        "H": cfg.hidden_size,
        "V": cfg.vocab_size,
    }


def useful_flops(stats: dict[str, int], workload: str, c: dict[str, int]) -> int:
    """The formula of the module docstring, for one batch."""
    attention = 2 * 2 * c["L"] * c["H"] * stats["sum_sq"]  # forward: two matmuls of 2 n H per token
    if workload == "infer":
        return 2 * c["p_layers"] * stats["real"] + attention
    return (
        6 * (c["p_layers"] + c["p_transform"]) * stats["real"] + 3 * attention + 6 * c["H"] * c["V"] * stats["masked"]
    )


def matmul_peak(device: torch.device, n: int = 8192, reps: int = 20) -> float:
    """bf16 FLOP/s of n x n x n matmuls on this GPU: the MFU denominator."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)  # (n, n)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    del a, b
    torch.cuda.empty_cache()
    return 2 * n**3 * reps / seconds


# ----- contenders --------------------------------------------------------------------------------
def load_model(name: str, workload: str, directory: str, device: torch.device):
    """The contender's BertForMaskedLM (train, in train mode) or BertModel encoder (infer, eval mode)."""
    if name.startswith("bertkit"):
        with warnings.catch_warnings():  # an encoder from an MLM checkpoint: "unused cls.* tensors"
            warnings.simplefilter("ignore")
            if workload == "train":
                model = bertkit.BertForMaskedLM.from_pretrained(directory, device=device)
            else:
                model = bertkit.BertModel.from_pretrained(directory, add_pooling_layer=False, device=device)
        if name != "bertkit-defaults":  # the plain API: attn_implementation "auto", whatever it picks
            model.set_attn_implementation("varlen")
    else:
        transformers = import_transformers()
        impl = name.split("-", 1)[1]  # eager | sdpa
        if workload == "train":
            model = transformers.BertForMaskedLM.from_pretrained(directory, attn_implementation=impl)
        else:
            try:
                model = transformers.BertModel.from_pretrained(
                    directory, attn_implementation=impl, add_pooling_layer=False
                )
            except TypeError:  # a transformers without that model argument: the pooler is just unused
                model = transformers.BertModel.from_pretrained(directory, attn_implementation=impl)
        model.to(device)
    model.train(workload == "train")
    return model


def make_step(name: str, workload: str, model, device: torch.device, compile: bool = False):
    """step(batch) -> loss (train) or last_hidden_state (infer); nothing is synchronised."""
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    is_bertkit = name.startswith("bertkit")
    runner = torch.compile(model) if compile and is_bertkit else model

    if workload == "infer":

        def step(batch):
            with torch.inference_mode(), amp:
                return runner(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state

        return step

    optimizer = make_optimizer(model, TrainConfig(lr=LR, progress=False), device)  # fused on CUDA

    def step(batch):
        with amp:
            # bertkit: the sparse projection asked for; -defaults: what a plain call gives (sparse in training
            # mode with labels); -varlen-dense: the full (B, S, V) projection, to see the encoder alone
            extra = {
                "bertkit": {"masked_positions_only": True},
                "bertkit-varlen-dense": {"masked_positions_only": False},
            }.get(name, {})
            out = runner(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"], **extra
            )
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out.loss.detach()

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    """Give the last contender's memory back before the next one loads (CUDA: its peak is measured)."""
    if device.type == "cuda":  # on CPU nothing is measured, and a full gc costs ~0.25 s with transformers loaded
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def measure(
    name: str,
    workload: str,
    batches: list[dict],
    warmup: int,
    directory: str,
    device: torch.device,
    compile: bool = False,
) -> dict:
    """Load the contender, run `warmup` untimed steps, then time the remaining batches."""
    free(device)
    model = load_model(name, workload, directory, device)
    step = make_step(name, workload, model, device, compile)
    for batch in batches[:warmup]:
        step(batch)
    timed = batches[warmup:]
    synchronize(device)
    start = time.perf_counter()
    for batch in timed:
        step(batch)
    synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    del model, step
    return {"seconds": seconds, "peak_mem_bytes": peak}


# ----- the table -----------------------------------------------------------------------------------
def format_table(rows: list[dict], notes: list[str]) -> str:
    head = (
        f"{'shape':<9} {'workload':<8} {'batch':<9} {'contender':<19} {'real tok/s':>12} {'vs sdpa':>8} "
        f"{'peak mem':>12} {'MFU':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        mem = f"{r['peak_mem_bytes'] / 2**20:,.0f} MiB" if r["peak_mem_bytes"] is not None else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        shape = f"{r['batch_size']}x{r['seq_len']}"
        lines.append(
            f"{shape:<9} {r['workload']:<8} {r['batch']:<9} {r['contender']:<19} "
            f"{r['tokens_per_s']:>12,.0f} {r['ratio_vs_sdpa']:>7.2f}x {mem:>12} {mfu:>6}"
        )
    return "\n".join(lines + [""] + notes)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--quick", action="store_true", help="smaller shapes and fewer steps")
    p.add_argument("--json", default=None, metavar="FILE", help="write meta and results here")
    p.add_argument("--steps", type=int, default=None, help="timed steps per measurement")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps before them")
    p.add_argument("--batch-size", type=int, default=None, help="override the batch size of every shape")
    p.add_argument("--seq-len", type=int, default=None, help="override the sequence length of every shape")
    p.add_argument("--compile", action="store_true", help="torch.compile the bertkit model")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="which of train,infer to measure")
    p.add_argument("--preset", default=None, help=argparse.SUPPRESS)  # tests: the `tiny` preset
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    transformers = import_transformers()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    device = torch.device(args.device)
    preset, shapes, warmup, steps = CONFIGS[(args.device, args.quick)]
    preset = args.preset or preset
    warmup = args.warmup if args.warmup is not None else warmup
    steps = args.steps if args.steps is not None else steps
    shapes = [(args.batch_size or B, args.seq_len or S) for B, S in shapes]
    shapes = list(dict.fromkeys(shapes))  # overrides may make two shapes one
    if steps < 1 or warmup < 0 or min(min(shape) for shape in shapes) < 1:
        raise SystemExit("--steps, --batch-size and --seq-len must be >= 1, --warmup >= 0")

    config = bertkit.BertConfig.from_preset(preset, attention_probs_dropout_prob=0.0)  # hidden dropout 0.1
    if max(S for _, S in shapes) > config.max_position_embeddings:
        raise SystemExit(f"--seq-len is longer than {preset}'s {config.max_position_embeddings} positions")
    peak = matmul_peak(device) if device.type == "cuda" else None
    if peak:
        log(f"bf16 matmul peak: {peak / 1e12:.0f} TFLOP/s")
    notes = [
        f"{preset}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, vocab {config.vocab_size}; "
        f"{'bf16 autocast' if device.type == 'cuda' else 'float32'}; {warmup} warm-up + {steps} timed steps",
        "attention dropout 0.0 for every contender (torch's flash varlen kernel has no attention dropout); "
        "hidden dropout 0.1",
        "tokens/s counts real (non-padding) tokens only; vs sdpa = / transformers-sdpa on the same row group",
    ]
    if args.compile:
        notes.append("bertkit runs torch.compile'd (variable batches change shape every step: keep --warmup large)")
    if device.type == "cpu":
        notes.append("peak mem: '-' on CPU (one process cannot separate the contenders); MFU: CUDA only")
    else:
        notes.append(f"MFU: useful FLOPs (module docstring) / bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")

    rows, fingerprints = [], {}
    with tempfile.TemporaryDirectory() as directory:
        torch.manual_seed(args.seed)
        reference = bertkit.BertForMaskedLM(config)
        counts = flop_counts(reference)
        reference.save_pretrained(directory)
        del reference
        for B, S in shapes:
            for kind in KINDS:
                batches = make_batches(warmup + steps, B, S, config.vocab_size, kind == "variable", args.seed)
                fingerprints[f"{B}x{S} {kind}"] = fingerprint(batches)
                stats = [batch_stats(b) for b in batches[warmup:]]
                real, masked = sum(s["real"] for s in stats), sum(s["masked"] for s in stats)
                on_device = [{k: v.to(device) for k, v in b.items() if k != "lengths"} for b in batches]
                for workload in [w for w in WORKLOADS if w in args.workloads.split(",")]:
                    flops = sum(useful_flops(s, workload, counts) for s in stats)
                    group = []
                    for name in CONTENDERS:
                        if workload != "train" and name in TRAIN_ONLY:
                            continue
                        result = measure(name, workload, on_device, warmup, directory, device, args.compile)
                        tps = real / result["seconds"]
                        group.append(
                            {
                                "contender": name,
                                "workload": workload,
                                "batch": kind,
                                "batch_size": B,
                                "seq_len": S,
                                "real_tokens": real,
                                "masked_tokens": masked,
                                "padded_tokens": B * S * steps,
                                "steps": steps,
                                "seconds": result["seconds"],
                                "tokens_per_s": tps,
                                "useful_flops": flops,
                                "mfu": flops / result["seconds"] / peak if peak else None,
                                "peak_mem_bytes": result["peak_mem_bytes"],
                            }
                        )
                        log(
                            f"{B}x{S} {workload} {kind:<8} {name:<19} {tps:>12,.0f} real tok/s "
                            f"({steps} steps, {result['seconds']:.2f} s)"
                        )
                    base = next(r["tokens_per_s"] for r in group if r["contender"] == BASELINE)
                    for r in group:
                        r["ratio_vs_sdpa"] = r["tokens_per_s"] / base
                    rows += group
                del on_device

    print(format_table(rows, notes))
    meta = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "bertkit": bertkit.__version__,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (platform.processor() or platform.machine()),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "config": preset,
        "config_dict": config.to_dict(),
        "shapes": [list(s) for s in shapes],
        "dtype": "bfloat16 autocast" if device.type == "cuda" else "float32",
        "warmup": warmup,
        "steps": steps,
        "quick": args.quick,
        "compile": args.compile,
        "seed": args.seed,
        "attention_dropout": 0.0,
        "hidden_dropout": config.hidden_dropout_prob,
        "mask_prob": MASK_PROB,
        "matmul_peak_flops": peak,
        "batch_fingerprints": fingerprints,
        "notes": notes,
    }
    report = {"meta": meta, "results": rows}
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=2) + "\n")
        log(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
