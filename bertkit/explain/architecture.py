"""The module tree of a bertkit model, written so that the heads show.

`print(model)` shows one `query` Linear of 768 -> 768 per layer and no "12" anywhere: the heads
are not modules but a reshape inside SelfAttention (split_heads). Here every SelfAttention is
written as what it computes, `SelfAttention  12 heads x 64 = 768`, the layers are marked as
running in sequence and the heads in parallel, each component has its parameter count, and the
config field behind each number is named.

Counting: a tensor shared by two modules (the MLM decoder reuses the word embeddings) is counted
once, where it first appears, so the counts add up to sum(p.numel() for p in model.parameters()).
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from .. import heads as H
from .. import model as M
from .. import modernbert as MB
from ..config import BertConfig
from .common import PrettyPrinter, base_model, count, encoder_layers, shape_str

# modules that hold no parameters and add nothing to the picture
_SILENT = (nn.Dropout, nn.Tanh, nn.Identity)
# modules shown as one row: their children are described in the row itself
_LEAVES = (nn.Linear, nn.Embedding, nn.LayerNorm)


@dataclass
class Row:
    path: str  # module path in the model, e.g. "bert.encoder.layer.0.attention.self"
    name: str  # what the row is called in the tree, e.g. "self" or "layer 0-11"
    depth: int  # indentation level
    label: str  # what the module computes, with its numbers and the config fields behind them
    params: int  # parameters counted in this row (its whole subtree; tied tensors once)


@dataclass
class Architecture:
    model_name: str  # the model's class
    config: BertConfig | MB.ModernBertConfig
    rows: list[Row]  # the tree, top to bottom
    params: dict[str, int]  # module or parameter path -> parameters counted there ("" = the model)
    total: int  # == sum(p.numel() for p in model.parameters())
    heads: list[int]  # attention heads per layer (differ when heads are pruned)

    def __str__(self) -> str:
        return format_architecture(self)

    def _repr_pretty_(self, printer: PrettyPrinter, cycle: bool) -> None:  # IPython / notebooks show the text
        printer.text(str(self))


def architecture(model: M.BertPreTrainedModel | MB.ModernBertPreTrainedModel) -> Architecture:
    """Describe `model` (a BertModel or any BertFor* head, or a ModernBERT one): tree, heads, parameter counts."""
    cfg = model.config
    owners = _owners(model)
    counts = _counts(model, owners)
    ctx = _Context(cfg, counts, owners)
    rows = [Row("", type(model).__name__, 0, _describe_root(model, cfg), counts[""])]
    _walk(model, "", 1, ctx, rows)
    if isinstance(model, MB.ModernBertPreTrainedModel):
        heads = [cfg.num_attention_heads] * cfg.num_hidden_layers  # ModernBERT prunes no head
    else:
        heads = [layer.attention.self.num_attention_heads for layer in encoder_layers(base_model(model).encoder.layer)]
    return Architecture(type(model).__name__, cfg, rows, dict(counts), counts[""], heads)


# ----- parameter counts --------------------------------------------------------------------------
def _owners(model: nn.Module) -> dict[int, str]:
    """id(tensor) -> the first name it has in the model; later names are tied copies."""
    return {id(p): name for name, p in model.named_parameters()}


def _counts(model: nn.Module, owners: dict[int, str]) -> dict[str, int]:
    """Parameters under every module path (and each parameter's own path), tied tensors once."""
    counts: dict[str, int] = defaultdict(int)
    for path, _ in model.named_modules(remove_duplicate=False):
        counts[path] += 0  # every module has an entry, 0 for those without parameters (dropout, ...)
    for name, p in model.named_parameters(remove_duplicate=False):
        counts[name] += 0  # a tied copy gets a row with 0
        if owners[id(p)] != name:
            continue
        parts = name.split(".")
        for i in range(len(parts) + 1):  # "", "bert", "bert.embeddings", ..., the parameter itself
            counts[".".join(parts[:i])] += p.numel()
    return counts


# ----- the tree ----------------------------------------------------------------------------------
@dataclass
class _Context:
    cfg: Any  # BertConfig or ModernBertConfig
    counts: dict[str, int]
    owners: dict[int, str]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _walk(module: nn.Module, path: str, depth: int, ctx: _Context, rows: list[Row]) -> None:
    for name, child in module.named_children():
        child_path = _join(path, name)
        if isinstance(child, _SILENT):
            continue
        if isinstance(child, nn.ModuleList) and isinstance(module, M.BertEncoder):
            _layer_groups(encoder_layers(child), child_path, depth, ctx, rows)
            continue
        if isinstance(child, nn.ModuleList) and isinstance(module, MB.ModernBertModel):
            _modern_layers(child, child_path, depth, ctx, rows)
            continue
        rows.append(
            Row(child_path, name, depth, _describe(name, child, module, child_path, ctx), ctx.counts[child_path])
        )
        if not isinstance(child, _LEAVES):
            _walk(child, child_path, depth + 1, ctx, rows)
    if not isinstance(module, _LEAVES):
        for name, p in module.named_parameters(recurse=False):  # e.g. the MLM head's bias
            p_path = _join(path, name)
            rows.append(Row(p_path, name, depth, f"{name} {shape_str(p.shape)}", ctx.counts[p_path]))


def _layer_signature(layer: M.Layer) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], tuple[int, ...]]:
    """Two layers look alike when their tensors have the same shapes and the same heads were pruned."""
    shapes = tuple((n, tuple(p.shape)) for n, p in layer.named_parameters())
    return shapes, tuple(sorted(layer.attention.pruned_heads))


