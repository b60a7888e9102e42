"""Two pretrainings at once on the same cores: tokens/s of each against one alone, per thread setting.

    python bench/bench_contention.py --steps 60 --rounds 2 --md bench/results/contention.md

Each setting runs `bertkit pretrain --data D --model-config mini` once alone and twice at once (two processes
started together), `rounds` times, settings interleaved so that a drift of the machine hits them all alike;
tokens/s is the mean of each run's metrics rows after the first (the first holds start-up). A setting is a set
of environment variables given to the processes ("default": bertkit's own choice; "torch first": torch imported
before bertkit, so that libgomp keeps its own defaults, as before bertkit/threads.py). Prints the CPU's flags:
a ranking on one CPU says nothing about another. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

SETTINGS = {
    "default": {},  # bertkit's own choice (bertkit/threads.py)
    "torch first (libgomp's own default)": {"BENCH_IMPORT_TORCH_FIRST": "1"},
    "active (spin, torch's default before)": {"OMP_WAIT_POLICY": "ACTIVE"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 1k": {"GOMP_SPINCOUNT": "1000"},
    "spin 3k": {"GOMP_SPINCOUNT": "3000"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
    "spin 100k": {"GOMP_SPINCOUNT": "100000"},
    "spin 300k (libgomp's default)": {"GOMP_SPINCOUNT": "300000"},
    "one thread": {"OMP_NUM_THREADS": "1"},
}


def cpu_flags() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor()
    keep = [line for line in out.splitlines() if line.split(":")[0].strip() in ("Model name", "CPU(s)", "Flags")]
    return "\n".join(keep)


def prepare_data(folder: str) -> str:
    data = os.path.join(folder, "data")
    if not os.path.exists(data):
        tok = os.path.join(folder, "tok")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bertkit",
                "tokenizer",
                "train",
                "--corpus",
                "builtin:peoples-daily",
                "--vocab-size",
                "8000",
                "--out",
                tok,
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bertkit",
                "prepare",
                "--corpus",
                "builtin:peoples-daily",
                "--tokenizer",
                tok,
                "--out",
                data,
                "--no-progress",
            ],
            check=True,
            capture_output=True,
        )
    return data


def start(data: str, out: str, steps: int, env: dict) -> subprocess.Popen:
    # torch imported before bertkit: its libgomp reads the environment before bertkit can set anything
    first = "import torch; " if env.get("BENCH_IMPORT_TORCH_FIRST") else ""
    cmd = [
        sys.executable,
        "-c",
        f"{first}import sys; from bertkit.cli import main; sys.exit(main())",
        "pretrain",
        "--data",
        data,
        "--model-config",
        "mini",
        "--out",
        out,
        "--steps",
        str(steps),
        "--log-every",
        "5",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--seq-len",
        "128",
        "--batch-size",
        "16",
        "--device",
        "cpu",
        "--no-progress",
        "--overwrite",
    ]
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    return subprocess.Popen(cmd, env={**clean, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def tokens_per_s(out: str) -> float:
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"), encoding="utf-8")]
    speeds = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r.get("split") != "eval"]
    return statistics.mean(speeds[1:])


def measure(data: str, work: str, steps: int, env: dict, together: int) -> list[float]:
    outs = [os.path.join(work, f"run{i}") for i in range(together)]
    procs = [start(data, out, steps, env) for out in outs]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"pretrain failed: {err[-2000:]}")
    return [tokens_per_s(out) for out in outs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS))
    parser.add_argument("--work", default=None, help="folder for the data and runs (default: a temp folder)")
    parser.add_argument("--md", default=None, help="write the table here")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="contention-")
    print(cpu_flags())
    data = prepare_data(work)
    results: dict[str, dict[str, list[float]]] = {name: {"alone": [], "two": []} for name in args.settings}
    for round_ in range(args.rounds):
        for name in args.settings:
            env = SETTINGS[name]
            results[name]["alone"] += measure(data, work, args.steps, env, 1)
            results[name]["two"] += measure(data, work, args.steps, env, 2)
            print(
                f"round {round_ + 1} {name}: alone {results[name]['alone'][-1]:,.0f} tokens/s, two at once "
                f"{results[name]['two'][-2]:,.0f} / {results[name]['two'][-1]:,.0f}",
                flush=True,
            )
    base = statistics.mean(results["default"]["alone"]) if "default" in results else None
    lines = [
        "| setting | alone (tokens/s) | two at once, each | each / its alone | alone / default alone |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        alone, two = statistics.mean(r["alone"]), statistics.mean(r["two"])
        lines.append(
            f"| {name} | {alone:,.0f} | {two:,.0f} (min {min(r['two']):,.0f}) | {two / alone:.2f}x | "
            + (f"{alone / base:.3f}" if base else "-")
            + " |"
        )
    table = "\n".join(lines)
    print(table)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write(
                f"# Two pretrainings at once\n\n`python bench/bench_contention.py --steps {args.steps} --rounds "
                f"{args.rounds}` on {time.strftime('%Y-%m-%d')}\n\n```\n{cpu_flags()}\n```\n\n{table}\n"
            )


if __name__ == "__main__":
    main()
