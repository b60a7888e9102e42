"""`bertkit explain` and `bertkit attention`: what a model is made of and what it does with a text."""

from __future__ import annotations

import argparse
import os

from ..config import PRESETS
from .common import ExplainError


def _source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="a built-in architecture with random weights instead of MODEL_DIR")
    p.add_argument("--tokenizer", metavar="DIR",
                   help="a tokenizer folder (vocab.txt / tokenizer.json); default: MODEL_DIR's, or for a preset a "
                        "character vocabulary built from the text")
    p.add_argument("--seed", type=int, default=0, help="random seed of a preset's weights")


def _describe_source(model, model_dir: str | None, preset: str | None) -> str:
    return f"{type(model).__name__} from " + (model_dir if model_dir else f"preset {preset}")


def explain_main(argv: list[str]) -> int:
    """Show the inside: modules with their heads, parameter counts, shape trace (--trace), MLM (--mlm)."""
    from .architecture import architecture
    from .loading import load
    from .mlm import explain_mlm
    from .trace import trace

    p = argparse.ArgumentParser(
        prog="bertkit explain", description=explain_main.__doc__,
        epilog="examples:  bertkit explain --preset bert-base-chinese\n"
               "           bertkit explain MODEL_DIR --trace '今天天气很好'\n"
               "           bertkit explain MODEL_DIR --mlm '今天[MASK]气很好'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", metavar="MODEL_DIR", help="a local HF model directory")
    _source_arguments(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--trace", metavar="TEXT", help="run one forward pass and print every step's tensor shape")
    mode.add_argument("--mlm", metavar="TEXT", help="predict the [MASK] tokens of TEXT and show what the loss uses")
    p.add_argument("--pair", metavar="TEXT", help="a second text (sentence B) for --trace / --mlm")
    p.add_argument("--head", choices=("mlm", "base"), default="mlm",
                   help="mlm: BertForMaskedLM (encoder + MLM head, the default); base: BertModel (encoder + pooler)")
    p.add_argument("--top-k", type=int, default=5, help="predictions shown per [MASK] (default 5)")
    args = p.parse_args(argv)
    if (args.model is None) == (args.preset is None):
        p.error("give a MODEL_DIR or --preset NAME (one of them)")
    if args.pair is not None and not (args.trace or args.mlm):
        p.error("--pair goes with --trace or --mlm")
    if args.mlm is not None and args.head != "mlm":
        p.error("--mlm needs the MLM head: leave out --head base")
    text = args.trace if args.trace is not None else args.mlm
    loaded = load(args.model, args.preset, head=args.head, tokenizer_dir=args.tokenizer,
                  texts=(text, args.pair) if text is not None else (), seed=args.seed,
                  weights_needed=text is not None)
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
    """Attention maps of a text: a layers x heads PNG grid and an interactive HTML viewer."""
    from .attention_view import attention_maps
    from .loading import load

    p = argparse.ArgumentParser(
        prog="bertkit attention", description=attention_main.__doc__,
        usage="bertkit attention [MODEL_DIR | --preset NAME] TEXT [--pair TEXT] [--png FILE] [--html FILE]")
    p.add_argument("inputs", nargs="+", metavar="MODEL_DIR TEXT", help="the model directory (unless --preset), "
                                                                        "then the text")
    _source_arguments(p)
    p.add_argument("--pair", metavar="TEXT", help="a second text (sentence B)")
    p.add_argument("--png", metavar="FILE", help="write a grid of layers x heads heatmaps")
    p.add_argument("--html", metavar="FILE", help="write a self-contained interactive viewer")
    p.add_argument("--dpi", type=int, default=100, help="resolution of the PNG (default 100)")
    args = p.parse_args(argv)
    want = 1 if args.preset else 2
    if len(args.inputs) != want:
        p.error("give MODEL_DIR and TEXT" if not args.preset else "with --preset give only TEXT")
    if not (args.png or args.html):
        p.error("give --png FILE and/or --html FILE")
    model_dir, text = (None, args.inputs[0]) if args.preset else args.inputs
    loaded = load(model_dir, args.preset, head="base", tokenizer_dir=args.tokenizer, texts=(text, args.pair),
                  seed=args.seed)
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
        print(f"wrote {args.png}: {layout.grid[0]} layers x {layout.grid[1]} heads, {layout.size[0]}x{layout.size[1]} "
              f"pixels, labels in {font}")
    if args.html:
        page = maps.save_html(args.html)
        print(f"wrote {args.html} ({len(page.encode()) // 1024 + 1} KB, no network needed): open it in a browser; "
              f"{os.path.basename(args.html)}#layer=0&head=0 opens with that head selected")
    return 0


__all__ = ["explain_main", "attention_main", "ExplainError"]
