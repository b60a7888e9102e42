"""Command-line flags built from a settings dataclass: one flag per field, its help from the field.

    @dataclass
    class Settings:
        steps: int = opt(300, "optimizer steps")
    settings = parse(Settings, ["--steps", "50"], prog="bertkit pretrain")
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any


def opt(default: Any, help: str, **argparse_kwargs: Any):
    """A dataclass field with the one line of help its flag shows."""
    return dataclasses.field(default=default, metadata={"help": help, **argparse_kwargs})


def parse(cls, argv: list[str], *, prog: str, description: str | None = None):
    """Parse argv into an instance of the dataclass `cls`."""
    parser = argparse.ArgumentParser(prog=prog, description=description or (cls.__doc__ or "").strip())
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        help_text = f.metadata.get("help", "")
        extra = {k: v for k, v in f.metadata.items() if k != "help"}
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                                help=f"{help_text} (default: {f.default})")
            continue
        base = _base_type(kind)
        parser.add_argument(flag, type=base, default=f.default, help=f"{help_text} (default: {f.default})", **extra)
    return cls(**vars(parser.parse_args(argv)))


def _base_type(kind):
    """int | None -> int; str -> str."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if args else kind
