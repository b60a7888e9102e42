"""Starting weights for pretraining: BERT's own, or BERT's with heads that already look at a neighbour.

Why: a BERT pretrained from BERT's initialisation on a few CPU minutes stays a bag of characters.
Its heads start uniform, and learning *where* to look (the previous token, the next one) takes
far longer than learning *what* the characters are (the runs: bench/results/pretraining_budget.md).
The `local` recipe gives a few heads that knowledge at step 0, with the weights of a standard BERT:
nothing in the forward pass changes, so transformers loads the result as any BERT.

    hidden dims   [ content: words, token types ........ | position code: the last `dims` dims ]
    position i    (cos w_k i, sin w_k i) for k < dims/2,  w_k = pi (k + 1/2) / (dims/2)
    seeded head   its query reads the code of i rotated by its offset d, its key the code of j:
                      q_i . k_j = c * sum_k cos(w_k (i + d - j))
                  = c * dims/2 for j = i + d and exactly 0 for every other j closer than dims
                  (these are the DCT-II frequencies), so softmax puts most of the weight on
                  token i + d from step 0 (`peak_logit` sets how much: 8 gives ~0.95 over 128 keys)
    the rest      BERT's initialisation: the seeded head's content weights too, so locality is
                  an additive bias on top of the content attention it can still learn

Words and token types start at zero in the position dims, positions at zero in the content dims;
training is free to change all of it. The code repeats every 2 * dims positions, so a seeded head
also sees the token at i + d +- 2 * dims as strongly (in 128-token rows: only a first / last token
pair); at i + d +- dims its logit is negative. The output bias starts at log token frequencies.

    initialise(model, "local", token_counts)   # what `bertkit pretrain --recipe local` does
    seed_locality(model, LocalitySeed(heads=((0, 0, -1),), peak_logit=6.0))   # one head, softer
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import torch

from .errors import ConfigError

if TYPE_CHECKING:
    from .model import BertPreTrainedModel, Layer
    from .pretrained import PreTrainedModel

# any BertModel or BertFor*: the recipes hand back the model they were given, its class kept
ModelT = TypeVar("ModelT", bound="BertPreTrainedModel")
BuiltT = TypeVar("BuiltT", bound="PreTrainedModel")  # a BERT, ELECTRA or ModernBERT model

INITS = ("local", "bert")


@dataclass(frozen=True)
class LocalitySeed:
    """Which heads start local, and how strongly."""

    heads: tuple[tuple[int, int, int], ...] | None = None  # (layer, head, offset); None: default_heads()
    dims: int = 64  # hidden dims that hold the position code (fewer when head_dim or hidden_size / 2 is smaller)
    peak_logit: float = 8.0  # a seeded head's attention logit on its target token, others ~0 (before training)
    position_scale: float = 1.0  # rms of a position-code dim relative to a word-embedding dim
    keep_content: bool = True  # the seeded query / key dims also keep BERT's random weights on content dims
    prior_bias: bool = False  # the MLM output bias starts at log(token frequency) in the training corpus
    global_first: bool = False  # position 0 ([CLS]) gets no code: its queries keep looking everywhere

    def chosen(self, num_layers: int, num_heads: int) -> tuple[tuple[int, int, int], ...]:
        """(layer, head, offset) of the heads this seed points at a neighbour in a model of these sizes."""
        return self.heads if self.heads is not None else default_heads(num_layers, num_heads)


SEEDS = {"local": LocalitySeed(prior_bias=True)}
OFFSETS = (-1, 1, -2, 2)  # the previous token, the next, the one before it, the one after the next


def default_heads(num_layers: int, num_heads: int) -> tuple[tuple[int, int, int], ...]:
    """The lower half of the layers: every head, on offsets -1, +1, -2, +2 in turn; the upper half: the
    first half of the heads on -1 / +1, the rest left global ([CLS] and long-range content keep a place).
    mini (4 x 4): layers 0-1 all four heads, layers 2-3 heads 0-1 (bench/results/pretraining_recipes.md)."""
    lower = (num_layers + 1) // 2
    out = [(layer, h, OFFSETS[h % 4]) for layer in range(lower) for h in range(num_heads)]
    out += [(layer, h, OFFSETS[h % 2]) for layer in range(lower, num_layers) for h in range(max(1, num_heads // 2))]
    return tuple(out)


def initialise(model: BuiltT, init: str, token_counts: torch.Tensor | None = None) -> BuiltT:
    """Apply an initialisation recipe by name to a freshly built model (any BertModel or BertFor*; a ModernBERT takes
    the output bias only: its local layers attend to neighbours by design).
    token_counts (vocab_size,): how often each id occurs in the training data (for prior_bias)."""
    if init == "bert":
        return model  # the model's own post_init already did BERT's
    if init not in SEEDS:
        raise ConfigError(f"unknown init {init!r}; choose one of: {', '.join(INITS)}")
    seed = SEEDS[init]
    if model.model_type != "modernbert":  # ModernBERT's local layers see neighbours by design
        seed_locality(cast("BertPreTrainedModel", model), seed)
    if seed.prior_bias and token_counts is not None:
        prior_bias(model, token_counts)
    return model


@torch.no_grad()
def prior_bias(model: PreTrainedModel, token_counts: torch.Tensor) -> None:
    """Start the MLM output bias at log p(token): before it learns anything, the model predicts the
    corpus's frequencies instead of a uniform guess (the "unigram plateau" is where it starts)."""
    head = getattr(getattr(model, "cls", None), "predictions", None)  # BERT's MLM head
    if head is None:
        head = getattr(model, "decoder", None)  # ModernBERT's
    bias = getattr(head, "bias", None)
    if bias is None:
        return
    bias.copy_(log_frequencies(token_counts).to(bias.dtype))