def _layer_groups(layers: Sequence[M.Layer], path: str, depth: int, ctx: _Context, rows: list[Row]) -> None:
    """Runs of identical layers become one row ("layer 0-11, 12 alike") described once."""
    start = 0
    while start < len(layers):
        end = start
        while end + 1 < len(layers) and _layer_signature(layers[end + 1]) == _layer_signature(layers[start]):
            end += 1
        n = end - start + 1
        first_path = _join(path, str(start))
        each = ctx.counts[first_path]
        heads = layers[start].attention.self.num_attention_heads
        if n == 1:
            name, label = f"layer {start}", f"Layer ({heads} heads): attention, then feed-forward"
        else:
            name = f"layer {start}-{end}"
            label = f"{n} layers alike ({heads} heads each), {count(each)} parameters each; one of them below"
        total = sum(ctx.counts[_join(path, str(i))] for i in range(start, end + 1))
        rows.append(Row(first_path, name, depth, label, total))
        _walk(layers[start], first_path, depth + 1, ctx, rows)
        start = end + 1


def _modern_layers(layers: nn.ModuleList, path: str, depth: int, ctx: _Context, rows: list[Row]) -> None:
    """ModernBERT's layers, one row each (global or local, its window and rotary base), the first of each kind
    opened below it: the others are alike but for the numbers their row says."""
    cfg, shown = ctx.cfg, set()
    for i, layer in enumerate(layers):
        layer_path = _join(path, str(i))
        local = cfg.is_local(i)
        kind = (
            f"LOCAL: token i sees |i - j| <= {cfg.local_attention // 2} (local_attention={cfg.local_attention})"
            if local
            else "GLOBAL: every token sees every token"
        )
        label = f"Layer {i}: pre-norm attention ({cfg.num_attention_heads} heads), then GeGLU; {kind}; rotary base "
        label += f"{cfg.rope_theta(i):g}" + (" (layer 0 reads the normed embeddings: no attn_norm)" if i == 0 else "")
        rows.append(Row(layer_path, f"layer {i}", depth, label, ctx.counts[layer_path]))
        if (local, i == 0) not in shown:
            shown.add((local, i == 0))
            _walk(layer, layer_path, depth + 1, ctx, rows)


# ----- what each module is -----------------------------------------------------------------------
def _describe_root(model: nn.Module, cfg: Any) -> str:
    if isinstance(model, (M.BertModel, MB.ModernBertModel)):
        return f"the encoder: token ids (B, S) -> vectors (B, S, H={cfg.hidden_size})"
    return f"the encoder at .{getattr(model, 'base_model_prefix', 'bert')} plus a task head"


_EMBEDDING_ROWS = {
    "word_embeddings": "vocab_size",
    "position_embeddings": "max_position_embeddings",
    "token_type_embeddings": "type_vocab_size",
}


