"""`bertkit info`: build or load a model, show it with its heads, count parameters, run one forward pass."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import PRESETS
from ..model_dir import check_model_folder
from ..options import opt, parse


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


def main(argv: list[str]) -> int:
    import torch

    args = parse(InfoConfig, argv, prog="bertkit info")

    from ..explain.loading import load

    if args.model is not None:
        check_model_folder(args.model)
    loaded = load(args.model, args.preset, head="base")
    model = loaded.model.eval()
    for note in loaded.notes:
        print(f"note: {note}")
    cfg = model.config
    print(model)
    print(
        f"\n{cfg.num_hidden_layers} layers run one after another; in each, hidden {cfg.hidden_size} is split "
        f"into {cfg.num_attention_heads} heads x {cfg.head_dim} dims that attend in parallel."
    )
    print(f"parameters: {model.num_parameters():,}")
    ids = torch.randint(0, cfg.vocab_size, (1, args.seq_len))
    with torch.no_grad():
        out = model(ids)
    pooled = f", pooler_output {tuple(out.pooler_output.shape)}" if out.pooler_output is not None else " (no pooler)"
    print(f"input_ids {tuple(ids.shape)} -> last_hidden_state {tuple(out.last_hidden_state.shape)}{pooled}")
    return 0
