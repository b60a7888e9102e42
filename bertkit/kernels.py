"""The encoder's matrix products at inference on the CPU: oneDNN with each weight packed once, where it is faster.

    linear(x, *layers, act=None)   x (..., in) -> (..., sum of the layers' out): x through nn.Linears that share
                                   in_features, side by side (query / key / value as ONE product), then `act`
    packs(x, training)             whether linear() takes the packed kernel for x (training: the layers' mode)
    track(model) / forget(model)   make its Linear layers' parameters say every edit / drop its packed weights

A packed product (torch.ops.mkldnn: the weight reordered once into oneDNN's blocked layout, the bias, and erf GELU
fused into the same call) runs when all of these hold:
    - no gradient is being recorded (inference: torch.no_grad / inference_mode), the layers are not in training
      mode and no graph is being traced (torch.compile, ONNX export): training and its numbers are untouched (a
      training model embedding without gradients, GradCache's first pass, gives the numbers of its replay);
    - x is float32 on the CPU and every layer is a plain nn.Linear without forward hooks (int8 / bf16 layers,
      and hooked ones, run as modules);
    - the CPU's choice says so: choice() is BERTKIT_KERNELS ("onednn" or "torch") when set, else by CPU kind
      (ONEDNN_CPUS), a fixed rule, so one machine gives the same numbers on every run.
Else the product is F.linear on the layers' weights (concatenated when several).

The packed weights live in a cache beside the model, not in it (no state_dict, no deepcopy or pickle of them),
keyed by what says a weight changed: the parameter itself (a new one swapped in), its storage, its version counter
(an optimizer step, load_state_dict, an edit under no_grad) and the version counters of the tensors its `.data`
handed out (`p.data.mul_(-1)`, `p.data.copy_(w)`: autograd's version counter does not count writes made through
`.data`). For the last, the Linear layers' parameters are kernels.Parameter (track(): the model's post_init, and
any plain nn.Parameter found when packing), an nn.Parameter that remembers what its `.data` handed out; its repr,
state_dict, optimizer steps and pickling are nn.Parameter's. The one write nothing sees is one through NumPy or a
raw storage (`p.detach().numpy()[:] = 0`): after such an edit call kernels.forget(model). model.train() drops the
packed weights too. Memory: one more copy of the encoder's Linear weights while the model serves (all-MiniLM-L6-v2
+42 MB, BERT-base +340 MB).
Measured per CPU kind: bench/bench_engines.py (bench/results/engines.md).

oneDNN keeps a primitive per input shape in ideep's cache (LRU_CACHE_CAPACITY entries, 1,024 by default), and
with padding-free batches nearly every batch has a new shape (its real token count): under `bertkit serve` the
cache filled for 10,000 requests and held ~650 MB more at the end than after warm-up. 64 entries keep the memory
flat at the same speed (bench/results/serve_soak_kernels.md); a user's own LRU_CACHE_CAPACITY wins. The variable
is read when oneDNN first runs, so it is set when this module loads, before any packed product.
"""

from __future__ import annotations

import itertools
import os
import platform
import weakref
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .activations import ACT2FN
from .errors import ConfigError

KERNELS = ("onednn", "torch")
# CPU kinds (torch.backends.cpu.get_cpu_capability()) where the packed oneDNN products are faster than torch's
# default (MKL) ones (bench/results/engines.md measures them side by side, AVX2 and AVX-512 machines)
ONEDNN_CPUS = ("AVX2", "AVX512")
_FUSED_ACTS = {"gelu": "gelu"}  # hidden_act -> the oneDNN post-op computing it (erf GELU, as ACT2FN["gelu"])

PRIMITIVE_CACHE = 64  # ideep's cache of oneDNN primitives (one per input shape); see the module docstring
os.environ.setdefault("LRU_CACHE_CAPACITY", str(PRIMITIVE_CACHE))