def log_frequencies(token_counts: torch.Tensor) -> torch.Tensor:
    """(V,) float64: log p(token) from counts, add-one smoothed (unseen ids get a small probability), centred."""
    counts = token_counts.to(torch.float64) + 1.0
    log_p = (counts / counts.sum()).log()
    return log_p - log_p.mean()


@torch.no_grad()
def seed_locality(model: ModelT, seed: LocalitySeed) -> ModelT:
    """Write the position code into the embeddings and point the chosen heads at their offsets."""
    bert = model.base_model
    cfg = bert.config
    H, d_head = cfg.hidden_size, cfg.head_dim
    P = min(seed.dims, d_head, H // 2) // 2 * 2  # a small model gets a shorter code (it repeats sooner)
    if cfg.position_embedding_type != "absolute":
        raise ConfigError(
            f"locality seeding writes absolute position embeddings; this model has "
            f"position_embedding_type={cfg.position_embedding_type!r}: use init 'bert'"
        )
    if P < 2:
        raise ConfigError(
            f"locality seeding needs at least 2 position dims in a head; head_dim is {d_head}, "
            f"dims={seed.dims}: use init 'bert'"
        )
    layers = cast("Sequence[Layer]", bert.encoder.layer)  # an nn.ModuleList of Layer, whose items mypy sees as Module
    chosen = seed.chosen(len(layers), cfg.num_attention_heads)
    for layer, head, _offset in chosen:
        if not (0 <= layer < len(layers) and 0 <= head < layers[layer].attention.self.num_attention_heads):
            raise ConfigError(
                f"locality seed names layer {layer} head {head}; the model has layers "
                f"0..{len(layers) - 1} with {cfg.num_attention_heads} heads each"
            )

    emb = bert.embeddings
    std = cfg.initializer_range
    pos = slice(H - P, H)  # the position dims
    n_freq = P // 2
    freqs = math.pi * (torch.arange(n_freq, dtype=torch.float64) + 0.5) / n_freq  # (P/2,)
    amplitude = std * math.sqrt(2.0) * seed.position_scale  # per-dim rms of cos/sin = amplitude / sqrt(2)
    angles = torch.arange(cfg.max_position_embeddings, dtype=torch.float64)[:, None] * freqs  # (max_pos, P/2)
    code = torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(1) * amplitude  # (max_pos, P): cos, sin pairs
    if seed.global_first:
        code[0] = 0.0
    emb.position_embeddings.weight.zero_()
    emb.position_embeddings.weight[:, pos] = code.to(emb.position_embeddings.weight.dtype)
    emb.word_embeddings.weight[:, pos] = 0.0
    emb.token_type_embeddings.weight[:, pos] = 0.0

    # after the embeddings' LayerNorm every dim is divided by the rms of the whole vector: words and
    # token types (variance 2 std^2 in the content dims) plus the code (amplitude^2 / 2 per dim)
    rms = math.sqrt(((H - P) * 2 * std**2 + P * amplitude**2 / 2) / H)
    pair = amplitude / rms  # length of one (cos, sin) pair after the LayerNorm
    # q . k / sqrt(d_head) at the target = scale^2 * (P / 2) * pair^2 / sqrt(d_head) = peak_logit
    scale = math.sqrt(seed.peak_logit * math.sqrt(d_head) / (n_freq * pair**2))
    for layer, head, offset in chosen:
        attn = layers[layer].attention.self
        rows = slice(head * d_head, head * d_head + P)  # the head's first P query / key dims
        rotation = _rotations(freqs * offset) * scale  # (P, P): block-diagonal 2x2 rotations by w_k * offset
        for linear, block in ((attn.query, rotation), (attn.key, torch.eye(P, dtype=torch.float64) * scale)):
            linear.weight[rows, pos] = block.to(linear.weight.dtype)
            if not seed.keep_content:
                linear.weight[rows, : H - P] = 0.0  # those dims read only the code: no content cross terms
            linear.bias[rows] = 0.0
    return model


def _rotations(angles: torch.Tensor) -> torch.Tensor:
    """Block-diagonal matrix of 2x2 rotations: (cos a, sin a) of position i -> (cos, sin) of a shifted angle.

    R (cos x, sin x) = (cos(x + a), sin(x + a)) with R = [[cos a, -sin a], [sin a, cos a]].
    """
    n = len(angles)
    out = torch.zeros(2 * n, 2 * n, dtype=torch.float64)
    c, s = angles.cos(), angles.sin()
    idx = torch.arange(n) * 2
    out[idx, idx], out[idx, idx + 1] = c, -s
    out[idx + 1, idx], out[idx + 1, idx + 1] = s, c
    return out
