"""`bertkit quickstart`: pretrain, fine-tune, compare with from-scratch, look inside; a report folder."""

from __future__ import annotations

from ..options import parse
from ..quickstart import QuickstartConfig, run


def main(argv: list[str]) -> int:
    return run(parse(QuickstartConfig, argv, prog="bertkit quickstart"), argv)