# per weight and bias: (data pointer, version, what its `.data` handed out: _handed_out())
_ParamsKey = tuple[tuple[int, int, tuple[int, tuple[tuple[int, int], ...]]], ...]
# first layer -> {the layers' ids: (their parameters, their key, packed weight, bias)}; the parameters are weak
# references, so a parameter swapped in for another (even one that reuses its id and memory) packs again
_Packed = tuple[tuple["weakref.ref[Tensor]", ...], _ParamsKey, Tensor, Tensor | None]
_packed: weakref.WeakKeyDictionary[nn.Module, dict[tuple[int, ...], _Packed]] = weakref.WeakKeyDictionary()
_serials = itertools.count()  # numbers the tensors parameters' `.data` hand out
_TENSOR_DATA: Any = torch._C.TensorBase.__dict__["data"]  # the C property behind every tensor's `.data`


class Parameter(nn.Parameter):
    """An nn.Parameter that remembers the tensors its `.data` hands out and is given, so that a packed copy of it
    sees writes made through them (they bump their own version counter, not the parameter's). Everything else,
    the repr included, is nn.Parameter's; pickling gives back a plain nn.Parameter (tracked again when packed)."""

    @property
    def data(self) -> Tensor:
        data = _TENSOR_DATA.__get__(self)
        _remember(self, data)
        return data

    @data.setter
    def data(self, value: Tensor) -> None:
        _TENSOR_DATA.__set__(self, value)
        _remember(self, value)

    def __repr__(self) -> str:  # type: ignore[override]  # nn.Parameter's signature (Tensor's takes more)
        return "Parameter containing:\n" + repr(self.detach().requires_grad_(self.requires_grad))

    def __getstate__(self) -> dict[str, Any]:  # what pickle keeps: not the weak references
        return {k: v for k, v in self.__dict__.items() if k != HANDOUTS}


HANDOUTS = "_bertkit_handouts"  # a Parameter's [(serial, weak reference)] of the tensors handed out or given


def _remember(param: Tensor, data: Tensor) -> None:
    """Add `data` to what `param` handed out, dropping what was freed since."""
    live = [(n, ref) for n, ref in param.__dict__.get(HANDOUTS, ()) if ref() is not None]
    param.__dict__[HANDOUTS] = [*live, (next(_serials), weakref.ref(data))]


def track(model: nn.Module) -> None:
    """Make the parameters of `model`'s plain nn.Linear layers kernels.Parameter (in place: the same objects, so an
    optimizer or a tied weight holding them is unaffected)."""
    for layer in model.modules():
        if type(layer) is nn.Linear:
            for param in (layer.weight, layer.bias):
                if type(param) is nn.Parameter:
                    param.__class__ = Parameter


def choice() -> str:
    """ "onednn" or "torch": BERTKIT_KERNELS when set, else the rule for this CPU kind."""
    given = os.environ.get("BERTKIT_KERNELS", "").strip().lower()
    if given:
        if given not in KERNELS:
            raise ConfigError(
                f"BERTKIT_KERNELS={given!r}: use one of {', '.join(KERNELS)} (or leave it unset: the rule for this CPU)"
            )
        return given if given == "torch" or _onednn_available() else "torch"
    return "onednn" if _onednn_available() and cpu_kind() in ONEDNN_CPUS else "torch"


