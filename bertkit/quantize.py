"""int8 inference on the CPU: `quantize(model, "int8")`, the `--quantize int8` of evaluate / predict.

    float32 model (eval mode, on the CPU)
      -> every nn.Linear whose weight is its own (query, key, value, the dense layers, pooler,
         classifier) becomes an Int8Linear: torch's dynamic quantization (torch.ao), i.e. int8
         weights with one scale per output feature, packed once; activations quantized to uint8 on
         the fly (one scale per call, over the whole batch); a uint8 x int8 -> int32 matrix multiply;
         the result scaled back to float32
      -> each SelfAttention also gets `qkv`, query/key/value side by side as one Int8Linear, for the
         unpadded (varlen) path, which runs them as one matrix multiply (per-feature scales: the same
         int8 weights as the three separate layers)
      -> embeddings, LayerNorms, attention, GELU, the tied MLM decoder: float32, unchanged

Which kernel: the weights are packed for torch's quantized engine (x86 / fbgemm), the fastest for
few rows (one short text); on a CPU with AMX int8 units a second packing for oneDNN serves calls of
LARGE_ROWS tokens or more (batches), where it is much faster and x86's is slower.

The MLM decoder stays float32: its weight IS the word embedding table (tie_word_embeddings) and
LMPredictionHead reads `decoder.weight` directly; a quantized copy would untie it, and the embedding
lookup would still need the float table. Any Linear whose weight another module shares is left so.

Quantizing changes the module in place (it loses its float Linear weights) and returns it. The
result is for inference only: no gradients, no save_pretrained, no head pruning. int8 scales cannot be
computed from NaN / Infinity: the loaders (inference.check_weights) refuse such weights before quantizing.
Speed, accuracy and agreement with float32, measured with bench/bench_int8.py: bench/results/int8_cpu.json.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch
from torch import Tensor, nn

from . import attention, padding
from .errors import BertkitError
from .finite import check_weights
from .model import SelfAttention

CHOICES = ("int8", "bf16")
# the --quantize flag of evaluate, predict, embed and serve
FLAG_HELP = ("CPU inference with int8 Linear layers (int8) or bfloat16 weights and activations (bf16): faster, "
             "slightly different numbers")
LARGE_ROWS = 256  # calls with this many tokens or more use the oneDNN packing where there is one


class QuantizeError(BertkitError, ValueError):
    """Quantization asked for in a way that cannot work (unknown kind, GPU model, training mode)."""


def quantize(model: nn.Module, how: str | None) -> nn.Module:
    """`model` for CPU inference with its Linear layers in int8 (how="int8"), with every weight and activation
    in bfloat16 (how="bf16"; outputs handed back in float32), or unchanged (how=None)."""
    if how is None:
        return model
    if how not in CHOICES:
        raise QuantizeError(f"unknown quantization {how!r}; choose one of: {', '.join(CHOICES)} (or none)")
    devices = {str(t.device) for t in (*model.parameters(), *model.buffers())}
    if devices - {"cpu"}:
        raise QuantizeError(f"--quantize {how} is for CPU inference, but the model is on {', '.join(sorted(devices))};"
                            " move it to the CPU (model.cpu()) or drop the quantization (on a GPU use bf16/fp16)")
    if model.training:
        raise QuantizeError(f"--quantize {how} is for CPU inference, but the model is in training mode; call "
                            "model.eval() first (quantized layers have no gradients, so fine-tune in float32)")
    if any(isinstance(m, Int8Linear) for m in model.modules()) or getattr(model, "_bf16_outputs", None):
        return model  # quantized already
    check_weights(model, "the model to quantize")  # int8's quantizer would fail on a NaN with a torch error
    if how == "bf16":
        return _bfloat16(model)
    names = _own_linears(model)
    for name, module in list(model.named_modules()):
        if type(module) is SelfAttention:
            _add_fused_qkv(module)
            names.add(f"{name}.qkv" if name else "qkv")
    for name in sorted(names):
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, Int8Linear(getattr(owner, child)))
    return model


def _bfloat16(model: nn.Module) -> nn.Module:
    """Weights and activations in bfloat16 (AMX / AVX-512 BF16 units run its matrix products several times
    faster than float32 on large batches); the outputs' tensors back in float32 for what reads them."""
    model.to(torch.bfloat16)

    def to_float32(module, inputs, output):
        for name, value in vars(output).items() if hasattr(output, "__dict__") else ():
            if isinstance(value, Tensor) and value.is_floating_point():
                setattr(output, name, value.float())
        return output

    model._bf16_outputs = model.register_forward_hook(to_float32)
    return model


class Int8Linear(nn.Module):
    """An nn.Linear as int8 weights (torch.ao's dynamic quantized Linear), packed for the default
    engine and, on CPUs with AMX, also for oneDNN, which then takes the calls of LARGE_ROWS tokens or more."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.small = _packed(linear, torch.backends.quantized.engine)
        large = _large_rows_engine()
        self.large = _packed(linear, large) if large else None

    def forward(self, x: Tensor) -> Tensor:
        rows = x.numel() // self.in_features
        return (self.large if self.large is not None and rows >= LARGE_ROWS else self.small)(x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel weights, "
                f"large batches: {'onednn' if self.large is not None else 'as small ones'}")


def _packed(linear: nn.Linear, engine: str) -> nn.Module:
    """torch.ao's dynamic quantized Linear of `linear` (int8, per output feature), packed for `engine`."""
    float_linear = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    float_linear.load_state_dict(linear.state_dict())  # a copy: `linear` itself is left as it was
    float_linear.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with _engine(engine), warnings.catch_warnings():  # torch >= 2.10 deprecates torch.ao.quantization
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel",
                                category=UserWarning)
        return torch.ao.nn.quantized.dynamic.Linear.from_float(float_linear)


@contextlib.contextmanager
def _engine(name: str):
    """torch's quantized engine set to `name` while weights are packed (the packing remembers it)."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


@functools.cache
def _large_rows_engine() -> str | None:
    """"onednn" on an x86 CPU with AMX int8 (oneDNN's large-batch kernels use it), else None."""
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
    return {name for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and owners.get(id(m.weight), 0) == 1}


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
        context = attention.varlen_attention(q, k, v, varlen.cu_seqlens, varlen.max_seqlen,
                                             dropout_p=self.dropout.p if self.training else 0.0,
                                             bounds=varlen.bounds, layout=varlen.layout)
        return context.reshape(N, self.all_head_size)  # (N, heads * head_dim)
