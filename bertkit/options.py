"""Command-line flags built from a settings dataclass: one flag per field, its help from the field.

    @dataclass
    class Settings:
        steps: int = opt(300, "optimizer steps", may_change_on_resume=True)
        texts: list[str] = opt(list, "inputs, one per argument", positional=True, nargs="*")
    settings = parse(Settings, ["--steps", "50"], prog="bertkit pretrain")

Every command (pretrain, finetune, evaluate, predict) declares its settings this way, so a
field means the same in Python and on the command line, and a subclass shares its parent's flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

_OURS = ("help", "positional", "may_change_on_resume", "exclusive")  # metadata keys that are not argparse's


def opt(default: Any, help: str, *, positional: bool = False, may_change_on_resume: bool = False,
        exclusive: str | None = None, **argparse_kwargs: Any):
    """A dataclass field with the one line of help its flag shows.

    positional: an argument without a flag (e.g. the texts of `bertkit predict`); a callable
    default (list) is a default factory. may_change_on_resume: a setting that does not change what
    a resumed run computes (its log interval, its device), so --resume may take a new value.
    exclusive: fields naming the same group may not be given together (--trace | --mlm).
    Other keywords go to argparse's add_argument (choices, nargs, metavar, required).
    """
    meta = {"help": help, "positional": positional, "may_change_on_resume": may_change_on_resume,
            "exclusive": exclusive, **argparse_kwargs}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def may_change_on_resume(cls) -> set[str]:
    """The fields of settings dataclass `cls` a resumed run may change (opt(..., may_change_on_resume=True))."""
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("may_change_on_resume")}


def parser_for(cls, *, prog: str, **parser_kwargs: Any) -> argparse.ArgumentParser:
    """The argparse parser of the dataclass `cls`: --flag per field, positionals where marked; the
    description is the class docstring unless parser_kwargs say otherwise (epilog, usage, ...)."""
    parser_kwargs.setdefault("description", (cls.__doc__ or "").strip())
    parser = argparse.ArgumentParser(prog=prog, **parser_kwargs)
    hints = typing.get_type_hints(cls)
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        exclusive = f.metadata.get("exclusive")
        if exclusive and exclusive not in groups:
            groups[exclusive] = parser.add_mutually_exclusive_group()
        target = groups[exclusive] if exclusive else parser
        help_text = f.metadata.get("help", "")
        extra = {k: v for k, v in f.metadata.items() if k not in _OURS}
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if f.metadata.get("positional"):
            target.add_argument(f.name, type=_base_type(kind), default=default, help=help_text, **extra)
            continue
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            target.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=f"{help_text} (default: {default})")
            continue
        shown = "" if extra.get("required") or default is None else f" (default: {default})"
        target.add_argument(flag, type=_base_type(kind), default=default, help=help_text + shown, **extra)
    return parser


def parse(cls, argv: list[str], *, prog: str, **parser_kwargs: Any):
    """Parse argv into an instance of the dataclass `cls`. A settings class may have a method
    `problem()` returning what is wrong with a combination of flags (None: nothing): argparse then
    prints the usage and that message and exits with status 2, as for any bad flag."""
    parser = parser_for(cls, prog=prog, **parser_kwargs)
    settings = cls(**vars(parser.parse_args(argv)))
    problem = settings.problem() if hasattr(settings, "problem") else None
    if problem:
        parser.error(problem)
    return settings


def _base_type(kind):
    """int | None -> int; str -> str; list[str] -> str (one element)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) is list:
        return args[0]
    base = args[0] if args else kind
    return typing.get_args(base)[0] if typing.get_origin(base) is list else base
