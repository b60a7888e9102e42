"""Shape trace: run one forward pass and record the shape of every step, from the real tensors.

    ids (B, S) -> embeddings (B, S, H)
      -> layer 0: query/key/value (B, S, heads*head_dim) -> split into heads (B, heads, S, head_dim)
                  -> scores / weights (B, heads, S, S) -> context (B, heads, S, head_dim)
                  -> heads merged (B, S, heads*head_dim) -> attention output (B, S, H)
                  -> feed-forward up (B, S, I) -> down (B, S, H)
      -> layers 1 .. L-1 (the same steps) -> last_hidden_state (B, S, H) -> head, e.g. MLM logits (B, S, V)

Nothing here is a hand-written list of shapes: forward hooks on the model's own modules record
their outputs. The per-head tensors come from those outputs too: q, k, v are the query / key /
value outputs split into heads, weights the attention probabilities the pass returns
(output_attentions=True), context the SelfAttention output split into heads. Nothing global is
replaced, and the hooks are removed when the pass ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from ..text import display_width, pad
from .common import ExplainError, PrettyPrinter, base_model, encoder_layers, shape_str

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from ..model import BertPreTrainedModel, SelfAttention
    from ..modernbert import ModernBertEncoderLayer, ModernBertPreTrainedModel
    from ..tokenizer import Tokenizer

# a module's output (a tensor, or a tuple holding one: what the module returns) -> the tensor to record
Pick = Callable[[Any], Tensor]
# a forward hook, as nn.Module.register_forward_hook calls it: (module, positional inputs, output)
OutputHook = Callable[[nn.Module, tuple[Any, ...], Any], None]


@dataclass
class Step:
    name: str  # e.g. "q" or "intermediate"
    module: str  # path of the module whose tensor this is, e.g. "bert.encoder.layer.0.attention.self"
    shape: tuple[int, ...]
    layer: int | None  # encoder layer, None outside the encoder
    calls: int = 1  # > 1 when the module ran several times (feed-forward in chunks)
    note: str = ""  # what this layer's step does differently (ModernBERT: its rotary theta, local or global)


@dataclass
class Trace:
    tokens: list[str]
    input_ids: Tensor  # (B, S)
    steps: list[Step]
    model_name: str
    sizes: dict[str, int | str] = field(default_factory=dict)  # B, S, H, ... of this pass, for the legend

    def shape(self, name: str, layer: int | None = None) -> tuple[int, ...]:
        """The recorded shape of step `name` (in encoder layer `layer`)."""
        for step in self.steps:
            if step.name == name and step.layer == layer:
                return step.shape
        raise KeyError(f"no step {name!r}" + (f" in layer {layer}" if layer is not None else ""))

    def __str__(self) -> str:
        return format_trace(self)

    def _repr_pretty_(self, printer: PrettyPrinter, cycle: bool) -> None:
        printer.text(str(self))


# ----- recording ---------------------------------------------------------------------------------
class _Recorder:
    """Collects steps; keeps the last query / key / value outputs for the per-head tensors."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.latest: dict[str, Tensor] = {}  # "query" / "key" / "value" -> (B, S, heads*head_dim)

    def add(self, name: str, module: str, tensor: Tensor, layer: int | None, note: str = "") -> None:
        if name in ("query", "key", "value"):
            self.latest[name] = tensor
        for step in self.steps:  # a module that runs again in the same layer: feed-forward chunks
            if step.name == name and step.layer == layer and step.module == module:
                step.calls += 1
                return
        self.steps.append(Step(name, module, tuple(tensor.shape), layer, note=note))


def _output_hook(
    recorder: _Recorder, name: str, path: str, layer: int | None, pick: Pick = lambda out: out
) -> OutputHook:
    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        recorder.add(name, path, pick(output), layer)

    return hook


