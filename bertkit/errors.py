"""Errors a user can cause. Each message says what was wrong, where, and what to do."""


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


class NonFiniteError(BertkitError, ValueError):
    """A model whose weights or outputs hold NaN or Infinity: nothing is computed or written from it."""


class BertkitWarning(UserWarning):
    """Something worth knowing that does not stop the work (e.g. newly initialised weights)."""
