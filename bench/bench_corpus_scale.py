"""Pretraining on corpora far larger than a test corpus: memory, start-up time, preparation speed, disk.

Makes corpora of the asked sizes from the built-in People's Daily articles, each copy with its sentences
shuffled (so documents differ), one document per line; then, for each size:

    bertkit prepare        wall time, MB of text per second, peak RSS (every process of it), disk per token
    bertkit pretrain --data  (mini, batch 8 x 128)  peak RSS, seconds from the command to the first step,
                           tokens/s
and once:
    the tokenizers library's own encode_batch over the smallest corpus, on the same cores (the reference
    the issue names), and jieba's own speed beside `prepare --wwm`
    training speed from --data against the in-memory path of bertkit before datasets (commit BEFORE, run
    from a git worktree), same model, batch, seed and tokenizer, on builtin:peoples-daily
    torchrun --nproc_per_node 2 pretrain --data: each rank's peak RSS

    python bench/bench_corpus_scale.py --sizes 100MB,2GB --json bench/results/corpus_scale.json \\
        --md bench/results/corpus_scale.md

Time it with nothing else running: two cores shared halve a figure. Peak RSS is read from /proc (VmHWM of
each process, polled every 50 ms); it counts the pages of memory-mapped files that a process has touched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEFORE = "4a28873"  # the last commit whose pretraining held the corpus in Python lists
PYTHON = sys.executable


# ----- corpora -----------------------------------------------------------------------------------
def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(MB|GB)", text.strip(), re.IGNORECASE)
    if not match:
        raise SystemExit(f"a size is like 100MB or 2GB, got {text!r}")
    return int(float(match.group(1)) * {"mb": 10**6, "gb": 10**9}[match.group(2).lower()])


def make_corpus(path: str, size: int, seed: int = 0) -> str:
    """People's Daily articles again and again, each copy's sentences shuffled, one document per line."""
    if os.path.exists(path) and os.path.getsize(path) >= size:
        return path
    from bertkit.data.builtin import builtin_documents

    sentences = [re.split(r"(?<=[。！？])", d.replace("\n", "")) for d in builtin_documents("builtin:peoples-daily")]
    rng = random.Random(seed)
    written = 0
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        while written < size:
            for parts in sentences:
                parts = [p for p in parts if p]
                rng.shuffle(parts)
                line = "".join(parts) + "\n"
                fh.write(line)
                written += len(line.encode("utf-8"))
                if written >= size:
                    break
    os.replace(path + ".tmp", path)
    return path


# ----- measuring a command -----------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """The children of `pid` (Linux: the kernel lists them per thread; one read each, cheap enough to poll)."""
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _hwm_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def measure(cmd: list[str], *, env=None, watch: str | None = None, cwd=None, timeout: float = 7200) -> dict:
    """Run `cmd`; its wall time, the peak RSS of each process of its tree (MB), and when `watch` (a file) first
    held a line (seconds from the start)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    peaks: dict[int, float] = {}
    first_line = None
    while proc.poll() is None:
        tree, frontier = [proc.pid], [proc.pid]
        while frontier:
            frontier = [c for p in frontier for c in _children(p)]
            tree += frontier
        for pid in tree:
            hwm = _hwm_mb(pid)
            if hwm is not None:
                peaks[pid] = max(peaks.get(pid, 0.0), hwm)
        if watch and first_line is None and os.path.exists(watch) and os.path.getsize(watch) > 0:
            first_line = time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            proc.kill()
            raise SystemExit(f"timed out: {' '.join(cmd)}")
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{stderr[-3000:]}")
    main_peak = peaks.get(proc.pid, 0.0)
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "peak_rss_mb": round(main_peak, 1),
        "peak_rss_all_mb": round(sum(peaks.values()), 1),
        "peak_rss_each_mb": sorted(round(v, 1) for v in peaks.values()),
        "first_line_s": round(first_line, 2) if first_line is not None else None,
        "stdout": stdout,
        "stderr": stderr,
    }


def bertkit(*args: str) -> list[str]:
    return [PYTHON, "-m", "bertkit", *args]


