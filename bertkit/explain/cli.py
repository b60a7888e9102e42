"""`bertkit explain` and `bertkit attention`: what a model is made of and what it does with a text."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from ..config import PRESETS
from ..options import opt, parse
from .common import ExplainError
from .loading import HEADS


@dataclass
class Source:
    """Where the model comes from: MODEL_DIR, or a preset with random weights."""

    preset: str | None = opt(
        None, "a built-in architecture with random weights instead of MODEL_DIR", choices=sorted(PRESETS)
    )
    tokenizer: str | None = opt(
        None,
        "a tokenizer folder (vocab.txt / tokenizer.json); default: MODEL_DIR's, or "
        "for a preset a character vocabulary built from the text",
        metavar="DIR",
    )
    seed: int = opt(0, "random seed of a preset's weights")


@dataclass
class ExplainConfig(Source):
    """Show the inside: modules with their heads, parameter counts, shape trace (--trace), MLM (--mlm)."""

    model: str | None = opt(None, "a local HF model directory", positional=True, nargs="?", metavar="MODEL_DIR")
    trace: str | None = opt(
        None, "run one forward pass and print every step's tensor shape", metavar="TEXT", exclusive="mode"
    )
    mlm: str | None = opt(
        None, "predict the [MASK] tokens of TEXT and show what the loss uses", metavar="TEXT", exclusive="mode"
    )
    pair: str | None = opt(None, "a second text (sentence B) for --trace / --mlm", metavar="TEXT")
    head: str = opt(
        "mlm",
        "mlm: BertForMaskedLM (encoder + MLM head, the default); base: BertModel (encoder + pooler)",
        choices=list(HEADS),
    )
    top_k: int = opt(5, "predictions shown per [MASK]")

    def problem(self) -> str | None:
        if (self.model is None) == (self.preset is None):
            return "give a MODEL_DIR or --preset NAME (one of them)"
        if self.pair is not None and not (self.trace or self.mlm):
            return "--pair goes with --trace or --mlm"
        if self.mlm is not None and self.head != "mlm":
            return "--mlm needs the MLM head: leave out --head base"
        return None


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

    def problem(self) -> str | None:
        if len(self.inputs) != (1 if self.preset else 2):
            return "give MODEL_DIR and TEXT" if not self.preset else "with --preset give only TEXT"
        if not (self.png or self.html):
            return "give --png FILE and/or --html FILE"
        return None


def _describe_source(model, model_dir: str | None, preset: str | None) -> str:
    return f"{type(model).__name__} from " + (model_dir if model_dir else f"preset {preset}")


def explain_main(argv: list[str]) -> int:
    from .architecture import architecture
    from .loading import load
    from .mlm import explain_mlm
    from .trace import trace

    args = parse(
        ExplainConfig,
        argv,
        prog="bertkit explain",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:  bertkit explain --preset bert-base-chinese\n"
        "           bertkit explain MODEL_DIR --trace '今天天气很好'\n"
        "           bertkit explain MODEL_DIR --mlm '今天[MASK]气很好'",
    )
    text = args.trace if args.trace is not None else args.mlm
    loaded = load(
        args.model,
        args.preset,
        head=args.head,
        tokenizer_dir=args.tokenizer,
        texts=(text, args.pair) if text is not None else (),
        seed=args.seed,
        weights_needed=text is not None,
    )
    print(f"bertkit explain: {_describe_source(loaded.model, args.model, args.preset)}")
    for note in loaded.notes:
        print(f"note: {note}")
    print()
    if args.trace is not None:
        print(trace(loaded.model, loaded.tokenizer, args.trace, args.pair))
    elif args.mlm is not None:
        print(explain_mlm(loaded.model, loaded.tokenizer, args.mlm, args.pair, top_k=args.top_k))
    else:
        print(architecture(loaded.model))
    return 0


def attention_main(argv: list[str]) -> int:
    from .attention_view import attention_maps
    from .loading import load

    args = parse(
        AttentionConfig,
        argv,
        prog="bertkit attention",
        usage="bertkit attention [MODEL_DIR | --preset NAME] TEXT [--pair TEXT] [--png FILE] [--html FILE]",
    )
    model_dir, text = (None, args.inputs[0]) if args.preset else args.inputs
    loaded = load(
        model_dir, args.preset, head="base", tokenizer_dir=args.tokenizer, texts=(text, args.pair), seed=args.seed
    )
    print(f"bertkit attention: {_describe_source(loaded.model, model_dir, args.preset)}")
    for note in loaded.notes:
        print(f"note: {note}")
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


__all__ = ["explain_main", "attention_main", "ExplainError"]
