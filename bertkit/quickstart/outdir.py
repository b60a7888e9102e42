"""The quickstart's report folder: what it writes there, and making --out ready (an earlier run's results replaced)."""

from __future__ import annotations

import json
import os
import shutil

from .messages import QuickstartError, say

# what quickstart writes in --out; a rerun replaces these (and nothing else there), in a folder holding MARKER
DATA, PRETRAIN, FINETUNE, SCRATCH, TEST, INSIDE = "data", "pretrain", "finetune", "scratch", "test", "inside"
LABELS, BASELINE = "labels", "baseline"
OUTPUTS = ("report.md", "summary.json", DATA, "labels.png", PRETRAIN, FINETUNE, SCRATCH, LABELS, BASELINE, TEST, INSIDE)
MARKER = ".bertkit-quickstart"


def prepare_out(out: str) -> None:
    """--out must be a folder we can write; what an earlier quickstart left there is replaced (and said so)."""
    usable_folder(out)
    old = [name for name in OUTPUTS if os.path.lexists(os.path.join(out, name))]
    if old and not os.path.exists(os.path.join(out, MARKER)):
        raise QuickstartError(
            f"--out {out}: already holds {', '.join(old)}, not written by bertkit quickstart; "
            "pass a new or empty folder"
        )
    if old:
        say(f"{out} holds an earlier quickstart's results; replacing: {', '.join(old)}")
    for name in old:
        remove(os.path.join(out, name))
    with open(os.path.join(out, MARKER), "w", encoding="utf-8") as fh:
        fh.write("this folder is bertkit quickstart's: a rerun replaces what it wrote here\n")


def usable_folder(out: str) -> None:
    """--out made a folder if missing; a file there, a folder that cannot be made or written, an error."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise QuickstartError(f"--out {out}: is a file, not a folder; pass a folder (it is created if missing)")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise QuickstartError(f"--out {out}: cannot create this folder ({e.strerror}: {e.filename})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise QuickstartError(f"--out {out}: this folder is not writable; pass another one")


def remove(path: str) -> None:
    """A folder with what it holds, or a file or link (a link's target is left alone)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def write_jsonl(path: str, rows: list[dict]) -> str:
    """rows as JSON lines (UTF-8, characters as they are); the path back."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return path