def _heads_hook(
    recorder: _Recorder, path: str, layer: int
) -> Callable[[SelfAttention, tuple[Any, ...], tuple[Tensor, Tensor | None]], None]:
    """After a SelfAttention ran: q, k, v, scores, weights, context per head, from its own tensors."""

    def hook(module: SelfAttention, args: tuple[Any, ...], output: tuple[Tensor, Tensor | None]) -> None:
        context, probs = output[0], output[1]  # (B, S, heads*head_dim), (B, heads, S, T)
        q, k, v = (module.split_heads(recorder.latest[name]) for name in ("query", "key", "value"))
        for name, tensor in (("q", q), ("k", k), ("v", v)):
            recorder.add(name, path, tensor, layer)  # (B, heads, S, head_dim)
        recorder.add("scores", path, q @ k.transpose(-1, -2), layer)  # (B, heads, S, T)
        if probs is not None:
            recorder.add("weights", path, probs, layer)  # (B, heads, S, T)
        recorder.add("context", path, module.split_heads(context), layer)  # (B, heads, S, head_dim)

    return hook


class _Hooks:
    """The forward hooks of one trace, starting with the input ids' (a pre-hook on the embeddings); on() records a
    module's output as a step, its path under the model's prefix (bert., model.)."""

    def __init__(self, model: nn.Module, base: nn.Module, recorder: _Recorder) -> None:
        self.prefix = cast(str, model.base_model_prefix) + "." if base is not model else ""
        self.recorder = recorder
        embeddings = cast(nn.Module, base.embeddings)
        self.handles = [embeddings.register_forward_pre_hook(_input_ids_hook(recorder, self.prefix + "embeddings"))]

    def on(
        self, module: nn.Module, name: str, path: str, layer: int | None = None, pick: Pick = lambda out: out
    ) -> None:
        hook = _output_hook(self.recorder, name, self.prefix + path, layer, pick)
        self.handles.append(module.register_forward_hook(hook))


def _hooks(model: BertPreTrainedModel, recorder: _Recorder) -> list[RemovableHandle]:
    """Register the forward hooks; returns their handles."""
    base = base_model(model)
    hooks = _Hooks(model, base, recorder)
    on, handles, prefix = hooks.on, hooks.handles, hooks.prefix
    emb = base.embeddings
    on(emb.word_embeddings, "word_embeddings", "embeddings.word_embeddings")
    if emb.position_embedding_type == "absolute":
        on(emb.position_embeddings, "position_embeddings", "embeddings.position_embeddings")
    on(emb.token_type_embeddings, "token_type_embeddings", "embeddings.token_type_embeddings")
    on(emb, "embeddings", "embeddings")
    for i, layer in enumerate(encoder_layers(base.encoder.layer)):
        p = f"encoder.layer.{i}"
        sa = layer.attention.self
        for name in ("query", "key", "value"):
            on(getattr(sa, name), name, f"{p}.attention.self.{name}", i)
        handles.append(sa.register_forward_hook(_heads_hook(recorder, prefix + p + ".attention.self", i)))
        on(sa, "merged", f"{p}.attention.self", i, pick=lambda out: out[0])
        on(layer.attention.output, "attention_output", f"{p}.attention.output", i)
        on(layer.intermediate, "intermediate", f"{p}.intermediate", i)
        on(layer.output, "ffn_output", f"{p}.output", i)
        on(layer, "layer_output", p, i, pick=lambda out: out[0])
    handles.append(
        base.register_forward_hook(
            _output_hook(recorder, "last_hidden_state", prefix.rstrip(".") or "output", None, pick=lambda out: out[0])
        )
    )
    if base.pooler is not None:
        on(base.pooler, "pooler_output", "pooler")
    predictions = getattr(getattr(model, "cls", None), "predictions", None)
    if predictions is not None:
        handles.append(
            predictions.transform.register_forward_hook(
                _output_hook(recorder, "mlm_transform", "cls.predictions.transform", None)
            )
        )
    return handles


