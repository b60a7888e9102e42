"""How far int8 moves sentence embeddings, by way of quantizing: cosine of each text's int8 vector to its float32
vector (all-MiniLM-L6-v2, the texts of bench_cpu_anchors.py in its sorted batches of 32), worst and mean.

    python bench/bench_int8_accuracy.py [--texts 1000] [--variants torch,fullrange,token,...] [--md out.md]

Variants (every Linear of the encoder replaced; weights int8 with one scale per output feature in all):
    torch        bertkit's --quantize int8 before 2026-12-01: torch.ao dynamic quantization (fbgemm: activations uint8 with one
                 scale per call over the whole batch, 7-bit range: reduce_range=True)
    fullrange    the same kernel with the full 8-bit activation range (reduce_range=False)
    token        activations int8 with one scale per token (row), symmetric, the int8 products scaled back per row
                 and per output feature (simulated in float32: see TokenInt8Linear)
    rows7, rows8 per-token scales from the real fbgemm kernel (RowScaledInt8Linear), 7- or 8-bit activations
    -a<alpha>    with SmoothQuant's migration: per input channel j, s_j = max|x_j|^alpha / max|w_j|^(1 - alpha) from
                 --calibration texts per language (other texts than those measured), x / s and w * s
    -rand        calibrate the smoothing on sequences of random vocabulary entries instead of texts
    rows8w7      rows8 with 7-bit weights (Rows8W7Linear): no saturation
    rowsdnn      rows8 with the weights packed for oneDNN (torch's onednn quantized engine)
    span         bertkit's Int8Linear: rows8w7 plus one row spanning [-1, 1] in every call, so that the kernel's
                 one scale per call is the same for every batch: symmetric 8 bits per token
    bertkit      what `--quantize int8` ships: span-a0.5 calibrated on bertkit.quantize.calibration_texts (People's
                 Daily and Python-documentation sentences, none of the measured ones), the first layer's
                 feed-forward down projection float32, the model's default (padding-free) path
    -skipff2     the feed-forward's down projection (output.dense, fed by GELU) stays float32
The encoder runs its padded path here (query / key / value as three layers), the same batches as the benchmark's.
Only the agreement is measured here, not speed (see bench_cpu_anchors.py for that).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_cpu_anchors import SORTED_BATCH, chinese_texts, english_texts, minilm_dir  # noqa: E402


def smoothed(linear: nn.Linear, smooth):
    """(the weight times the smoothing factors per input channel, 1 / the factors), or (the weight, None)."""
    w = linear.weight.detach()
    return (w, None) if smooth is None else (w * smooth, 1 / smooth)


class TokenInt8Linear(nn.Module):
    """x (.., K) -> int8 per row (scale max|row| / 127), weight int8 per output feature, the product of the int8
    values, scaled back per row and per output feature. Simulated in float32 (exact for these sizes but for the
    last bits of the sums): torch's own int8 x int8 product on the CPU (torch._int_mm) is a reference loop, 46x
    slower than float32, so this variant measures agreement only."""

    def __init__(self, linear: nn.Linear, smooth=None):
        super().__init__()
        w, self.inv = smoothed(linear, smooth)
        self.w_scale = w.abs().amax(1).clamp_min(1e-12) / 127  # (N,)
        self.w_q = torch.round(w / self.w_scale[:, None]).clamp(-127, 127)  # (N, K) integers
        self.bias = linear.bias.detach()

    def forward(self, x):
        if self.inv is not None:
            x = x * self.inv
        scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127  # (.., 1)
        q = torch.round(x / scale).clamp(-127, 127)
        return F.linear(q, self.w_q) * scale * self.w_scale + self.bias


def ao_packed(linear: nn.Linear, engine: str = "x86"):
    """torch.ao's dynamic quantized Linear of `linear` (8-bit weights per output feature), its packed weights."""
    from bertkit.quantize import _engine

    copy = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    copy.load_state_dict(linear.state_dict())
    copy.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with _engine(engine):
        return torch.ao.nn.quantized.dynamic.Linear.from_float(copy)._packed_params._packed_params


