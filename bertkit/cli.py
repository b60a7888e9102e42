"""`bertkit` / `python -m bertkit`: one table of commands, each run by main() of its module in bertkit/commands/."""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn, TextIO

from .errors import BertkitError, Stopped
from .options import did_you_mean, shown

# what signal.signal() returns: a handler, SIG_DFL / SIG_IGN, or None for one set outside Python
Handler = Callable[[int, FrameType | None], Any] | int | None

# name -> one line of help; a command's module (command_module) loads only when the command runs
COMMANDS = {
    "info": "Build or load a model, show its heads, count parameters, run one pass.",
    "tokenize": "Show how a text becomes tokens and ids (a table).",
    "tokenizer": "`bertkit tokenizer train` learns a WordPiece vocabulary.",
    "prepare": "Tokenize a corpus once into a dataset folder pretrain reads by memory map.",
    "pretrain": "Masked-language-model pretraining from a raw corpus.",
    "finetune": "Fine-tune for classify / tag / qa / choice / embed / rerank; keep the best.",
    "setfit": "Few-shot classification: train on pairs of labelled texts, then a logistic head.",
    "evaluate": "Score a fine-tuned model on labelled data.",
    "predict": "Predict for texts or a file; JSON lines out.",
    "fill-mask": "Top-k predictions for each [MASK] in a text.",
    "embed": "Sentence embeddings of texts or a file: .npy or JSON lines out.",
    "mine-negatives": "Hard negatives for (anchor, positive) pairs, as sentence-transformers mines them.",
    "export": "A model folder as an ONNX graph + its config and tokenizer (ONNX Runtime).",
    "serve": "An HTTP server: /embed, /predict, /fill-mask, ... with dynamic batching.",
    "explain": "Show the inside: heads, parameters, --trace, --mlm.",
    "attention": "Attention maps: layers x heads PNG, HTML viewer.",
    "quickstart": "Pretrain, fine-tune, compare with from-scratch, explain: a report.",
}


def command_module(name: str) -> str:
    """The module whose main(argv) runs command `name`: bertkit/commands/<name>.py (fill-mask: fill_mask.py)."""
    return "bertkit.commands." + name.replace("-", "_")


def usage() -> str:
    """What `bertkit` alone prints: how to call it, and every command with its line of help."""
    lines = ["usage: bertkit COMMAND [ARGS]   (bertkit COMMAND --help for its flags)", "", "commands:"]
    return "\n".join(lines + [f"  {name:10s} {text}" for name, text in COMMANDS.items()])


def unknown_command(name: str) -> str:
    """The error line of a command name that is not one, with the closest command where one is close."""
    return f"bertkit: error: unknown command {shown(name)}{did_you_mean(name, COMMANDS)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:  # as argparse does with a bad argument: the usage, then the error, on stderr
        print(usage() + "\n" + unknown_command(argv[0]), file=sys.stderr)
        return 2
    stdout = sys.stdout = _Stdout(sys.stdout)
    handlers = _stop_on_signals()
    try:
        code = importlib.import_module(command_module(argv[0])).main(argv[1:])
        sys.stdout.flush()  # the last rows: a full device fails here, not in the interpreter's exit
        return code
    except BertkitError as e:
        print(f"bertkit {argv[0]}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (Stopped); everything on the way out is cleaned up by now
        signum = getattr(e, "signum", signal.SIGINT)
        note = getattr(e, "note", None)
        print(
            f"bertkit {argv[0]}: stopped by {signal.Signals(signum).name}" + (f"; {note}" if note else ""),
            file=sys.stderr,
        )
        return 128 + signum  # as the shell reports a process ended by that signal (130, 143)
    except OSError as e:
        if e is not stdout.failed:
            raise
        _discard(stdout.stream)
        if e.errno == errno.EPIPE:  # the reader went away (`| head`): quiet, as Unix tools are
            return 128 + 13  # as if killed by SIGPIPE
        print(
            f"bertkit {argv[0]}: error: cannot write to standard output: {e.strerror or e}; "
            "send it to a file or device with room for it",
            file=sys.stderr,
        )
        return 1
    finally:
        sys.stdout = stdout.stream
        for signum, handler in handlers.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)  # None: one set outside Python


def _stop_on_signals() -> dict[signal.Signals, Handler]:
    """SIGTERM and SIGINT raise Stopped in the main thread while a command runs, so that it stops as on Ctrl-C:
    its `finally` and `except BaseException` blocks run (a partial folder removed, a lock released, worker
    processes ended) and main() prints one line instead of a traceback. Where a command handles them itself (the
    training loop saves and stops at a step boundary; serve drains), its own handlers take over meanwhile.
    A second signal of the same kind ends the process at once, should the way out hang. Returns the handlers
    to put back (none when not in the main thread, where signal handlers cannot be set)."""
    old: dict[signal.Signals, Handler] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            old[signum] = signal.signal(signum, _raise_stopped)
        except ValueError:  # not the main thread (an embedding program's worker thread)
            break
    return old


def _raise_stopped(signum: int, frame: FrameType | None) -> NoReturn:
    signal.signal(signum, signal.SIG_DFL)  # the second one ends the process (the workers die with it)
    raise Stopped(signum)


class _Stdout:
    """sys.stdout while a command runs: remembers the error of a write or flush that failed (a full device,
    a closed pipe), so main() tells it from other OSErrors; everything else is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream: TextIO = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as e:
            self.failed = e
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as e:
            self.failed = e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _discard(stream: TextIO) -> None:
    """Point the stream's file descriptor at /dev/null, so the rows still buffered do not fail again (and
    print "Exception ignored ... BrokenPipeError") when the interpreter flushes stdout at exit."""
    try:
        fd = stream.fileno()
    except (OSError, AttributeError, ValueError):  # no descriptor (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