def _modern_hooks(model: ModernBertPreTrainedModel, recorder: _Recorder) -> list[RemovableHandle]:
    """ModernBERT's steps: token embeddings and their norm (no position rows: rotary positions turn q and k in every
    layer), per layer the pre-norms, the fused Wqkv and its heads, the attention weights (zero outside the window
    in a local layer), Wo, the GeGLU feed-forward; the final norm and the head."""
    base, cfg = model.base_model, model.config
    hooks = _Hooks(model, base, recorder)
    on, handles, prefix = hooks.on, hooks.handles, hooks.prefix
    emb = base.embeddings
    on(emb.tok_embeddings, "tok_embeddings", "embeddings.tok_embeddings")
    on(emb, "embedding_norm", "embeddings")
    for i, layer in enumerate(cast("list[ModernBertEncoderLayer]", list(base.layers))):
        p = f"{prefix}layers.{i}"
        kind = f"local: |i - j| <= {cfg.local_attention // 2}" if cfg.is_local(i) else "global: every token"
        on(layer.attn_norm, "attn_norm", f"layers.{i}.attn_norm", i)
        handles.append(layer.attn.Wqkv.register_forward_hook(_qkv_hook(recorder, p, i, cfg)))
        handles.append(layer.attn.register_forward_hook(_modern_weights_hook(recorder, p, i, kind)))
        on(layer.attn.Wo, "attn_Wo", f"layers.{i}.attn.Wo", i)
        on(layer.mlp_norm, "mlp_norm", f"layers.{i}.mlp_norm", i)
        on(layer.mlp.Wi, "Wi", f"layers.{i}.mlp.Wi", i)
        on(layer.mlp.Wo, "mlp_Wo", f"layers.{i}.mlp.Wo", i)
        on(layer, "layer_output", f"layers.{i}", i, pick=lambda out: out[0])
    on(base.final_norm, "last_hidden_state", "final_norm")
    head = getattr(model, "head", None)
    if isinstance(head, nn.Module):
        handles.append(head.register_forward_hook(_output_hook(recorder, "head", "head", None)))
    return handles


def _qkv_hook(recorder: _Recorder, path: str, layer: int, cfg: Any) -> OutputHook:
    """After a ModernBERT Wqkv ran: its output, and q, k, v per head cut from it (rotary turns q and k next)."""

    def hook(module: nn.Module, args: tuple[Any, ...], output: Tensor) -> None:
        recorder.add("Wqkv", path + ".attn.Wqkv", output, layer)  # (B, S, 3 * heads * head_dim)
        B, S = output.shape[0], output.shape[1]
        q, k, v = output.view(B, S, 3, cfg.num_attention_heads, cfg.head_dim).transpose(3, 1).unbind(2)
        theta = f"rotary theta {cfg.rope_theta(layer):g} turns it by position next"
        recorder.add("q", path + ".attn", q, layer, note=theta)  # (B, heads, S, head_dim)
        recorder.add("k", path + ".attn", k, layer, note=theta)
        recorder.add("v", path + ".attn", v, layer)

    return hook


def _modern_weights_hook(recorder: _Recorder, path: str, layer: int, kind: str) -> OutputHook:
    def hook(module: nn.Module, args: tuple[Any, ...], output: tuple[Tensor, Tensor | None]) -> None:
        if output[1] is not None:
            recorder.add("weights", path + ".attn", output[1], layer, note=kind)  # (B, heads, S, S)

    return hook


def _input_ids_hook(recorder: _Recorder, path: str) -> Callable[[nn.Module, tuple[Any, ...]], None]:
    def hook(module: nn.Module, args: tuple[Any, ...]) -> None:  # Embeddings.forward(input_ids, token_type_ids, ...)
        if args and isinstance(args[0], Tensor):
            recorder.add("input_ids", path, args[0], None)

    return hook


def trace_ids(
    model: BertPreTrainedModel,
    input_ids: Tensor,
    token_type_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    tokens: list[str] | None = None,
) -> Trace:
    """Run `model` once on input_ids (B, S) and record every step's shape (see the module docstring)."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        raise ExplainError("trace_ids needs input_ids as a (batch, seq_len) tensor of token ids")
    device = next(model.parameters()).device  # the inputs go where the model is (--device)
    input_ids = input_ids.to(device)
    token_type_ids = None if token_type_ids is None else token_type_ids.to(device)
    attention_mask = None if attention_mask is None else attention_mask.to(device)
    recorder = _Recorder()
    modern = model.model_type == "modernbert"  # ModernBERT's modules stand where BERT's would
    handles = _modern_hooks(cast("ModernBertPreTrainedModel", model), recorder) if modern else _hooks(model, recorder)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():  # output_attentions: the padded path, which returns the weights
            out = model(
                input_ids=input_ids,
                token_type_ids=token_type_ids,
                attention_mask=attention_mask,
                output_attentions=True,
            )
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    _add_outputs(recorder, model, out)
    tokens = tokens if tokens is not None else [str(int(i)) for i in input_ids[0]]
    return Trace(tokens, input_ids, recorder.steps, type(model).__name__, _sizes(model, input_ids))


def _add_outputs(recorder: _Recorder, model: BertPreTrainedModel, out: object) -> None:
    """The model's own outputs: whatever its head returns."""
    for name in ("logits", "prediction_logits", "seq_relationship_logits", "start_logits", "end_logits"):
        value = getattr(out, name, None)
        if isinstance(value, Tensor):
            recorder.add(name, "output", value, None)


