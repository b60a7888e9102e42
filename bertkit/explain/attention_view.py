"""Attention maps from the model's own output_attentions, as a PNG grid of layers x heads.

maps[layer] is (heads, S, S): row i is query token i, column j key token j, and row i holds how
much token i takes from each token (it sums to 1). Layers are the grid's rows (they run one
after another), heads its columns (they run side by side). A pruned head is an empty cell.
"""

from __future__ import annotations

import html
import importlib
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..files import atomic_write
from ..modernbert import ModernBertPreTrainedModel
from ..text import display_width
from . import html_view
from .common import ExplainError, base_model, encoder_layers

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    from ..model import BertPreTrainedModel
    from ..tokenizer import Tokenizer

MAX_LABELLED_TOKENS = 48  # beyond this, tick labels would overlap: the heatmaps go unlabelled


@dataclass
class AttentionMaps:
    tokens: list[str]
    token_type_ids: list[int]  # 0 for the first text, 1 for the pair
    maps: list[Tensor]  # per layer: (heads in that layer, S, S), float32 on the CPU
    head_ids: list[list[int]]  # original number of each head in maps[layer] (pruned heads are absent)
    num_heads: int  # heads per layer before any pruning: the grid's columns
    text: str = ""
    text_pair: str | None = None

    def head(self, layer: int, head: int) -> Tensor:
        """The (S, S) map of `head` (original numbering) in `layer`."""
        if head not in self.head_ids[layer]:
            raise ExplainError(f"layer {layer} has no head {head} (heads {self.head_ids[layer]}; the rest are pruned)")
        return self.maps[layer][self.head_ids[layer].index(head)]

    @property
    def title(self) -> str:
        """The pictures' default title: "attention: " and the text (cut at 60 characters)."""
        text = self.text + (f" / {self.text_pair}" if self.text_pair else "")
        if len(text) > 60:
            text = text[:57] + "..."
        return f"attention: {text}" if text else "attention"

    def save_png(self, path: str, **kwargs: Any) -> PngLayout:
        return attention_png(self, path, **kwargs)

    def to_html(self, title: str | None = None) -> str:
        return html_view.attention_html(self, title)

    def save_html(self, path: str, title: str | None = None) -> str:
        return html_view.save_html(self, path, title)

    def _repr_html_(self) -> str:
        """In a notebook: the viewer in an iframe, so its script and ids stay apart from the page."""
        page = html.escape(self.to_html(), quote=True)
        height = 320 + 26 * len(self.tokens)
        return f'<iframe srcdoc="{page}" style="width:100%;height:{height}px;border:0"></iframe>'


def attention_maps_ids(
    model: BertPreTrainedModel | ModernBertPreTrainedModel,
    input_ids: Tensor,
    token_type_ids: Tensor | None = None,
    tokens: list[str] | None = None,
    text: str = "",
    text_pair: str | None = None,
) -> AttentionMaps:
    """Run the model once with output_attentions=True on one sequence (1, S)."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ExplainError(
            f"attention maps are drawn for one sequence: input_ids must be (1, S), got {tuple(input_ids.shape)}"
        )
    base: nn.Module = model.base_model if isinstance(model, ModernBertPreTrainedModel) else base_model(model)
    device = next(model.parameters()).device  # the inputs go where the model is (--device)
    types_in = None if token_type_ids is None else token_type_ids.to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = base(input_ids=input_ids.to(device), token_type_ids=types_in, output_attentions=True)
    finally:
        model.train(was_training)
    maps = [a[0].detach().float().cpu() for a in out.attentions]  # each (heads, S, S)
    heads = range(model.config.num_attention_heads)
    if isinstance(model, ModernBertPreTrainedModel):  # it prunes no head; its local layers' maps show their window
        head_ids = [list(heads) for _ in maps]
    else:
        layers = encoder_layers(base_model(model).encoder.layer)
        head_ids = [[h for h in heads if h not in layer.attention.pruned_heads] for layer in layers]
    S = input_ids.shape[1]
    types = token_type_ids[0].tolist() if token_type_ids is not None else [0] * S
    tokens = tokens if tokens is not None else [str(int(i)) for i in input_ids[0]]
    return AttentionMaps(tokens, types, maps, head_ids, model.config.num_attention_heads, text, text_pair)


def attention_maps(
    model: BertPreTrainedModel | ModernBertPreTrainedModel,
    tokenizer: Tokenizer,
    text: str,
    text_pair: str | None = None,
) -> AttentionMaps:
    """Tokenize `text` (and `text_pair`) and collect every layer's attention maps."""
    enc = tokenizer(text, text_pair, return_tensors="pt", return_token_type_ids=True)
    return attention_maps_ids(model, enc["input_ids"], enc["token_type_ids"], enc.tokens(), text, text_pair)