def _describe(name: str, m: nn.Module, parent: nn.Module, path: str, ctx: _Context) -> str:
    cfg = ctx.cfg
    if isinstance(m, (MB.ModernBertModel, MB.ModernBertEmbeddings, MB.ModernBertAttention, MB.ModernBertMLP)):
        return _describe_modern(m, cfg)
    if isinstance(m, MB.ModernBertPredictionHead):
        return f"head: Linear {cfg.hidden_size} -> {cfg.hidden_size}, {cfg.classifier_activation}, LayerNorm"
    if isinstance(m, M.BertModel):
        return f"BertModel: token ids (B, S) -> vectors (B, S, H={cfg.hidden_size})"
    if isinstance(m, M.Embeddings):
        parts = "word + token type" + (" + position" if m.position_embedding_type == "absolute" else "")
        return f"Embeddings: each token id -> a vector of H={cfg.hidden_size}: {parts}, LayerNorm"
    if isinstance(m, nn.Embedding):
        return _describe_embedding(name, m, cfg)
    if isinstance(m, nn.LayerNorm):
        return f"LayerNorm({m.normalized_shape[0]}): a scale and a shift per dimension"
    if isinstance(m, M.BertEncoder):
        n = len(m.layer)
        return (
            f"BertEncoder: {n} layers run in SEQUENCE, one after another: each reads the output of the "
            f"one before (num_hidden_layers={n})"
        )
    if isinstance(m, M.Attention):
        if name == "crossattention":
            return "Attention over the encoder's output (cross-attention): heads, then merge"
        return "Attention: the heads, then merge them + residual, LayerNorm"
    if isinstance(m, M.SelfAttention):
        return _describe_self_attention(m, parent, cfg)
    if isinstance(m, nn.Linear):
        return _describe_linear(name, m, parent, path, ctx)
    if isinstance(m, M.SelfOutput):
        return "merge: the heads' outputs side by side -> Linear, + residual, LayerNorm"
    if isinstance(m, M.Intermediate):
        return (
            f"feed-forward, up: H={cfg.hidden_size} -> I={cfg.intermediate_size} (intermediate_size), "
            f"{m.hidden_act}; every position on its own"
        )
    if isinstance(m, M.Output):
        return f"feed-forward, down: I={cfg.intermediate_size} -> H={cfg.hidden_size}, + residual, LayerNorm"
    if isinstance(m, M.Pooler):
        return f"Pooler: tanh(Linear) of the first token ([CLS]) -> (B, H={cfg.hidden_size})"
    if isinstance(m, (H.OnlyMLMHead, H.PreTrainingHeads)):
        return f"heads: MLM (B, S, H) -> (B, S, V={cfg.vocab_size})" + (
            " and next-sentence (B, 2)" if isinstance(m, H.PreTrainingHeads) else ""
        )
    if isinstance(m, H.LMPredictionHead):
        return (
            f"MLM prediction: every position -> a score for each of V={cfg.vocab_size} tokens "
            "(vocab_size); the loss uses only the masked positions"
        )
    if isinstance(m, H.PredictionHeadTransform):
        return f"transform: Linear {cfg.hidden_size} -> {cfg.hidden_size}, {cfg.hidden_act}, LayerNorm"
    if isinstance(m, H.OnlyNSPHead):
        return "next-sentence head: pooled [CLS] -> (B, 2)"
    return type(m).__name__


def _describe_modern(m: nn.Module, cfg: MB.ModernBertConfig) -> str:
    """What a ModernBERT module computes, with the config fields behind its numbers."""
    if isinstance(m, MB.ModernBertModel):
        return (
            f"ModernBertModel: token ids (B, S) -> vectors (B, S, H={cfg.hidden_size}); {cfg.num_hidden_layers} "
            f"layers in SEQUENCE: those whose index is a multiple of {cfg.global_attn_every_n_layers} global, the "
            "others local"
        )
    if isinstance(m, MB.ModernBertEmbeddings):
        return f"embeddings: each token id -> a vector of H={cfg.hidden_size}, LayerNorm; no positions (rotary)"
    if isinstance(m, MB.ModernBertAttention):
        h, d = cfg.num_attention_heads, cfg.head_dim
        return (
            f"attention  {h} heads x {d} = {h * d}, the heads run in PARALLEL; q and k turned by rotary positions "
            "before the scores (global_rope_theta / local_rope_theta)"
        )
    return (
        f"GeGLU: Wi H={cfg.hidden_size} -> 2 x I={cfg.intermediate_size} (input and gate), "
        f"{cfg.hidden_activation}(input) * gate, Wo I -> H"
    )


def _describe_embedding(name: str, m: nn.Embedding, cfg: BertConfig) -> str:
    if name == "distance_embedding":
        return (
            f"Embedding {m.num_embeddings} x {m.embedding_dim}: one vector per signed distance "
            f"(2 * max_position_embeddings - 1) x head_dim"
        )
    rows = _EMBEDDING_ROWS.get(name)
    what = f" ({rows} x hidden_size)" if rows else ""
    if name == "position_embeddings" and cfg.position_embedding_type != "absolute":
        what += f"; not used: this model has {cfg.position_embedding_type} positions (kept for checkpoints)"
    return f"Embedding {m.num_embeddings} x {m.embedding_dim}{what}"


def _describe_self_attention(m: M.SelfAttention, parent: nn.Module, cfg: BertConfig) -> str:
    h, d = m.num_attention_heads, m.attention_head_size
    text = f"SelfAttention  {h} heads x {d} = {h * d}, the heads run in PARALLEL"
    pruned = sorted(getattr(parent, "pruned_heads", ()))
    if pruned:
        text += f" (heads {', '.join(map(str, pruned))} of {cfg.num_attention_heads} pruned)"
    else:
        text += f" (num_attention_heads={cfg.num_attention_heads}, head_dim = {cfg.hidden_size} / {h})"
    if m.position_embedding_type != "absolute":
        text += f"; positions: {m.position_embedding_type}"
    return text


