"""`bertkit` / `python -m bertkit`: one table of commands, each calling a module's main()."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from .config import PRESETS
from .errors import BertkitError
from .options import opt, parse


@dataclass
class InfoConfig:
    """Build or load a model, show it with its heads, count parameters, run one forward pass."""

    model: str | None = opt(None, "a local HF model directory (config.json + weights)", positional=True, nargs="?")
    preset: str | None = opt(None, "a built-in architecture, randomly initialised", choices=sorted(PRESETS))
    seq_len: int = opt(8, "length of the random input ids of the forward pass")

    def problem(self) -> str | None:
        if (self.model is None) == (self.preset is None):
            return "give a model directory or --preset NAME (one of them)"
        if self.seq_len < 1:
            return f"argument --seq-len: must be a positive integer, got {self.seq_len}"
        return None


def info_main(argv: list[str]) -> int:
    import torch

    args = parse(InfoConfig, argv, prog="bertkit info")

    from .explain.loading import load

    loaded = load(args.model, args.preset, head="base")
    model = loaded.model.eval()
    for note in loaded.notes:
        print(f"note: {note}")
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


# name -> (module, function, one line of help); modules load only when their command runs
COMMANDS = {
    "info": ("bertkit.cli", "info_main", "Build or load a model, show its heads, count parameters, run one pass."),
    "tokenize": ("bertkit.tokenizer", "tokenize_main", "Show how a text becomes tokens and ids (a table)."),
    "tokenizer": ("bertkit.tokenizer", "tokenizer_main", "`bertkit tokenizer train` learns a WordPiece vocabulary."),
    "pretrain": ("bertkit.train.pretrain", "main", "Masked-language-model pretraining from a raw corpus."),
    "finetune": ("bertkit.train.finetune", "main", "Fine-tune for classify / tag / qa / choice; keep the best."),
    "evaluate": ("bertkit.predict", "evaluate_main", "Score a fine-tuned model on labelled data."),
    "predict": ("bertkit.predict", "predict_main", "Predict for texts or a file; JSON lines out."),
    "fill-mask": ("bertkit.predict", "fill_mask_main", "Top-k predictions for each [MASK] in a text."),
    "embed": ("bertkit.embed", "embed_main", "Sentence embeddings of texts or a file: .npy or JSON lines out."),
    "serve": ("bertkit.serve", "serve_main", "An HTTP server: /embed, /predict, /fill-mask, ... with dynamic batching."),
    "explain": ("bertkit.explain.cli", "explain_main", "Show the inside: heads, parameters, --trace, --mlm."),
    "attention": ("bertkit.explain.cli", "attention_main", "Attention maps: layers x heads PNG, HTML viewer."),
    "quickstart": ("bertkit.quickstart", "main", "Pretrain, fine-tune, compare with from-scratch, explain: a report."),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: bertkit COMMAND [ARGS]   (bertkit COMMAND --help for its flags)\n\ncommands:")
        for name, (_, _, text) in COMMANDS.items():
            print(f"  {name:10s} {text}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module, function, _ = COMMANDS[argv[0]]
    try:
        return getattr(importlib.import_module(module), function)(argv[1:])
    except BertkitError as e:
        print(f"bertkit {argv[0]}: error: {e}", file=sys.stderr)
        return 2
