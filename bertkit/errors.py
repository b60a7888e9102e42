"""Errors a user can cause. Each message says what was wrong, where, and what to do."""

import contextlib
from collections.abc import Iterator


class BertkitError(Exception):
    """Base class of every error bertkit raises for bad input, files or settings."""


class ConfigError(BertkitError, ValueError):
    """A configuration that cannot work (bad value, bad JSON, unknown preset)."""


class CheckpointError(BertkitError, OSError):
    """A checkpoint directory or weights file that cannot be loaded as asked."""


class TrainingError(BertkitError, RuntimeError):
    """A run that cannot go on (diverged, bad settings, labels the model does not know, incompatible resume)."""


class InputError(BertkitError, ValueError):
    """Tensors passed to a model that do not fit it (shape, range, length)."""


class TokenizerError(BertkitError, ValueError):
    """A vocabulary, tokenizer directory or call that cannot work (bertkit.tokenizer publishes it)."""


class NonFiniteError(BertkitError, ValueError):
    """A model whose weights or outputs hold NaN or Infinity: nothing is computed or written from it."""


class BertkitWarning(UserWarning):
    """Something worth knowing that does not stop the work (e.g. newly initialised weights)."""


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGTERM, or SIGINT: Ctrl-C) that the CLI turned into an exception in the main thread
    (cli.py), so that the way out cleans up as for Ctrl-C: partial folders removed, locks released, worker
    processes ended. A KeyboardInterrupt, so that code which handles Ctrl-C handles SIGTERM alike.
    `note` (set by stop_note) says what the stop left behind and what to do."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_note(note: str) -> Iterator[None]:
    """A stop (Stopped, or a plain KeyboardInterrupt) inside the block is reported with `note` (the innermost
    block's note wins: it knows most)."""
    try:
        yield
    except KeyboardInterrupt as e:
        if getattr(e, "note", None) is None:
            e.note = note  # type: ignore[attr-defined]  # any exception takes an attribute; typeshed lists none
        raise
