"""`bertkit` / `python -m bertkit`: one table of commands, each calling a module's main()."""

from __future__ import annotations

import errno
import importlib
import os
import sys

from .errors import BertkitError


# name -> (module, function, one line of help); modules load only when their command runs
COMMANDS = {
    "info": ("bertkit.info", "info_main", "Build or load a model, show its heads, count parameters, run one pass."),
    "tokenize": ("bertkit.tokenizer", "tokenize_main", "Show how a text becomes tokens and ids (a table)."),
    "tokenizer": ("bertkit.tokenizer", "tokenizer_main", "`bertkit tokenizer train` learns a WordPiece vocabulary."),
    "prepare": ("bertkit.data.prepare", "main", "Tokenize a corpus once into a dataset folder pretrain reads by memory map."),
    "pretrain": ("bertkit.train.pretrain", "main", "Masked-language-model pretraining from a raw corpus."),
    "finetune": ("bertkit.train.finetune", "main", "Fine-tune for classify / tag / qa / choice; keep the best."),
    "evaluate": ("bertkit.predict", "evaluate_main", "Score a fine-tuned model on labelled data."),
    "predict": ("bertkit.predict", "predict_main", "Predict for texts or a file; JSON lines out."),
    "fill-mask": ("bertkit.predict", "fill_mask_main", "Top-k predictions for each [MASK] in a text."),
    "embed": ("bertkit.embed", "embed_main", "Sentence embeddings of texts or a file: .npy or JSON lines out."),
    "serve": ("bertkit.serve", "serve_main", "An HTTP server: /embed, /predict, /fill-mask, ... with dynamic batching."),
    "explain": ("bertkit.explain.cli", "explain_main", "Show the inside: heads, parameters, --trace, --mlm."),
    "attention": ("bertkit.explain.cli", "attention_main", "Attention maps: layers x heads PNG, HTML viewer."),
    "quickstart": ("bertkit.quickstart", "main", "Pretrain, fine-tune, compare with from-scratch, explain: a report."),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: bertkit COMMAND [ARGS]   (bertkit COMMAND --help for its flags)\n\ncommands:")
        for name, (_, _, text) in COMMANDS.items():
            print(f"  {name:10s} {text}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module, function, _ = COMMANDS[argv[0]]
    stdout = sys.stdout = _Stdout(sys.stdout)
    try:
        code = getattr(importlib.import_module(module), function)(argv[1:])
        sys.stdout.flush()  # the last rows: a full device fails here, not in the interpreter's exit
        return code
    except BertkitError as e:
        print(f"bertkit {argv[0]}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e is not stdout.failed:
            raise
        _discard(stdout.stream)
        if e.errno == errno.EPIPE:  # the reader went away (`| head`): quiet, as Unix tools are
            return 128 + 13  # as if killed by SIGPIPE
        print(f"bertkit {argv[0]}: error: cannot write to standard output: {e.strerror or e}; "
              "send it to a file or device with room for it", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout.stream


class _Stdout:
    """sys.stdout while a command runs: remembers the error of a write or flush that failed (a full device,
    a closed pipe), so main() tells it from other OSErrors; everything else is the stream's own."""

    def __init__(self, stream):
        self.stream, self.failed = stream, None

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

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _discard(stream) -> None:
    """Point the stream's file descriptor at /dev/null, so the rows still buffered do not fail again (and
    print "Exception ignored ... BrokenPipeError") when the interpreter flushes stdout at exit."""
    try:
        fd = stream.fileno()
    except (OSError, AttributeError, ValueError):  # no descriptor (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