def tokens_per_s(metrics: str, skip: int = 1) -> float:
    """Median tokens/s of the training rows of a metrics.jsonl (the first `skip` windows left out: warm-up)."""
    with open(metrics, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][skip:]
    return round(statistics.median(rates), 1)


# ----- the parts ---------------------------------------------------------------------------------
def tokenizer_dir(work: str) -> str:
    path = os.path.join(work, "tokenizer")
    if not os.path.exists(os.path.join(path, "vocab.txt")):
        from bertkit.data.builtin import builtin_documents
        from bertkit.vocab import train_vocab

        train_vocab(texts=list(builtin_documents("builtin:peoples-daily")), vocab_size=21128).save_pretrained(path)
    return path


def encode_batch_reference(corpus: str, tokenizer: str, limit: int) -> dict:
    """The tokenizers library's encode_batch (its own threads: every core) over the first `limit` bytes."""
    code = f"""
import sys, time
from bertkit.tokenizer import Tokenizer
from bertkit.data.encode import plain_backend
backend = plain_backend(Tokenizer.from_pretrained({tokenizer!r}))
start, size, batch = time.perf_counter(), 0, []
with open({corpus!r}, encoding="utf-8") as fh:
    for line in fh:
        batch.append(line)
        size += len(line.encode("utf-8"))
        if len(batch) == 1000:
            backend.encode_batch(batch, add_special_tokens=False)
            batch = []
        if size >= {limit}:
            break
if batch:
    backend.encode_batch(batch, add_special_tokens=False)
print(size, time.perf_counter() - start)
"""
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    size, seconds = int(out[0]), float(out[1])
    return {"mb": round(size / 1e6, 1), "seconds": round(seconds, 2), "mb_per_s": round(size / 1e6 / seconds, 2)}


def jieba_reference(corpus: str, limit: int, workers: int) -> dict:
    """jieba.cut alone over the first `limit` bytes, split between `workers` processes."""
    code = f"""
import sys, time, logging
from multiprocessing import get_context
def cut(lines):
    import jieba
    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    for line in lines:
        for _ in jieba.cut(line):
            pass
    return len(lines)
lines, size = [], 0
with open({corpus!r}, encoding="utf-8") as fh:
    for line in fh:
        lines.append(line)
        size += len(line.encode("utf-8"))
        if size >= {limit}:
            break
import jieba
jieba.setLogLevel(logging.WARNING)
jieba.initialize()  # the dictionary is loaded before the clock starts, as prepare's workers do once
with get_context("fork").Pool({workers}) as pool:
    start = time.perf_counter()
    pool.map(cut, [lines[i::{workers}] for i in range({workers})])
print(size, time.perf_counter() - start)
"""
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    size, seconds = int(out[0]), float(out[1])
    return {"mb": round(size / 1e6, 1), "seconds": round(seconds, 2), "mb_per_s": round(size / 1e6 / seconds, 2)}


def disk(folder: str) -> dict:
    manifest = json.load(open(os.path.join(folder, "manifest.json"), encoding="utf-8"))
    tokens = sum(s["tokens"] for s in manifest["splits"].values())
    by_kind = {
        k: sum(s["files"][k]["bytes"] for s in manifest["splits"].values())
        for k in ("ids", "word_starts", "sentence_starts", "documents", "token_counts")
    }
    per_token = {k: round(v / tokens, 4) for k, v in by_kind.items()}
    return {
        "tokens": tokens,
        "documents": sum(s["documents"] for s in manifest["splits"].values()),
        "bytes_per_token": per_token,
        "ids_and_marks_per_token": round(
            sum(by_kind[k] for k in ("ids", "word_starts", "sentence_starts", "documents")) / tokens, 4
        ),
        "folder_mb": round(sum(by_kind.values()) / 1e6, 1),
    }


def pretrain_args(out: str, steps: int, extra=()) -> list[str]:
    return [
        "--model-config",
        "mini",
        "--batch-size",
        "8",
        "--seq-len",
        "128",
        "--steps",
        str(steps),
        "--log-every",
        "1",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--no-progress",
        "--device",
        "cpu",
        "--seed",
        "0",
        "--out",
        out,
        "--overwrite",
        *extra,
    ]