def trace(model: BertPreTrainedModel, tokenizer: Tokenizer, text: str, text_pair: str | None = None) -> Trace:
    """Tokenize `text` (and `text_pair`), run one forward pass, and return every step's shape."""
    enc = tokenizer(text, text_pair, return_tensors="pt", return_token_type_ids=True)
    return trace_ids(model, enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], tokens=enc.tokens())


def _sizes(model: BertPreTrainedModel, input_ids: Tensor) -> dict[str, int | str]:
    cfg = model.config
    per_layer: int | str = cfg.num_attention_heads  # ModernBERT prunes no head
    if model.model_type != "modernbert":
        heads = [layer.attention.self.num_attention_heads for layer in encoder_layers(base_model(model).encoder.layer)]
        per_layer = heads[0] if len(set(heads)) == 1 else "/".join(map(str, heads)) + " (per layer, pruned)"
    return {
        "B": input_ids.shape[0],
        "S": input_ids.shape[1],
        "H": cfg.hidden_size,
        "heads": per_layer,
        "head_dim": cfg.head_dim,
        "I": cfg.intermediate_size,
        "V": cfg.vocab_size,
    }


# ----- text --------------------------------------------------------------------------------------
# what each step is, and its axes; the numbers come from the recorded tensors
_WHAT = {
    "input_ids": ("token ids", "(B, S)"),
    "word_embeddings": ("one learned row per token id", "(B, S, H)"),
    "position_embeddings": ("one learned row per position", "(1, S, H)"),
    "token_type_embeddings": ("one learned row per segment (A / B)", "(B, S, H)"),
    "embeddings": ("their sum, LayerNorm, dropout", "(B, S, H)"),
    "query": ("Linear: all heads' queries at once", "(B, S, heads*head_dim)"),
    "key": ("Linear: all heads' keys at once", "(B, S, heads*head_dim)"),
    "value": ("Linear: all heads' values at once", "(B, S, heads*head_dim)"),
    "q": ("split_heads: one query per head", "(B, heads, S, head_dim)"),
    "k": ("split_heads: one key per head", "(B, heads, S, head_dim)"),
    "v": ("split_heads: one value per head", "(B, heads, S, head_dim)"),
    "scores": ("q @ k^T / sqrt(head_dim): a table per head", "(B, heads, S, S)"),
    "weights": ("softmax over keys, each row sums to 1", "(B, heads, S, S)"),
    "context": ("weights @ v: every head's result", "(B, heads, S, head_dim)"),
    "merged": ("heads side by side again", "(B, S, heads*head_dim)"),
    "attention_output": ("Linear mixes heads, + residual, LayerNorm", "(B, S, H)"),
    "intermediate": ("feed-forward up, activation", "(B, S, I)"),
    "ffn_output": ("feed-forward down, + residual, LayerNorm", "(B, S, H)"),
    "layer_output": ("the layer's output = the next layer's input", "(B, S, H)"),
    "last_hidden_state": ("the encoder's output", "(B, S, H)"),
    "pooler_output": ("tanh(Linear) of [CLS]", "(B, H)"),
    "mlm_transform": ("MLM head: Linear, activation, LayerNorm", "(B, S, H)"),
    "logits": ("a score for every vocabulary entry at every position", "(B, S, V)"),
    "prediction_logits": ("a score for every vocabulary entry at every position", "(B, S, V)"),
    "seq_relationship_logits": ("next sentence: is B A's continuation?", "(B, 2)"),
    "start_logits": ("answer start score per position", "(B, S)"),
    "end_logits": ("answer end score per position", "(B, S)"),
    # ModernBERT's
    "tok_embeddings": ("one learned row per token id (no position rows)", "(B, S, H)"),
    "embedding_norm": ("LayerNorm, dropout: the first layer's input", "(B, S, H)"),
    "attn_norm": ("pre-norm: LayerNorm before attention (Identity in layer 0)", "(B, S, H)"),
    "Wqkv": ("one Linear: every head's query, key and value", "(B, S, 3*heads*head_dim)"),
    "attn_Wo": ("Linear mixes heads; the layer adds the residual", "(B, S, H)"),
    "mlp_norm": ("pre-norm: LayerNorm before the feed-forward", "(B, S, H)"),
    "Wi": ("GeGLU: one Linear gives the input and its gate", "(B, S, 2*I)"),
    "mlp_Wo": ("gelu(input) * gate, Linear down; + residual", "(B, S, H)"),
    "head": ("head: Linear, activation, LayerNorm", "(B, S, H)"),
}
_LAYER_SUMMARY = ("q", "weights", "layer_output")
_AFTER_ENCODER = (
    "last_hidden_state",
    "head",
    "pooler_output",
    "mlm_transform",
    "logits",
    "prediction_logits",
    "seq_relationship_logits",
    "start_logits",
    "end_logits",
)  # the order they are shown in


