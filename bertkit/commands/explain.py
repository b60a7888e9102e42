"""`bertkit explain`: what a model is made of (heads, parameters), a shape trace of one pass, MLM explained."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import PRESETS
from ..devices import Precision, device_opt, place, placement, precision_opt
from ..explain.loading import HEADS
from ..options import opt, parse

if TYPE_CHECKING:
    from torch import nn


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
    device: str = device_opt()
    precision: Precision = precision_opt()

    def problem(self) -> str | None:
        if (self.model is None) == (self.preset is None):
            return "give a MODEL_DIR or --preset NAME (one of them)"
        if self.pair is not None and not (self.trace or self.mlm):
            return "--pair goes with --trace or --mlm"
        if self.mlm is not None and self.head != "mlm":
            return "--mlm needs the MLM head: leave out --head base"
        return None


def describe_source(model: nn.Module, model_dir: str | None, preset: str | None) -> str:
    return f"{type(model).__name__} from " + (model_dir if model_dir else f"preset {preset}")


def main(argv: list[str]) -> int:
    from ..explain.architecture import architecture
    from ..explain.loading import load
    from ..explain.mlm import explain_mlm
    from ..explain.trace import trace

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
    where = placement(args.device, args.precision)  # a device that is not here: refused before loading
    loaded = load(
        args.model,
        args.preset,
        head=args.head,
        tokenizer_dir=args.tokenizer,
        texts=(text, args.pair) if text is not None else (),
        seed=args.seed,
        weights_needed=text is not None,
    )
    if text is not None:  # a forward pass runs: on the device asked for (the architecture alone runs nothing)
        place(loaded.model, where)
    print(
        f"bertkit explain: {describe_source(loaded.model, args.model, args.preset)}"
        + (f"; on {where.describe()}" if text is not None else "")
    )
    for note in loaded.notes:
        print(f"note: {note}")
    print()
    if args.trace is not None:
        assert loaded.tokenizer is not None  # load() makes one for the text it is given
        print(trace(loaded.model, loaded.tokenizer, args.trace, args.pair))
    elif args.mlm is not None:
        assert loaded.tokenizer is not None
        print(explain_mlm(loaded.model, loaded.tokenizer, args.mlm, args.pair, top_k=args.top_k))
    else:
        print(architecture(loaded.model))
    return 0