def pretrain_from(data: str, work: str, name: str, steps: int, extra=()) -> dict:
    out = os.path.join(work, "runs", name)
    metrics = os.path.join(out, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)  # --overwrite moves the old run aside; watch the new file only
    result = measure(bertkit("pretrain", "--data", data, *pretrain_args(out, steps, extra)), watch=metrics)
    return {
        "peak_rss_mb": result["peak_rss_mb"],
        "first_step_s": result["first_line_s"],
        "seconds": result["seconds"],
        "tokens_per_s": tokens_per_s(metrics, skip=2),
    }


def speed_against_before(work: str, tokenizer: str, steps: int, repeats: int) -> dict:
    """tokens/s of --data against the in-memory path of commit BEFORE, interleaved runs, same flags."""
    old = os.path.join(work, "before")
    if not os.path.exists(os.path.join(old, "bertkit")):
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", old, BEFORE], check=True, capture_output=True)
    data = os.path.join(work, "data-builtin")
    subprocess.run(
        bertkit(
            "prepare", "--corpus", "builtin:peoples-daily", "--tokenizer", tokenizer, "--out", data, "--no-progress"
        ),
        check=True,
        capture_output=True,
    )
    rates: dict[str, list[float]] = {"data": [], "before": []}
    for r in range(repeats):
        for name in ("before", "data"):
            out = os.path.join(work, "runs", f"speed-{name}-{r}")
            source = (
                ["--corpus", "builtin:peoples-daily", "--tokenizer", tokenizer]
                if name == "before"
                else ["--data", data]
            )
            env = {**os.environ, "PYTHONPATH": old} if name == "before" else None
            subprocess.run(
                bertkit("pretrain", *source, *pretrain_args(out, steps)),
                check=True,
                capture_output=True,
                env=env,
                cwd=old if name == "before" else None,
            )
            rates[name].append(tokens_per_s(os.path.join(out, "metrics.jsonl"), skip=5))
    data_rate, before_rate = statistics.median(rates["data"]), statistics.median(rates["before"])
    return {
        "steps": steps,
        "repeats": repeats,
        "tokens_per_s_data": rates["data"],
        "tokens_per_s_before": rates["before"],
        "ratio": round(data_rate / before_rate, 3),
    }


def batch_cost(data: str, tokenizer: str, steps: int = 200) -> dict:
    """Seconds per step spent building batches from --data (rows + masking), in this process."""
    from bertkit.data.dataset import PretrainingData
    from bertkit.data.masking import MaskingCollator
    from bertkit.data.rows import make_rows
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.batches import StepSampler
    from bertkit.train.objectives.mlm import PretrainBatches

    tok = Tokenizer.from_pretrained(tokenizer)
    folder = PretrainingData.open(data)
    out = {}
    for kind in ("stream", "documents", "pairs"):
        start = time.perf_counter()
        rows = make_rows(folder.splits["train"], kind, seq_len=128, cls_id=tok.cls_token_id, sep_id=tok.sep_token_id)
        plan = time.perf_counter() - start
        collator = MaskingCollator(
            vocab_size=tok.vocab_size,
            mask_id=tok.mask_token_id,
            pad_id=tok.pad_token_id,
            special_ids=tuple(tok.all_special_ids),
            mlm_probability=0.3,
        )
        batches = PretrainBatches(rows, collator, StepSampler(len(rows), 8, 1, 0))
        start = time.perf_counter()
        for step in range(steps):
            batches.batch(step, 0)
        out[kind] = {
            "plan_s": round(plan, 2),
            "ms_per_batch": round((time.perf_counter() - start) / steps * 1000, 2),
            "rows": len(rows),
        }
    return out


def ddp_ranks(data: str, work: str, steps: int) -> dict:
    out = os.path.join(work, "runs", "ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29533",
        "-m",
        "bertkit",
        "pretrain",
        "--data",
        data,
        *pretrain_args(out, steps),
    ]
    result = measure(cmd, env=env)
    ranks = result["peak_rss_each_mb"][-2:]  # the two largest: the ranks (torchrun itself is small)
    return {"peak_rss_per_rank_mb": ranks, "tokenized": "prepare" in result["stderr"] or "learned" in result["stderr"]}


