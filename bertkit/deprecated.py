"""Names that moved, kept at their old address for one release: reading one warns and answers from its new home.

    __getattr__ = moved(__name__, {"train_vocab": "bertkit.vocab:train_vocab"})   # in the old module

An old module that is gone as a whole stays as a file holding only that line. The new home is imported by name
when an old name is read, never at import time, so the old module does not depend on it.
"""

from __future__ import annotations

import importlib
import warnings

REMOVED_IN = "0.2"  # the release that drops every name in these tables


class moved:
    """A module-level __getattr__ for `old_module`: `names` maps an old name to "new.module:new_name"."""

    def __init__(self, old_module: str, names: dict[str, str]) -> None:
        self.old_module, self.names = old_module, dict(names)

    def __call__(self, name: str) -> object:
        target = self.names.get(name)
        if target is None:
            raise AttributeError(f"module {self.old_module!r} has no attribute {name!r}")
        module, _, new_name = target.partition(":")
        warn(f"{self.old_module}.{name}", f"{module}.{new_name}")
        return getattr(importlib.import_module(module), new_name)


def warn(old: str, new: str) -> None:
    """The DeprecationWarning of an old name read: where it is now, and when it goes. Called from the code that
    answers for the old name, so the warning shows the line that read it."""
    warnings.warn(f"{old} is now {new}; the old name goes in bertkit {REMOVED_IN}", DeprecationWarning, stacklevel=3)