class DynamicInt8Linear(nn.Module):
    """torch.ao's dynamic int8 Linear (fbgemm): activations uint8, one scale per call; reduce_range: 7 bits (what
    nn.quantized.dynamic.Linear passes) or the full 8; smooth: activations divided, weights multiplied per input
    channel (SmoothQuant: build multiplies the weights, forward divides the activations)."""

    def __init__(self, linear: nn.Linear, reduce_range=True):
        super().__init__()
        self.inv = None  # 1 / smoothing per input channel (build sets it; the weights came multiplied)
        self.packed = ao_packed(linear)
        self.reduce_range = reduce_range

    def forward(self, x):
        if self.inv is not None:
            x = x * self.inv
        return torch.ops.quantized.linear_dynamic(x, self.packed, reduce_range=self.reduce_range)


class RowScaledInt8Linear(nn.Module):
    """Per-token scales from a per-call kernel: each row divided by its max |x| first, so that fbgemm's one scale
    per call (over rows all within [-1, 1]) is in effect one per row; the product multiplied back by the row's
    max, the bias added after. reduce_range: 7-bit activations (no int16 saturation in AVX2's u8 x s8 pairs)."""

    def __init__(self, linear: nn.Linear, reduce_range=True, smooth=None, engine="x86"):
        super().__init__()
        w, self.inv = smoothed(linear, smooth)
        plain = nn.Linear(linear.in_features, linear.out_features, bias=False).requires_grad_(False)
        plain.weight.copy_(w)
        self.packed = ao_packed(plain, engine)
        self.bias = linear.bias.detach()
        self.reduce_range = reduce_range

    def forward(self, x):
        if self.inv is not None:
            x = x * self.inv
        r = x.abs().amax(-1, keepdim=True).clamp_min(1e-12)  # (.., 1)
        y = torch.ops.quantized.linear_dynamic(x / r, self.packed, reduce_range=self.reduce_range)
        return torch.addcmul(self.bias, y, r)