# ----- the run -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100MB,2GB", help="corpus sizes, comma separated (MB / GB of UTF-8 text)")
    p.add_argument("--work", default=os.path.join(REPO, "runs", "corpus-scale"), help="corpora, datasets, runs")
    p.add_argument("--workers", type=int, default=0, help="bertkit prepare --workers (0: every core)")
    p.add_argument("--steps", type=int, default=30, help="pretraining steps of each RSS / start-up run")
    p.add_argument("--speed-steps", type=int, default=300, help="steps of each training-speed run (0: skip)")
    p.add_argument("--speed-repeats", type=int, default=3)
    p.add_argument(
        "--wwm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also prepare the smallest corpus with --wwm, and time jieba",
    )
    p.add_argument("--ddp", action=argparse.BooleanOptionalAction, default=True, help="torchrun 2 ranks on the largest")
    p.add_argument("--json", default=None)
    p.add_argument("--md", default=None)
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    os.makedirs(args.work, exist_ok=True)
    tokenizer = tokenizer_dir(args.work)
    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "sizes": {},
    }
    workers = [] if not args.workers else ["--workers", str(args.workers)]
    for size in sizes:
        name = f"{size / 1e6:.0f}MB"
        corpus = make_corpus(os.path.join(args.work, f"corpus-{name}.txt"), size)
        data = os.path.join(args.work, f"data-{name}")
        shutil.rmtree(data, ignore_errors=True)  # prepare keeps a folder made from the same inputs: time a new one
        prepared = measure(
            bertkit(
                "prepare",
                "--corpus",
                corpus,
                "--tokenizer",
                tokenizer,
                "--out",
                data,
                "--overwrite",
                "--no-progress",
                *workers,
            )
        )
        text_mb = os.path.getsize(corpus) / 1e6
        entry = {
            "corpus_mb": round(text_mb, 1),
            "prepare": {
                "seconds": prepared["seconds"],
                "mb_per_s": round(text_mb / prepared["seconds"], 2),
                "peak_rss_mb": prepared["peak_rss_mb"],
                "peak_rss_all_mb": prepared["peak_rss_all_mb"],
            },
            "disk": disk(data),
            "pretrain": pretrain_from(data, args.work, f"pt-{name}", args.steps),
            "pretrain_documents": pretrain_from(data, args.work, f"pt-doc-{name}", 10, ["--packing", "documents"]),
            "pretrain_nsp": pretrain_from(data, args.work, f"pt-nsp-{name}", 10, ["--nsp"]),
        }
        report["sizes"][name] = entry
        print(json.dumps({name: entry}), flush=True)
    smallest = min(sizes)
    small = f"{smallest / 1e6:.0f}MB"
    small_corpus = os.path.join(args.work, f"corpus-{small}.txt")
    report["encode_batch"] = encode_batch_reference(small_corpus, tokenizer, smallest)
    print(json.dumps({"encode_batch": report["encode_batch"]}), flush=True)
    if args.wwm:
        wwm_data = os.path.join(args.work, f"data-{small}-wwm")
        shutil.rmtree(wwm_data, ignore_errors=True)
        prepared = measure(
            bertkit(
                "prepare",
                "--corpus",
                small_corpus,
                "--tokenizer",
                tokenizer,
                "--out",
                wwm_data,
                "--wwm",
                "--overwrite",
                "--no-progress",
                *workers,
            )
        )
        report["wwm"] = {
            "prepare_mb_per_s": round(smallest / 1e6 / prepared["seconds"], 2),
            "prepare_seconds": prepared["seconds"],
            "peak_rss_all_mb": prepared["peak_rss_all_mb"],
            "jieba": jieba_reference(small_corpus, min(smallest, 20 * 10**6), args.workers or os.cpu_count()),
        }
        print(json.dumps({"wwm": report["wwm"]}), flush=True)
    report["batch_cost"] = batch_cost(os.path.join(args.work, f"data-{small}"), tokenizer)
    print(json.dumps({"batch_cost": report["batch_cost"]}), flush=True)
    if args.speed_steps:
        report["speed_vs_before"] = speed_against_before(args.work, tokenizer, args.speed_steps, args.speed_repeats)
        print(json.dumps({"speed_vs_before": report["speed_vs_before"]}), flush=True)
    if args.ddp:
        largest = f"{max(sizes) / 1e6:.0f}MB"
        report["ddp"] = ddp_ranks(os.path.join(args.work, f"data-{largest}"), args.work, args.steps)
        print(json.dumps({"ddp": report["ddp"]}), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write(markdown(report))
    return report


def markdown(r: dict) -> str:
    lines = [
        "# Pretraining from prepared corpora: memory, start-up, preparation speed, disk",
        "",
        f"`python bench/bench_corpus_scale.py` on {r['machine']['cpus']} CPU cores "
        f"(Python {r['machine']['python']}). Corpora: People's Daily articles repeated, sentences shuffled "
        "per copy, one document per line; vocabulary 21,128 (uint16 ids); `mini`, batch 8 x 128.",
        "",
        "| corpus | prepare: MB/s | prepare: peak RSS, main / all processes (MB) | disk: ids + marks per token "
        "(B) | pretrain --data: peak RSS (MB) | command to first step (s) | tokens/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, e in r["sizes"].items():
        lines.append(
            f"| {e['corpus_mb']:,.0f} MB | {e['prepare']['mb_per_s']} | {e['prepare']['peak_rss_mb']:,.0f} / "
            f"{e['prepare']['peak_rss_all_mb']:,.0f} | {e['disk']['ids_and_marks_per_token']} | "
            f"{e['pretrain']['peak_rss_mb']:,.0f} | {e['pretrain']['first_step_s']} | "
            f"{e['pretrain']['tokens_per_s']:,.0f} |"
        )
    lines += [
        "",
        "The other kinds of rows (10 steps each): peak RSS (MB) and seconds from the command to the first "
        "step, which includes planning the rows (documents: best fit of each document's last piece; NSP: "
        "a walk over every sentence):",
        "",
        "| corpus | --packing documents: peak RSS | first step (s) | --nsp: peak RSS | first step (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for name, e in r["sizes"].items():
        d, n = e["pretrain_documents"], e["pretrain_nsp"]
        lines.append(
            f"| {e['corpus_mb']:,.0f} MB | {d['peak_rss_mb']:,.0f} | {d['first_step_s']} | "
            f"{n['peak_rss_mb']:,.0f} | {n['first_step_s']} |"
        )
    first = next(iter(r["sizes"].values()))["disk"]["bytes_per_token"]
    lines += ["", "Disk per token: " + ", ".join(f"{k} {v}" for k, v in first.items()) + " bytes.", ""]
    eb = r.get("encode_batch")
    if eb:
        small = min(r["sizes"].values(), key=lambda e: e["corpus_mb"])
        lines.append(
            f"The tokenizers library's own `encode_batch` over the same {eb['mb']} MB on the same cores: "
            f"{eb['mb_per_s']} MB/s; `bertkit prepare`: {small['prepare']['mb_per_s']} MB/s "
            f"({small['prepare']['mb_per_s'] / eb['mb_per_s']:.2f}x)."
        )
    if r.get("wwm"):
        w = r["wwm"]
        lines.append(
            f"With `--wwm`: {w['prepare_mb_per_s']} MB/s; jieba alone on the same cores: "
            f"{w['jieba']['mb_per_s']} MB/s (over {w['jieba']['mb']} MB)."
        )
    if r.get("batch_cost"):
        lines.append(
            "Building a batch of 8 x 128 from --data (rows + masking), per kind of rows: "
            + "; ".join(
                f"{k} {v['ms_per_batch']} ms (plan {v['plan_s']} s, {v['rows']:,} rows)"
                for k, v in r["batch_cost"].items()
            )
            + "."
        )
    if r.get("speed_vs_before"):
        s = r["speed_vs_before"]
        lines.append(
            f"Training speed from --data against the in-memory path of commit {BEFORE} (builtin:peoples-daily, "
            f"{s['steps']} steps, {s['repeats']} interleaved runs each, median tokens/s): --data "
            f"{s['tokens_per_s_data']}, before {s['tokens_per_s_before']}: ratio {s['ratio']}."
        )
    if r.get("ddp"):
        lines.append(
            f"torchrun --nproc_per_node 2 pretrain --data (the largest corpus): peak RSS per rank "
            f"{r['ddp']['peak_rss_per_rank_mb']} MB; tokenized: {r['ddp']['tokenized']}."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