def _describe_linear(name: str, m: nn.Linear, parent: nn.Module, path: str, ctx: _Context) -> str:
    text = f"Linear {m.in_features} -> {m.out_features}"
    if isinstance(parent, MB.ModernBertAttention) and name == "Wqkv":
        text += f" = q, k, v side by side, each {ctx.cfg.num_attention_heads} heads x {ctx.cfg.head_dim}"
    elif isinstance(parent, M.SelfAttention) and name in ("query", "key", "value"):
        h, d = parent.num_attention_heads, parent.attention_head_size
        text += f" = {h} heads x {d}, split by split_heads"
    elif isinstance(parent, M.SelfOutput):
        text += " (the heads' outputs mixed back to hidden_size)"
    elif isinstance(parent, H.LMPredictionHead) and name == "decoder":
        text += " (vocab_size)"
    owner = ctx.owners.get(id(m.weight))
    if owner is not None and owner != f"{path}.weight":
        text += f"; its weight IS {owner} (tied), counted there"
    return text


# ----- text --------------------------------------------------------------------------------------
_CONFIG_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "position_embedding_type",
    "hidden_act",
)


_MODERN_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "global_attn_every_n_layers",
    "local_attention",
    "global_rope_theta",
    "local_rope_theta",
)


def format_config(cfg: BertConfig | MB.ModernBertConfig) -> str:
    fields = _MODERN_FIELDS if isinstance(cfg, MB.ModernBertConfig) else _CONFIG_FIELDS
    values = [f"{f}={getattr(cfg, f)}" for f in fields]
    text = (
        "config: " + "  ".join(values[:5]) + "\n        " + "  ".join(values[5:]) + "\n        "
        f"head_dim = hidden_size / num_attention_heads = {cfg.hidden_size} / {cfg.num_attention_heads} "
        f"= {cfg.head_dim}"
    )
    if isinstance(cfg, BertConfig) and cfg.pruned_heads:
        text += f"\n        pruned_heads={ {k: list(v) for k, v in sorted(cfg.pruned_heads.items())} }"
    return text


def format_architecture(arch: Architecture) -> str:
    names = ["  " * r.depth + r.name for r in arch.rows]
    width = max(len(n) for n in names) + 2
    number_width = len(count(arch.total))
    lines = [format_config(arch.config), "", f"{'module':<{width}}{'parameters':>{number_width}}  what it is"]
    for name, row in zip(names, arch.rows):
        lines.append(f"{name:<{width}}{count(row.params):>{number_width}}  {row.label}")
    lines += [
        "",
        f"total parameters: {count(arch.total)} (= sum(p.numel() for p in model.parameters()); "
        "a tied tensor counts once)",
        "",
        how_it_runs(arch),
    ]
    return "\n".join(lines)


def how_it_runs(arch: Architecture) -> str:
    """The seed question answered with this model's numbers."""
    cfg, heads = arch.config, arch.heads
    L, Hs, d = len(heads), cfg.hidden_size, cfg.head_dim
    if len(set(heads)) == 1:
        per_layer = f"{heads[0]} heads of {d} dims"
    else:
        per_layer = (
            "a layer's heads (" + ", ".join(f"layer {i}: {h}" for i, h in enumerate(heads)) + f") of {d} dims each"
        )
    h0 = heads[0]
    where = " in layer 0" if len(set(heads)) > 1 else ""
    if isinstance(cfg, MB.ModernBertConfig):
        return textwrap.fill(
            f"How it runs: the {L} layers run one after another. Inside each, Wqkv is ONE Linear of {Hs} -> 3 x "
            f"{heads[0]} heads x {d}, reshaped to (B, S, 3, {heads[0]}, {d}); q and k are turned by their positions "
            f"(rotary: no position table), the {heads[0]} heads attend in parallel, and on local layers a token sees "
            f"only the {cfg.local_attention // 2} tokens on each side. print(model) shows one Wqkv per layer: the "
            "heads are a reshape, not modules.",
            width=100,
        )
    text = (
        f"How it runs: the {L} layers run one after another: layer i+1 needs layer i's output, so they "
        f"cannot be parallel. Inside each layer, query, key and value are each ONE Linear of "
        f"{Hs} -> heads x {d}; split_heads reshapes its output (B, S, {h0 * d}) -> (B, {h0}, S, {d}){where} "
        f"into {per_layer}, which attend in parallel (one batched matmul), and their outputs are put "
        f"side by side again, (B, S, {h0 * d}), before attention.output.dense mixes them. That is why "
        "print(model) shows one query per layer and no heads: the heads are a reshape, not modules."
    )
    return textwrap.fill(text, width=100)
