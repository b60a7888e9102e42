"""What initialisation set in the pretrained model's heads, and what training changed: each head's attention on
its neighbours at step 0 and after the last step, on the run's held-out rows."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from torch import Tensor, nn

    from ..config import BertConfig
    from ..model import BertPreTrainedModel
    from ..train.objectives import Objective
    from ..train.objectives.base import Rows
    from ..train.pretrain import PretrainConfig

NEIGHBOURS = (-2, -1, 1, 2)  # the offsets a head can look at a neighbour on (offset_mass's columns 0, 1, 3, 4)


def head_locality(cfg: PretrainConfig) -> dict:
    """The heads before and after pretraining, on the run's held-out rows: the step-0 model evaluated as the run's
    evaluations are (the curves' step-0 point: "step0"), and each head's attention on its neighbours at step 0 and
    after the last step ("heads": a seeded head's share on the offset it was pointed at, another head's largest
    share on one neighbour). {"locality": those, or None without held-out rows; "initial": the step-0 MLM model
    (on the CPU, for the review's maps); "seeded": {(layer, head): offset}}."""
    objective, start, rows = step_zero(cfg)
    initial = mlm_model(start)
    seeded = {} if cfg.init_from else seeded_heads(cfg.recipe, initial.config)
    if rows is None:
        return {"locality": None, "initial": initial.eval(), "seeded": seeded}
    step0, shares = measure(cfg, objective, start, rows)
    if shares["step0"] is None or shares["final"] is None:  # no full held-out row to measure the heads on
        return {"locality": None, "initial": initial, "seeded": seeded}
    (before, count, tokens), (after, _, _) = shares["step0"], shares["final"]
    heads = [
        head_record(layer, head, seeded.get((layer, head)), before[layer, head], after[layer, head])
        for layer in range(before.shape[0])
        for head in range(before.shape[1])
    ]
    locality = {"rows": count, "tokens": tokens, "step0": step0, "heads": heads}
    return {"locality": locality, "initial": initial, "seeded": seeded}


def measure(cfg: PretrainConfig, objective: Objective, start: nn.Module, rows: Rows) -> tuple[dict, dict]:
    """The step-0 model's held-out evaluation (rounded as the run's metrics are), and offset_shares of the step-0
    and the final model: ({metric: value}, {"step0": shares, "final": shares})."""
    import torch

    from ..train.devices import pick_device

    device, shares = pick_device(cfg.device), {}
    for name, model in (("step0", start), ("final", objective.load(cfg.out))):
        set_attention = getattr(model, "set_attn_implementation", None)  # as the training loop sets it
        if set_attention is not None:
            set_attention(cfg.attention)
        model.to(device).eval()
        with torch.no_grad():
            if name == "step0":
                step0 = {k: round(float(v), 6) for k, v in objective.evaluate(model, rows).items()}
            shares[name] = offset_shares(mlm_model(model), rows)
        model.cpu()
    return step0, shares


def step_zero(cfg: PretrainConfig) -> tuple[Objective, nn.Module, Rows | None]:
    """What `bertkit pretrain` started from, made again as it made it (train/pretrain.py's starting_model): the
    objective, the model before its first step, and the held-out rows (None: none)."""
    from ..data.dataset import PretrainingData
    from ..tokenizer import Tokenizer
    from ..train import pretrain as pt

    tokenizer = Tokenizer.from_pretrained(cfg.out)  # the run saved its tokenizer beside the model
    data = PretrainingData.open(cfg.data or os.path.join(cfg.out, "data"))
    rows = pt.pretraining_rows(cfg, data, tokenizer).get("heldout")
    objective, model = pt.starting_model(cfg, tokenizer, data.splits["train"])
    return objective, model, rows if rows is not None and len(rows) else None


def seeded_heads(recipe: str, config: BertConfig) -> dict[tuple[int, int], int]:
    """{(layer, head): offset}: the heads `--recipe`'s initialisation points at a neighbour (init.py's
    LocalitySeed.chosen, as seed_locality reads them); {} for a recipe that seeds none (bert)."""
    from ..init import SEEDS
    from ..train.pretrain import RECIPES

    seed = SEEDS.get(RECIPES[recipe].init)
    if seed is None:
        return {}
    chosen = seed.chosen(config.num_hidden_layers, config.num_attention_heads)
    return {(layer, head): offset for layer, head, offset in chosen}


def mlm_model(model: nn.Module) -> BertPreTrainedModel:
    """The BERT inside an objective's model, as its evaluation measures the heads of (mlm-bow: .mlm; ELECTRA: the
    discriminator; mlm, mlm-nsp: the model itself)."""
    inner = getattr(model, "mlm", None) or getattr(model, "discriminator", None) or model
    return cast("BertPreTrainedModel", inner)


def offset_shares(model: nn.Module, rows: Rows, count: int = 16) -> tuple[Tensor, int, int] | None:
    """(layers, heads, 5) attention on offsets -2..+2 (offset_mass) over the held-out rows the run's
    neighbour_attention reads (train/objectives/mlm.py's full_row_attentions: the first full rows, up to `count`),
    those rows' number and length; None where no row is full. Its largest neighbour share is the curve's
    neighbour_attention (tests check)."""
    from ..metrics import offset_mass
    from ..train.objectives.mlm import full_row_attentions

    found = full_row_attentions(model, rows, count)
    if found is None:
        return None
    attentions, full, length = found
    return offset_mass(attentions).cpu(), full, length


def head_record(layer: int, head: int, seeded: int | None, before: Tensor, after: Tensor) -> dict:
    """One head at step 0 and after pretraining ((5,) shares on offsets -2..+2 each): a seeded head on the offset it
    was pointed at; another on the neighbour it looks at most after training (at step 0: its largest neighbour)."""
    columns = [d + 2 for d in NEIGHBOURS]
    offset = seeded if seeded is not None else NEIGHBOURS[int(after[columns].argmax())]
    start = before[offset + 2] if seeded is not None else before[columns].max()
    return {
        "layer": layer,
        "head": head,
        "seeded": seeded is not None,
        "offset": offset,
        "step0": round(float(start), 6),
        "final": round(float(after[offset + 2]), 6),
    }