def format_trace(t: Trace) -> str:
    legend = ", ".join(f"{k}={v}" for k, v in t.sizes.items())
    lines = [
        f"tokens ({len(t.tokens)}): " + " ".join(t.tokens),
        "ids: " + " ".join(str(int(i)) for i in t.input_ids[0]),
        f"sizes: {legend}",
        "",
    ]
    rows = []
    layers = sorted({s.layer for s in t.steps if s.layer is not None})
    outside = [s for s in t.steps if s.layer is None]
    before = [s for s in outside if s.name not in _AFTER_ENCODER]
    after = sorted((s for s in outside if s.name in _AFTER_ENCODER), key=lambda s: _AFTER_ENCODER.index(s.name))
    rows += [_row(s, "") for s in before]
    if layers:
        rows.append((f"encoder: {len(layers)} layers, one after another", "", "", ""))
        rows.append((f"  layer {layers[0]}", "", "", ""))
        rows += [_row(s, "    ") for s in t.steps if s.layer == layers[0]]
        rows += _layer_summaries(t, layers[1:])
    rows += [_row(s, "") for s in after]
    widths = [max(display_width(r[c]) for r in rows if r[1]) for c in range(3)]
    for name, shape, axes, what in rows:
        if not shape:
            lines.append(name)
            continue
        lines.append(f"{pad(name, widths[0])}  {pad(shape, widths[1])}  {pad(axes, widths[2])}  {what}".rstrip())
    return "\n".join(lines)


def _row(step: Step, indent: str) -> tuple[str, str, str, str]:
    what, axes = _WHAT.get(step.name, ("", ""))
    if step.note:
        what += f" ({step.note})"
    if step.calls > 1:
        what += f" (shape of one chunk: ran in {step.calls} chunks of positions, chunk_size_feed_forward)"
    return indent + step.name, shape_str(step.shape), axes, what


def _layer_summaries(t: Trace, layers: list[int]) -> list[tuple[str, str, str, str]]:
    """One line per run of later layers whose shapes are alike."""
    rows, start = [], 0
    while start < len(layers):
        shapes = _summary_shapes(t, layers[start])
        end = start
        while end + 1 < len(layers) and _summary_shapes(t, layers[end + 1]) == shapes:
            end += 1
        first, last = layers[start], layers[end]
        name = f"layer {first}" if first == last else f"layers {first}-{last}"
        parts = ", ".join(f"{n} {shape_str(s)}" + (f" ({note})" if note else "") for n, s, note in shapes)
        rows.append((f"  {name}: the same steps; " + ("each: " if first != last else "") + parts, "", "", ""))
        start = end + 1
    return rows


def _summary_shapes(t: Trace, i: int) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, note) of layer i's summary steps: layers alike in all three share a line."""
    return [(s.name, s.shape, s.note) for name in _LAYER_SUMMARY for s in t.steps if s.name == name and s.layer == i]
