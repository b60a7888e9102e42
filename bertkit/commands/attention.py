"""`bertkit attention`: attention maps of a text, layers x heads, as a PNG and an HTML viewer."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..devices import Precision, device_opt, place, placement, precision_opt
from ..options import opt, parse
from .explain import Source, describe_source


@dataclass
class AttentionConfig(Source):
    """Attention maps of a text: a layers x heads PNG grid and an interactive HTML viewer."""

    inputs: list[str] = opt(
        list,
        "the model directory (unless --preset), then the text",
        positional=True,
        nargs="+",
        metavar="MODEL_DIR TEXT",
    )
    pair: str | None = opt(None, "a second text (sentence B)", metavar="TEXT")
    png: str | None = opt(None, "write a grid of layers x heads heatmaps", metavar="FILE")
    html: str | None = opt(None, "write a self-contained interactive viewer", metavar="FILE")
    dpi: int = opt(100, "resolution of the PNG")
    device: str = device_opt()
    precision: Precision = precision_opt()

    def problem(self) -> str | None:
        if len(self.inputs) != (1 if self.preset else 2):
            return "give MODEL_DIR and TEXT" if not self.preset else "with --preset give only TEXT"
        if not (self.png or self.html):
            return "give --png FILE and/or --html FILE"
        return None


def main(argv: list[str]) -> int:
    from ..explain.attention_view import attention_maps
    from ..explain.loading import load

    args = parse(
        AttentionConfig,
        argv,
        prog="bertkit attention",
        usage="bertkit attention [MODEL_DIR | --preset NAME] TEXT [--pair TEXT] [--png FILE] [--html FILE]",
    )
    model_dir, text = (None, args.inputs[0]) if args.preset else args.inputs
    where = placement(args.device, args.precision)  # a device that is not here: refused before loading
    loaded = load(
        model_dir, args.preset, head="base", tokenizer_dir=args.tokenizer, texts=(text, args.pair), seed=args.seed
    )
    place(loaded.model, where)
    print(f"bertkit attention: {describe_source(loaded.model, model_dir, args.preset)}; on {where.describe()}")
    for note in loaded.notes:
        print(f"note: {note}")
    assert loaded.tokenizer is not None  # load() makes one for the text it is given
    maps = attention_maps(loaded.model, loaded.tokenizer, text, args.pair)
    S = len(maps.tokens)
    print(f"tokens ({S}): " + " ".join(maps.tokens))
    if S > 64:
        print(f"note: {S} tokens make {S}x{S} maps: the pictures get large and dense; shorter texts read better")
    if args.png:
        layout = maps.save_png(args.png, dpi=args.dpi)
        font = os.path.basename(layout.font) if layout.font else "matplotlib's default"
        print(
            f"wrote {args.png}: {layout.grid[0]} layers x {layout.grid[1]} heads, {layout.size[0]}x{layout.size[1]} "
            f"pixels, labels in {font}"
        )
    if args.html:
        page = maps.save_html(args.html)
        print(
            f"wrote {args.html} ({len(page.encode()) // 1024 + 1} KB, no network needed): open it in a browser; "
            f"{os.path.basename(args.html)}#layer=0&head=0 opens with that head selected"
        )
    return 0
