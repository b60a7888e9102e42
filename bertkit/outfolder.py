"""The rules every command that writes a folder (--out) follows: pretrain and finetune (train/runfolder.py),
prepare (data/prepare.py) and tokenizer train (vocab.py).

    check_out(out, error, ...)   before any work: --out is not a file, not the working directory or a folder
                                 above it; what --overwrite would replace holds only the command's own output
                                 (an empty folder, a dataset, a run, a vocabulary) and none of the command's inputs
    move_aside(out)              --overwrite keeps what it replaces: the folder goes to a new sibling
                                 <out>.replaced-<YYYYmmdd-HHMMSS>; nothing is ever deleted
    is_inside(path, folder)      whether a path lies in a folder (links followed)

A command describes its own output with `ours`, a test of an entry's name in --out; a folder holding anything
else is refused by --overwrite, naming what is there, so a user's notes, a corpus or a model never go with it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable


def check_out(
    out: str,
    error: type[Exception],
    *,
    overwrite: bool,
    inputs: dict[str, str | None] | Iterable[tuple[str, str | None]],
    ours: Callable[[str], bool],
    what: str,
    flag: str = "--out",
    keep: tuple[str, ...] = (),
    renamed: bool = False,
) -> list[str]:
    """Refuse, before anything is written or moved, an --out that cannot take the command's output:
      - a file;
      - the working directory or a folder above it, where it would move: with --overwrite, or always for a
        command that renames a new folder into place of --out (`renamed`);
      - with --overwrite, a folder holding an input of the command (`inputs`: {"--corpus": path, ...}, or
        (flag, path) pairs where a flag takes several paths) or entries that are not `ours` (a user's files).
    Returns the entries of `out` that --overwrite would move aside (none when it is missing or empty); `keep`
    names entries never counted (the command's own lock). `what` names the output ("a dataset", "a vocabulary")."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise error(f"{flag} {out}: is a file, not a folder; pass a folder for {what} (it is created if missing)")
    folder = os.path.realpath(out)
    if (overwrite or renamed) and is_inside(os.getcwd(), folder):
        raise error(
            f"{flag} {out}: is the current directory or holds it ({folder}); pass a folder of its own for "
            f"{what} (e.g. {flag} {os.path.join(out, 'new')})"
        )
    entries = sorted(n for n in os.listdir(out) if n not in keep) if os.path.isdir(out) else []
    if not entries or not overwrite:
        return entries
    for name, path in inputs.items() if isinstance(inputs, dict) else inputs:
        if path and not path.startswith("builtin:") and is_inside(path, folder):
            raise error(
                f"{name} {path} is inside {flag} {out}, and --overwrite would move it aside with what is "
                f"there; move {path} out of {out} first, or pass another {flag}"
            )
    foreign = [n for n in entries if not ours(n)]
    if foreign:
        shown = ", ".join(n + ("/" if os.path.isdir(os.path.join(out, n)) else "") for n in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise error(
            f"{flag} {out}: holds files that are not {what} ({shown}{more}); --overwrite replaces only "
            f"{what} bertkit wrote, never other files: pass an empty or new {flag}, or move them out first"
        )
    return entries


def is_inside(path: str, folder: str) -> bool:
    """Whether `path` is the real path `folder` or lies under it (symbolic links followed)."""
    real = os.path.realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def replaced_name(out: str) -> str:
    """A new sibling name <out>.replaced-<YYYYmmdd-HHMMSS>[-N] that does not exist yet."""
    base = f"{os.path.normpath(out)}.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
    target, n = base, 1
    while os.path.lexists(target):
        n += 1
        target = f"{base}-{n}"
    return target


def move_aside(out: str, *, keep: tuple[str, ...] = (), what: str = "the earlier output", found: str = "") -> str:
    """Move everything in `out` but the entries named in `keep` to a new sibling <out>.replaced-<time>, say so on
    stderr (`found`: what it holds, in words), and return the sibling's path. Renames only: nothing is copied or
    deleted."""
    target = replaced_name(out)
    names = sorted(os.listdir(out))
    if not keep:
        os.rename(out, target)  # one rename of the whole folder
    else:
        os.makedirs(target)
        for name in names:
            if name not in keep:
                os.rename(os.path.join(out, name), os.path.join(target, name))
    print(f"--overwrite: moved {what} in {out}{f' ({found})' if found else ''} to {target}", file=sys.stderr)
    return target