# ----- PNG ---------------------------------------------------------------------------------------
@dataclass
class PngLayout:
    path: str
    grid: tuple[int, int]  # (layers, heads): rows x columns
    size: tuple[int, int]  # (width, height) in pixels
    cells: dict[tuple[int, int], tuple[int, int, int, int]]  # (layer, head) -> (x0, y0, x1, y1), top-left origin
    font: str | None  # the font file of the labels (None: matplotlib's default, CJK may show as boxes)


def attention_png(maps: AttentionMaps, path: str, *, dpi: int = 100) -> PngLayout:
    """Draw a layers x heads grid of heatmaps with token labels and save it as a PNG."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise ExplainError("the PNG needs matplotlib: pip install matplotlib (the HTML viewer needs nothing)") from None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    from ..fonts import font_for

    L, n_heads, S = len(maps.maps), maps.num_heads, len(maps.tokens)
    title = maps.title
    font_path = font_for([*maps.tokens, title])
    font = FontProperties(fname=font_path) if font_path else FontProperties()
    labelled = S <= MAX_LABELLED_TOKENS
    size = min(9.0, max(5.0, 10.0 - S / 6))  # points
    label_in = (max(display_width(t) for t in maps.tokens) * 0.62 * size / 72 + 0.15) if labelled else 0.1
    cell = min(3.0, max(1.3, 0.15 * S + 0.4))  # inches per heatmap
    gap = 0.12
    left, right, top, bottom = label_in + 0.55, 1.0, 0.9, label_in + 0.35
    width = left + n_heads * cell + (n_heads - 1) * gap + right
    height = top + L * cell + (L - 1) * gap + bottom
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)  # square-root scale: small weights stay visible
    image = None
    for layer in range(L):
        for head in range(n_heads):
            x0 = (left + head * (cell + gap)) / width
            y0 = 1 - (top + layer * (cell + gap) + cell) / height
            ax = fig.add_axes((x0, y0, cell / width, cell / height))
            ax.set_gid(f"L{layer}H{head}")
            if head not in maps.head_ids[layer]:
                ax.axis("off")
                ax.text(
                    0.5,
                    0.5,
                    f"head {head}\npruned",
                    ha="center",
                    va="center",
                    color="0.6",
                    fontsize=8,
                    transform=ax.transAxes,
                )
                continue
            image = ax.imshow(maps.head(layer, head).numpy(), cmap="viridis", norm=norm, interpolation="nearest")
            _ticks(ax, maps.tokens, font, size, labelled, x=layer == L - 1, y=head == 0)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=9)
    fig.text(0.5, 1 - 0.25 / height, title, ha="center", va="center", fontproperties=font, fontsize=11)
    fig.text(
        0.5,
        1 - 0.55 / height,
        f"{L} layers (rows, one after another) x {n_heads} heads (columns, in "
        "parallel); row = query token (from), column = key token (to)",
        ha="center",
        va="center",
        fontsize=8,
        color="0.3",
    )
    if image is not None:
        cax = fig.add_axes(((width - right + 0.3) / width, bottom / height, 0.15 / width, min(3.0, L * cell) / height))
        fig.colorbar(image, cax=cax, label="attention weight (sqrt scale)")
    metadata = {"Title": title, "Description": f"bertkit attention grid: layers={L} heads={n_heads} tokens={S}"}
    with warnings.catch_warnings():  # without a covering font, font_for has warned once already
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata=metadata))
    return PngLayout(path, (L, n_heads), _pixels(fig), _cells(fig), font_path)


def _ticks(ax: Axes, tokens: list[str], font: FontProperties, size: float, labelled: bool, x: bool, y: bool) -> None:
    S = len(tokens)
    ax.set_xticks(range(S))
    ax.set_yticks(range(S))
    ax.set_xticklabels(tokens if labelled and x else [], fontproperties=font, fontsize=size)
    for label in ax.get_xticklabels():  # one CJK character stays upright, longer tokens turn
        label.set_rotation(0 if display_width(label.get_text()) <= 2 else 90)
    ax.set_yticklabels(tokens if labelled and y else [], fontproperties=font, fontsize=size)
    ax.tick_params(length=0, pad=1)


def _pixels(fig: Figure) -> tuple[int, int]:
    w, h = fig.canvas.get_width_height()
    return int(w), int(h)


def _cells(fig: Figure) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """Pixel boxes of the heatmaps (top-left origin), from the axes' real positions."""
    fig.canvas.draw()
    _, height = _pixels(fig)
    cells = {}
    for ax in fig.axes:
        gid = ax.get_gid()
        if not gid or not ax.images:
            continue
        layer, head = (int(x) for x in gid[1:].split("H"))
        box = ax.get_window_extent()
        cells[(layer, head)] = (round(box.x0), round(height - box.y1), round(box.x1), round(height - box.y0))
    return cells
