"""The quickstart's inside stage: one short test review through the pretrained model's most local head and the
fine-tuned model (its prediction, architecture and attention maps)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..options import parse
from .messages import say
from .outdir import FINETUNE, INSIDE, PRETRAIN
from .profiles import Budget

if TYPE_CHECKING:
    from ..tasks.classify import ClassifyExample
    from ..tokenizer import Tokenizer
    from ..train.finetune import FinetuneConfig


def look_inside(budget: Budget, data: dict, ft_cfg: FinetuneConfig, out: str, pretrained_run: dict) -> dict:
    """One short test review: the pretrained model's attention on it (its most local head named, with what the
    recipe seeded there and what that head did at step 0: pretrained_run, pretrain()'s result), the fine-tuned
    model's prediction, architecture and attention."""
    from ..tasks import get_task, read_examples
    from ..tokenizer import Tokenizer

    model_dir, folder = os.path.join(out, FINETUNE), os.path.join(out, INSIDE)
    os.makedirs(folder)
    example = pick_review(read_examples(get_task("classify"), ft_cfg, data["test"], "test"))
    prediction_path = os.path.join(folder, "prediction.jsonl")
    predict_argv = ["--model", model_dir, "--seq-len", str(budget.finetune_seq_len)]
    predict_argv += ["--output", prediction_path, example.text]
    prediction = predict(predict_argv, prediction_path)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    local_head, pt_png, pt_page = most_local_head(out, tokenizer, example.text, pretrained_run)
    architecture, tokens, png, page = finetuned_inside(model_dir, tokenizer, example.text, folder)
    say(f"review: {example.text} (truth {example.label}; predicted {prediction['label']}, p={prediction['score']:.3f})")
    say(f"wrote {pt_png}, {png}, their HTML viewers and architecture.txt")
    pt_dir = os.path.join(out, PRETRAIN)
    commands = [
        shlex.join(["bertkit", "attention", pt_dir, example.text, "--png", pt_png, "--html", pt_page]),
        shlex.join(["bertkit", "predict", *predict_argv]),
        shlex.join(["bertkit", "explain", model_dir, "--head", "base"]),
        shlex.join(["bertkit", "attention", model_dir, example.text, "--png", png, "--html", page]),
    ]
    review = {
        "text": example.text,
        "label": example.label,
        "predicted": prediction["label"],
        "score": prediction["score"],
        "tokens": tokens,
    }
    return {"review": review, "local_head": local_head, "architecture": architecture, "commands": commands}


def predict(argv: list[str], path: str) -> dict:
    """`bertkit predict argv` in this process; the one prediction it wrote to `path` (argv's --output)."""
    from ..evaluation import PredictConfig, run_predict

    run_predict(parse(PredictConfig, argv, prog="bertkit predict"))
    with open(path, encoding="utf-8") as fh:
        return json.loads(fh.readline())


def finetuned_inside(model_dir: str, tokenizer: Tokenizer, text: str, folder: str) -> tuple[str, list, str, str]:
    """The fine-tuned model's architecture (written to architecture.txt) and its attention maps on `text` (a
    picture and an HTML viewer in `folder`): (architecture, tokens, png path, html path)."""
    from .. import explain
    from ..heads import BertForSequenceClassification

    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    architecture = str(explain.architecture(model))
    with open(os.path.join(folder, "architecture.txt"), "w", encoding="utf-8") as fh:
        fh.write(architecture + "\n")
    maps = explain.attention_maps(model, tokenizer, text)
    png, page = os.path.join(folder, "attention.png"), os.path.join(folder, "attention.html")
    maps.save_png(png)
    maps.save_html(page)
    return architecture, maps.tokens, png, page


def most_local_head(out: str, tokenizer: Tokenizer, text: str, pretrained_run: dict) -> tuple[dict, str, str]:
    """The pretrained model's head that looks at one neighbour most on `text` (with what the recipe seeded there and
    what that head did at step 0: pretrained_run, pretrain()'s result), and its attention picture and HTML viewer
    written to the inside/ folder: (local_head, png path, html path)."""
    from .. import explain
    from ..heads import BertForMaskedLM
    from ..metrics import offset_mass

    pretrained = BertForMaskedLM.from_pretrained(os.path.join(out, PRETRAIN)).eval()
    pt_maps = explain.attention_maps(pretrained, tokenizer, text)
    mass = offset_mass([m[None] for m in pt_maps.maps])  # (layers, heads, 5): offsets -2..+2
    mass[..., 2] = -1.0  # the token itself is not a neighbour
    layer, head, column = (int(i) for i in divmod_3d(int(mass.argmax()), mass.shape))
    initial = explain.attention_maps(pretrained_run["initial"], tokenizer, text)  # the same head at step 0
    local_head = {
        "layer": layer,
        "head": head,
        "offset": column - 2,
        "weight": round(float(mass[layer, head, column]), 4),
        "seeded_offset": pretrained_run["seeded"].get((layer, head)),
        "step0_weight": round(float(offset_mass([m[None] for m in initial.maps])[layer, head, column]), 4),
    }
    png = os.path.join(out, INSIDE, "pretrained_attention.png")
    page = os.path.join(out, INSIDE, "pretrained_attention.html")
    pt_maps.save_png(png)
    pt_maps.save_html(page)
    say(
        f"pretrained model: layer {layer} head {head} puts {local_head['weight']:.2f} of its attention on the token at "
        f"offset {local_head['offset']:+d}"
    )
    return local_head, png, page


def divmod_3d(index: int, shape: Sequence[int]) -> tuple[int, int, int]:
    """(i, j, k) of a flat index into a tensor of `shape` (three axes)."""
    i, rest = divmod(index, shape[1] * shape[2])
    return (i, *divmod(rest, shape[2]))


def pick_review(examples: list[ClassifyExample]) -> ClassifyExample:
    """The first review of 10 to 30 characters (its attention maps stay readable); else the shortest.
    Not one starting with "-": on a command line it would read as a flag."""
    usable = [e for e in examples if not e.text.startswith("-")] or examples
    short = [e for e in usable if 10 <= len(e.text) <= 30]
    return short[0] if short else min(usable, key=lambda e: len(e.text))
