"""The quickstart as a command: its settings, the stages run in order with their wall times, summary.json and the
report written."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..metrics import finite_or_none
from ..options import opt
from .data import prepare_data
from .figures import plot_label_efficiency, plot_pretraining
from .host import cpu_precision, machine, machine_line
from .inside import look_inside
from .labels import few_labels
from .messages import say
from .outdir import BASELINE, FINETUNE, INSIDE, LABELS, PRETRAIN, SCRATCH, TEST, prepare_out
from .pretraining import pretrain, pretrain_argv
from .profiles import PROFILES, Budget
from .report import results_table, write_report
from .scoring import bag_of_chars, evaluate_all, label_efficiency
from .training import finetune, finetune_argv


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
    from ..train.devices import pick_device

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
    stages = Stages()
    results = run_stages(stages, budget, out, common, settings.seed)
    summary = summary_of(profile, device, settings.seed, budget, host, results, stages, rerun)
    write_outputs(out, summary, results["inside"]["architecture"])
    return 0


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


def run_stages(run: Stages, budget: Budget, out: str, common: list[str], seed: int) -> dict[str, dict]:
    """The stages in order (data, then the training stages, then the scoring ones); their results by summary_of's
    names: pt, ft, sc, few, base, test, inside."""
    data = run("data", "the data", prepare_data, budget, out)
    trained = training_stages(run, budget, data, out, common, seed)
    few = trained["few"]
    base = run(BASELINE, "a bag-of-characters logistic regression with the same labels", bag_of_chars, data, few)
    test = run(TEST, "every model on the held-out test split", evaluate_all, budget, data, out, few)
    inside = run(
        INSIDE,
        "inside: the pretrained model's local heads, the fine-tuned model's attention",
        look_inside,
        budget,
        data,
        trained["ft"]["cfg"],
        out,
        trained["pt"],
    )
    return {**trained, "base": base, "test": test, "inside": inside}


def training_stages(run: Stages, budget: Budget, data: dict, out: str, common: list[str], seed: int) -> dict:
    """Pretraining, fine-tuning it, the same model from random weights, and both with fewer labels."""
    pt_dir = os.path.join(out, PRETRAIN)
    pt_title = (
        f"pretraining: a vocabulary and a {budget.model} BERT on People's Daily "
        f"({budget.pretrain_steps} steps of {budget.pretrain_batch})"
    )
    pt = run(PRETRAIN, pt_title, pretrain, pretrain_argv(budget, data, out, common))
    ft_argv = finetune_argv(budget, data, pt_dir, None, os.path.join(out, FINETUNE), common)
    ft = run(FINETUNE, "fine-tuning the pretrained model on sentiment", finetune, ft_argv)
    sc_title = f"the baseline: the same {budget.model} from random weights, the same budget"
    sc_argv = finetune_argv(budget, data, budget.model, pt_dir, os.path.join(out, SCRATCH), common)
    sc = run(SCRATCH, sc_title, finetune, sc_argv, control=True)
    sizes = ", ".join(f"{n} reviews" for n, _ in budget.few_labels)
    few_title = f"with fewer labels: {sizes}, pretrained and from scratch"
    few = run(LABELS, few_title, few_labels, budget, data, out, common, seed)
    return {"pt": pt, "ft": ft, "sc": sc, "few": few}


def summary_of(
    profile: str, device: str, seed: int, budget: Budget, host: dict, stages: dict[str, dict], run: Stages, rerun: str
) -> dict:
    """summary.json: the stages' results (`stages`: pt, ft, sc, few, base, test, inside), the pretraining curve from
    step 0, the machine, the budget, the wall times and the commands."""
    pt, ft, sc, few = stages["pt"], stages["ft"], stages["sc"], stages["few"]
    base, test, inside = stages["base"], stages["test"], stages["inside"]
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
        "pretrain_curve": pretrain_curve(pt),
        "locality": pt["locality"],
        "label_efficiency": label_efficiency(few, base, test),
        "control_facts": {SCRATCH: sc["facts"], **few["facts"]},
        "test_examples": test["pretrained"]["n"],
        "review": inside["review"],
        "local_head": inside["local_head"],
        "stage_seconds": run.seconds,
        "total_seconds": round(sum(run.seconds.values()), 1),
        "commands": {"quickstart": rerun, **run.commands},
    }


def pretrain_curve(pt: dict) -> list[dict]:
    """Held-out MLM accuracy and neighbour attention by step, from step 0: the model before any training step,
    evaluated as the run evaluates (pt: pretrain()'s result)."""
    from ..train.runlog import read_metrics

    curve = [r for r in read_metrics(os.path.join(pt["cfg"].out, "metrics.jsonl")) if r.get("split") == "eval"]
    if pt["locality"] is not None:
        curve.insert(0, {"step": 0, **pt["locality"]["step0"]})
    return [
        {"step": r["step"], "mlm_accuracy": r["mlm_accuracy"], "neighbour_attention": r.get("neighbour_attention")}
        for r in curve
    ]


def write_outputs(out: str, summary: dict, architecture: str) -> None:
    """The figures, summary.json and report.md in --out; the results table and the report's path on stdout."""
    plot_pretraining(summary, os.path.join(out, PRETRAIN, "mlm_accuracy.png"))
    plot_label_efficiency(summary["label_efficiency"], os.path.join(out, "labels.png"))
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(finite_or_none(summary), fh, ensure_ascii=False, indent=2, allow_nan=False)
    report = write_report(out, summary, architecture)
    print(results_table(summary))
    print(f"report: {report}")
