"""`bertkit` / `python -m bertkit`: one table of commands, each calling a module's main()."""

from __future__ import annotations

import argparse
import sys

from .errors import BertkitError


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def info_main(argv: list[str]) -> int:
    """Build or load a model, show it with its heads, count parameters, run one forward pass."""
    import torch

    from .config import PRESETS, BertConfig
    from .model import BertModel

    p = argparse.ArgumentParser(prog="bertkit info", description=info_main.__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("model", nargs="?", help="a local HF model directory (config.json + weights)")
    src.add_argument("--preset", choices=sorted(PRESETS), help="a built-in architecture, randomly initialised")
    p.add_argument("--seq-len", type=_positive, default=8, help="length of the random input ids of the forward pass")
    args = p.parse_args(argv)

    model = BertModel.from_pretrained(args.model) if args.model else BertModel(BertConfig.from_preset(args.preset))
    model.eval()
    cfg = model.config
    print(model)
    print(f"\n{cfg.num_hidden_layers} layers run one after another; in each, hidden {cfg.hidden_size} is split "
          f"into {cfg.num_attention_heads} heads x {cfg.head_dim} dims that attend in parallel.")
    print(f"parameters: {model.num_parameters():,}")
    ids = torch.randint(0, cfg.vocab_size, (1, args.seq_len))
    with torch.no_grad():
        out = model(ids)
    print(f"input_ids {tuple(ids.shape)} -> last_hidden_state {tuple(out.last_hidden_state.shape)}, "
          f"pooler_output {tuple(out.pooler_output.shape)}")
    return 0


def _tokenize(argv):
    from .tokenizer import tokenize_main

    return tokenize_main(argv)


def _tokenizer(argv):
    from .tokenizer import tokenizer_main

    return tokenizer_main(argv)


def _pretrain(argv):
    from .train.pretrain import main as pretrain_main

    return pretrain_main(argv)


def _explain(argv):
    from .explain.cli import explain_main

    return explain_main(argv)


def _attention(argv):
    from .explain.cli import attention_main

    return attention_main(argv)


_explain.__doc__ = "Show the inside: modules as heads, parameter counts, shape trace (--trace), MLM (--mlm)."
_attention.__doc__ = "Attention maps of a text: a layers x heads PNG grid (--png) and an HTML viewer (--html)."
_tokenize.__doc__ = "Show how a text becomes tokens and ids (a table for learners)."
_pretrain.__doc__ = "Masked-language-model pretraining from a raw corpus (torchrun for several processes)."
_tokenizer.__doc__ = "Tokenizer tools: `bertkit tokenizer train` learns a WordPiece vocabulary."

COMMANDS = {
    "info": info_main,
    "tokenize": _tokenize,
    "tokenizer": _tokenizer,
    "pretrain": _pretrain,
    "explain": _explain,
    "attention": _attention,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: bertkit COMMAND [ARGS]\n\ncommands:")
        for name, fn in COMMANDS.items():
            print(f"  {name:10s} {(fn.__doc__ or '').strip().splitlines()[0]}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except BertkitError as e:
        print(f"bertkit {argv[0]}: error: {e}", file=sys.stderr)
        return 2
