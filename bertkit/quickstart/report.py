"""The quickstart's report: report.md, section by section from summary.json's numbers, and the results table
printed at the end. Every link in report.md is relative to --out, so the folder can be moved or shared."""

from __future__ import annotations

import os

from .host import machine_line
from .locality_words import OFFSET_WORDS, inside_head, locality_lines
from .outdir import BASELINE, FINETUNE, INSIDE, LABELS, PRETRAIN, SCRATCH, TEST
from .profiles import OBJECTIVE


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


# ----- the results: printed, and at the top of the report -------------------------------------------------
def results_table(summary: dict) -> str:
    """The results in aligned lines for stdout, and the review's most local head."""
    h = summary["local_head"]
    rows = [
        ("held-out MLM accuracy after pretraining", num(summary["mlm_accuracy"])),
        ("most attention a head puts on one neighbour", num(summary["neighbour_attention"]) + at_step0(summary)),
        ("test accuracy, pretrained then fine-tuned", num(summary["test_accuracy_pretrained"])),
        ("test accuracy, same model from scratch", num(summary["test_accuracy_scratch"])),
        ("test accuracy, bag-of-characters baseline", num(summary["test_accuracy_bag_of_chars"])),
    ]
    rows += [
        (f"with {r['labels']:,} labels: pretrained / scratch", f"{num(r['pretrained'])} / {num(r['scratch'])}")
        for r in summary["label_efficiency"][:-1]
    ]
    lines = [f"{name:<44}{value}" for name, value in rows]
    lines.append(
        f"(the review in report.md: layer {h['layer']} head {h['head']} puts {h['weight']:.2f} of its "
        f"attention on the token at offset {h['offset']:+d}{seed_words(h)})"
    )
    return "\n".join(lines)


def seed_words(head: dict) -> str:
    """For the results table: what the local recipe seeded in the review's most local head ("" where unknown)."""
    seeded, start = head.get("seeded_offset"), head.get("step0_weight")
    if start is None:
        return ""
    if seeded == head["offset"]:
        return f", where the local recipe pointed it: {start:.2f} at step 0"
    if seeded is not None:
        return f"; the local recipe pointed it at offset {seeded:+d} ({start:.2f} here at step 0)"
    return f"; the local recipe did not seed it ({start:.2f} at step 0)"


def at_step0(summary: dict) -> str:
    """The curve's step-0 neighbour attention, as " (step 0, from initialisation: 0.95)"; "" where not measured."""
    first = summary["pretrain_curve"][0] if summary["pretrain_curve"] else {}
    if first.get("step") != 0 or first.get("neighbour_attention") is None:
        return ""
    return f" (step 0, from initialisation: {first['neighbour_attention']:.2f})"


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def sentence(text: str) -> str:
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


# ----- report.md, top to bottom ------------------------------------------------------------------------
def report_results(summary: dict) -> list[str]:
    """The report's title, the machine, and the results: the two classifiers side by side, then by labels."""
    return [*report_title(summary), *results_side_by_side(summary), *results_by_labels(summary)]


def report_title(summary: dict) -> list[str]:
    """The title, the profile and the command that reruns it all, and the machine the time depends on."""
    return [
        "# bertkit quickstart",
        "",
        f"Profile **{summary['profile']}** on **{summary['device']}**, seed {summary['seed']}, "
        f"{summary['total_seconds']} s in all. "
        f"Rerun everything: `{summary['commands']['quickstart']}`."
        + (
            " **--tiny: a smoke test on a sliver of the data; the numbers mean nothing.**"
            if summary["profile"] == "tiny"
            else ""
        ),
        "",
        f"{sentence(machine_line(summary['machine']))}."
        + (
            ""
            if summary["machine"]["gpu"]
            else " The time depends on these: the cores and threads, and the precision: where the CPU has "
            "AVX-512 BF16 or AMX the stages train in bf16 autocast, faster than float32."
        ),
        "",
    ]


def results_side_by_side(summary: dict) -> list[str]:
    """## Results: the pretrained and the from-scratch classifier in one table."""
    return [
        "## Results",
        "",
        "| | pretrained, then fine-tuned | from scratch (same architecture, same budget) |",
        "|---|---|---|",
        f"| held-out MLM accuracy after pretraining | {num(summary['mlm_accuracy'])} | (no pretraining) |",
        f"| the most attention one head puts on one neighbouring token | {num(summary['neighbour_attention'])}"
        f"{at_step0(summary)} | |",
        f"| test accuracy ({summary['test_examples']} reviews) | {num(summary['test_accuracy_pretrained'])} "
        f"| {num(summary['test_accuracy_scratch'])} |",
        f"| test macro-F1 | {num(summary['test_macro_f1_pretrained'])} | {num(summary['test_macro_f1_scratch'])} |",
        f"| best dev accuracy (the model kept) | {num(summary['dev_accuracy_pretrained'])} "
        f"| {num(summary['dev_accuracy_scratch'])} |",
        "",
        "The MLM accuracy is the share of masked tokens of held-out documents the pretrained model predicts "
        "exactly. Both classifiers have the same architecture and were fine-tuned with the same steps, batch "
        "and learning rate; the only difference is where their weights started.",
        "",
    ]


def results_by_labels(summary: dict) -> list[str]:
    """### By number of labels: test accuracy of the three models by labelled reviews, and the figure."""
    return [
        "### By number of labels",
        "",
        "| labelled reviews | pretrained, then fine-tuned | from scratch | bag-of-characters logistic regression |",
        "|---:|---:|---:|---:|",
        *[
            f"| {row['labels']:,} | {num(row['pretrained'])} | {num(row['scratch'])} | {num(row['bag_of_chars'])} |"
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
    return [
        "## Stages",
        "",
        "| stage | wall time (s) |",
        "|---|---|",
        *[f"| {name} | {took} |" for name, took in summary["stage_seconds"].items()],
        "",
        *section_pretraining(summary),
        *section_finetuning(summary),
        *section_labels(summary),
        *section_test(summary["stage_seconds"]),
    ]


def section_pretraining(summary: dict) -> list[str]:
    """Section 1: the vocabulary and the pretraining budget, its curves, and what the heads did (locality_lines)."""
    budget = summary["budget"]
    return [
        f"### 1. Pretraining ({summary['stage_seconds'][PRETRAIN]} s)",
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
        *([sentence(summary["vocab_shortfall"]), ""] if summary["vocab_shortfall"] else []),
        f"![held-out MLM accuracy and head locality by step]({PRETRAIN}/mlm_accuracy.png)",
        "",
        *locality_lines(summary),
        f"![pretraining loss]({PRETRAIN}/loss.png)",
        "",
        "The training loss is the objective the optimizer minimised (MLM on the 30% masked tokens + the bag-of-words "
        "loss); the held-out losses are MLM alone with 15% masked, and the bag-of-words loss, on held-out rows: "
        "other numbers, so each on its own axis.",
        "",
    ]


def section_finetuning(summary: dict) -> list[str]:
    """Sections 2 and 3: fine-tuning the pretrained model, and the same model from random weights."""
    budget, seconds = summary["budget"], summary["stage_seconds"]
    return [
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
    ]


def section_labels(summary: dict) -> list[str]:
    """Sections 4 and 5: fewer labels, and the bag-of-characters baseline."""
    budget, seconds = summary["budget"], summary["stage_seconds"]
    return [
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
    ]


def section_test(seconds: dict) -> list[str]:
    """Section 6: the test split's reports and confusion matrices."""
    return [
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