def cpu_kind() -> str:
    """torch's name for the CPU's vector units: DEFAULT, AVX2, AVX512 (x86), or the machine's (others)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return platform.machine()
    return torch.backends.cpu.get_cpu_capability()


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


_choice: tuple[str | None, str] | None = None  # (BERTKIT_KERNELS when it was made, the choice)


def _chosen() -> str:
    """choice(), made again only when BERTKIT_KERNELS changed (it is read on every product)."""
    global _choice
    given = os.environ.get("BERTKIT_KERNELS")
    if _choice is None or _choice[0] != given:
        _choice = (given, choice())
    return _choice[1]


def packs(x: Tensor, training: bool = False) -> bool:
    """Whether linear() runs x through packed oneDNN weights (the module's docstring lists when); training: whether
    the layers are in training mode."""
    return (
        not training
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
        and not torch.onnx.is_in_onnx_export()
        and _chosen() == "onednn"
    )


def linear(x: Tensor, *layers: nn.Module, act: str | None = None) -> Tensor:
    """x (..., in) through `layers` side by side: (..., sum of out_features); `act` is a hidden_act name applied
    after (fused into the packed product where oneDNN has it), or None. A layer with forward hooks (explain's
    recorder, a user's) is called as a module, so its hooks see its own input and output."""
    plain = all(type(layer) is nn.Linear and not _hooked(layer) for layer in layers)
    linears = cast("tuple[nn.Linear, ...]", layers)  # what they are where `plain` holds (read only there)
    if (
        plain
        and packs(x, any(layer.training for layer in layers))
        and all(layer.weight.dtype == torch.float32 for layer in linears)
    ):
        packed = _packed_weight(linears)
        if packed is not None:
            weight, bias = packed
            fused = _FUSED_ACTS.get(act) if act is not None else None
            y = torch.ops.mkldnn._linear_pointwise(x, weight, bias, fused or "none", [], "none" if fused else "")
            return y if fused or act is None else ACT2FN[act](y)
    if len(layers) == 1:
        y = layers[0](x)
    elif plain:
        y = F.linear(
            x,
            torch.cat([layer.weight for layer in linears]),
            torch.cat([layer.bias for layer in linears]) if linears[0].bias is not None else None,
        )
    else:
        y = torch.cat([layer(x) for layer in layers], dim=-1)
    return y if act is None else ACT2FN[act](y)


def _hooked(layer: nn.Module) -> bool:
    """Whether calling `layer` runs hooks (its own, or every module's) that a product without it would skip."""
    hooks = torch.nn.modules.module
    return bool(
        layer._forward_hooks
        or layer._forward_pre_hooks
        or hooks._global_forward_hooks
        or hooks._global_forward_pre_hooks
    )


def _handed_out(param: Tensor) -> tuple[int, tuple[tuple[int, int], ...]]:
    """What `param`'s `.data` handed out, as a packed copy's key holds it: the serial of the latest tensor (a new
    one may have been written and freed since: `p.data.mul_(-1)`) and (serial, version) of each one still alive
    (one kept and written later; one freed since, written or not, changes the key too)."""
    handed = param.__dict__.get(HANDOUTS)
    if not handed:
        return -1, ()
    return handed[-1][0], tuple((n, t._version) for n, ref in handed if (t := ref()) is not None)


def forget(model: nn.Module) -> None:
    """Drop the packed weights of `model`'s layers (model.train() calls this: training does not use them)."""
    for module in model.modules():
        _packed.pop(module, None)


def _packed_weight(layers: tuple[nn.Linear, ...]) -> tuple[Tensor, Tensor | None] | None:
    """The layers' weights side by side in oneDNN's layout, and their biases: packed on first use and again
    whenever a weight or bias changed (the module's docstring says how that is seen). None where a parameter cannot
    say whether it changed (an inference tensor has no version counter)."""
    # (read from _parameters: this runs for every product, and Module.__getattr__ costs a microsecond a name)
    params = [p for layer in layers for p in layer._parameters.values() if p is not None]  # weight, bias
    try:
        key = tuple((p.data_ptr(), p._version, _handed_out(p)) for p in params)
    except RuntimeError:
        return None
    entries = _packed.get(layers[0])
    if entries is None:
        entries = _packed[layers[0]] = {}
    which = tuple(map(id, layers))  # query alone (cross-attention) or query, key and value
    cached = entries.get(which)
    if cached is not None and cached[1] == key and all(ref() is p for ref, p in zip(cached[0], params)):
        return cached[2], cached[3]
    for p in params:  # a plain parameter swapped in since the model was built (a miss): edits from now on are seen
        if type(p) is nn.Parameter:
            p.__class__ = Parameter
    with torch.no_grad():
        weight = torch.cat([layer.weight for layer in layers]) if len(layers) > 1 else layers[0].weight
        bias = (
            None
            if layers[0].bias is None
            else (torch.cat([layer.bias for layer in layers]) if len(layers) > 1 else layers[0].bias.detach())
        )
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
    entries[which] = (tuple(weakref.ref(p) for p in params), key, packed, bias)
    return packed, bias