class Rows8W7Linear(nn.Module):
    """RowScaledInt8Linear with 8-bit activations and 7-bit weights (-63..63 per output feature): AVX2's u8 x s8
    pairs (vpmaddubsw) then stay within int16, where 8-bit x 8-bit ones saturate."""

    def __init__(self, linear: nn.Linear, smooth=None):
        super().__init__()
        w, self.inv = smoothed(linear, smooth)
        scale = w.abs().amax(1).clamp_min(1e-12) / 63
        qw = torch.quantize_per_channel(w, scale.double(), torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(qw, None)
        self.bias = linear.bias.detach()

    def forward(self, x):
        if self.inv is not None:
            x = x * self.inv
        r = x.abs().amax(-1, keepdim=True).clamp_min(1e-12)  # (.., 1)
        return torch.addcmul(self.bias, torch.ops.quantized.linear_dynamic(x / r, self.packed, reduce_range=False), r)


def calibrate(model, texts_by_lang, tokenizer):
    """max |x| per input channel of every Linear in the encoder layers, over calibration texts one at a time."""
    stats, hooks = {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and ".layer." in name:

            def hook(mod, inputs, out, name=name):
                a = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(0)
                stats[name] = torch.maximum(stats[name], a) if name in stats else a

            hooks.append(m.register_forward_hook(hook))
    if texts_by_lang == "random":  # no texts: sequences of random vocabulary entries between [CLS] and [SEP]
        g = torch.Generator().manual_seed(0)
        special = set(tokenizer.all_special_ids)
        pool = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
        rows = [
            [
                tokenizer.cls_token_id,
                *pool[torch.randint(len(pool), (n,), generator=g)].tolist(),
                tokenizer.sep_token_id,
            ]
            for n in torch.randint(8, 120, (128,), generator=g).tolist()
        ]
    else:
        rows = [tokenizer(t, truncation=True, max_length=256)["input_ids"] for texts in texts_by_lang for t in texts]
    with torch.inference_mode():
        for row in rows:
            ids = torch.tensor([row])
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    for h in hooks:
        h.remove()
    return stats


def padded(model):
    for m in model.modules():
        if hasattr(m, "attn_implementation"):
            m.attn_implementation = "sdpa"  # q, k, v as three Linears (the padding-free path reads their weights)
    model.config.attn_implementation = "sdpa"


def build(model_dir: str, variant: str, calib):
    """variant: kind[-a<alpha>][-skipff2], kind in torch | fullrange | token | rows7 | rows8."""
    from bertkit import Encoder

    if variant == "bertkit":  # what --quantize int8 ships (bertkit/quantize.py), on the model's default path
        return Encoder.from_pretrained(model_dir, quantize="int8")
    encoder = Encoder.from_pretrained(model_dir)
    model = encoder.model
    padded(model)
    parts = variant.split("-")
    kind, alpha = parts[0], None
    skip = "skipff2" in parts
    for part in parts[1:]:
        if part.startswith("a"):
            alpha = float(part[1:])
    stats = calibrate(model, "random" if "rand" in parts else calib, encoder.tokenizer) if alpha is not None else {}
    for name, m in list(model.named_modules()):
        if not isinstance(m, nn.Linear) or ".layer." not in name:
            continue
        if skip and name.endswith("output.dense") and "attention" not in name:
            continue
        smooth = None
        if alpha is not None:
            w_max = m.weight.detach().abs().amax(0).clamp_min(1e-5)  # (K,)
            smooth = (stats[name].clamp_min(1e-5) ** alpha / w_max ** (1 - alpha)).clamp_min(1e-5)
        if kind == "token":
            new = TokenInt8Linear(m, smooth)
        elif kind == "span":
            from bertkit.quantize import Int8Linear

            new = Int8Linear(m, smooth)
        elif kind == "rows8w7":
            new = Rows8W7Linear(m, smooth)
        elif kind in ("rows7", "rows8", "rowsdnn"):
            new = RowScaledInt8Linear(m, kind == "rows7", smooth, "onednn" if kind == "rowsdnn" else "x86")
        else:
            if smooth is not None:
                w = m.weight.detach() * smooth
                m = nn.Linear(m.in_features, m.out_features).requires_grad_(False)
                m.weight.copy_(w)
                m.bias.copy_(model.get_submodule(name).bias)
            new = DynamicInt8Linear(m, reduce_range=(kind == "torch"))
            if smooth is not None:
                new.inv = 1 / smooth
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, new)
    return encoder


def vectors(encoder, texts):
    return encoder.encode(texts, batch_size=SORTED_BATCH)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=1000)
    p.add_argument("--variants", default="torch,fullrange,rows7,rows8,rows8w7,token,span,token-a0.5,span-a0.5,bertkit")
    p.add_argument(
        "--calibration",
        type=int,
        default=64,
        help="texts per language to calibrate the -a variants' smoothing on (other texts of the same sources)",
    )
    p.add_argument("--model", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--md", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = minilm_dir(args.model)
    texts = {"zh": chinese_texts(args.texts, args.seed), "en": english_texts(args.texts, args.seed)}
    calib = [chinese_texts(args.calibration, args.seed + 1), english_texts(args.calibration, args.seed + 1)]
    from bertkit import Encoder

    reference = Encoder.from_pretrained(model_dir)
    ref = {k: vectors(reference, v) for k, v in texts.items()}
    lines = ["| variant | zh worst | zh mean | en worst | en mean |", "|---|---:|---:|---:|---:|"]
    for variant in args.variants.split(","):
        enc = build(model_dir, variant, calib)
        cells = []
        for lang, items in texts.items():
            c = (vectors(enc, items) * ref[lang]).sum(1)
            cells += [f"{c.min():.4f}", f"{c.mean():.4f}"]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
