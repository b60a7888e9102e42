"""What the quickstart tells its user: progress lines on stderr, and its two errors."""

from __future__ import annotations

import sys

from ..errors import BertkitError


class QuickstartError(BertkitError, ValueError):
    """A quickstart that cannot run as asked (an --out that is not a usable folder, ...)."""


class Stopped(BertkitError):
    """Ctrl-C / SIGTERM during training: the loop saved its state and stopped."""


def say(*parts: object) -> None:
    """A line on stderr, at once: the stages' progress (stdout gets only the results at the end)."""
    print(*parts, file=sys.stderr, flush=True)
