"""Command-line flags built from a settings dataclass: one flag per field, its help from the field.

    @dataclass
    class Settings:
        steps: int = opt(300, "optimizer steps", may_change_on_resume=True)
        precision: Literal["auto", "fp32", "bf16"] = opt("auto", "autocast dtype")   # --precision {auto,fp32,bf16}
        normalize: bool | None = opt(None, "L2-normalize; None: as the folder says")  # --normalize / --no-normalize
        texts: list[str] = opt(list, "inputs, one per argument", positional=True, nargs="*")
    settings = parse(Settings, ["--steps", "50"], prog="bertkit pretrain")

Every command (pretrain, finetune, evaluate, predict) declares its settings this way, so a
field means the same in Python and on the command line, and a subclass shares its parent's flags.

The annotation decides how a flag parses:
    int, float, str, X | None     one value of that type; None is the default only (no flag spells it)
    Literal["a", "b"]             choices a, b: argparse refuses anything else (Literal[1, 2]: int choices)
    an Enum subclass              choices: its members' values; the field holds the member
    bool, bool | None             --flag / --no-flag, taking no value; unset: the default (None: tri-state).
                                  `--flag false` is refused rather than read as --flag and a text "false"
    list[X]                       one X per word (with nargs)
A registry (a dict of recipes, tasks, presets) cannot be a Literal: its field stays `str` with
choices=list(REGISTRY), the keys themselves, so the flag's choices cannot drift from the registry.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
import types
import typing
from typing import Any, Literal

_OURS = ("help", "positional", "may_change_on_resume", "exclusive")  # metadata keys that are not argparse's
_BOOL_WORDS = {"true", "false", "yes", "no"}  # a word after a bool flag that must be meant as its value


def opt(default: Any, help: str, *, positional: bool = False, may_change_on_resume: bool = False,
        exclusive: str | None = None, **argparse_kwargs: Any):
    """A dataclass field with the one line of help its flag shows.

    positional: an argument without a flag (e.g. the texts of `bertkit predict`); a callable
    default (list) is a default factory. may_change_on_resume: a setting that does not change what
    a resumed run computes (its log interval, its device), so --resume may take a new value.
    exclusive: fields naming the same group may not be given together (--trace | --mlm).
    Other keywords go to argparse's add_argument (nargs, metavar, required; choices only for a
    registry's keys: a fixed list of words is a Literal annotation).
    """
    meta = {"help": help, "positional": positional, "may_change_on_resume": may_change_on_resume,
            "exclusive": exclusive, **argparse_kwargs}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def may_change_on_resume(cls) -> set[str]:
    """The fields of settings dataclass `cls` a resumed run may change (opt(..., may_change_on_resume=True))."""
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("may_change_on_resume")}


@dataclasses.dataclass(frozen=True)
class FlagKind:
    """What a field's annotation says about its flag (`flag_kind`)."""

    type: Any  # converts one command-line word (str, int, float, ...); bool: a --x / --no-x switch
    choices: tuple | None = None  # from a Literal or an Enum
    enum: type[enum.Enum] | None = None  # an Enum field: words are its values, the field holds members
    optional: bool = False  # X | None
    many: bool = False  # list[X]


def flag_kind(annotation) -> FlagKind:
    """The flag of a field annotated `annotation` (see the module docstring); TypeError for one no flag can parse."""
    optional = False
    if _is_union(annotation):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{annotation}: a flag parses one type (X or X | None), not a union of several")
        annotation, optional = args[0], True
    many = typing.get_origin(annotation) is list
    if many:
        (annotation,) = typing.get_args(annotation) or (str,)
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        kinds = {type(v) for v in values}
        if len(kinds) != 1 or not kinds <= {str, int, float}:
            raise TypeError(f"{annotation}: a Literal flag takes values of one type, str, int or float")
        return FlagKind(kinds.pop(), tuple(values), optional=optional, many=many)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = tuple(member.value for member in annotation)
        kinds = {type(v) for v in values}
        if len(kinds) != 1 or not kinds <= {str, int, float}:
            raise TypeError(f"{annotation.__name__}: an Enum flag needs values of one type, str, int or float")
        return FlagKind(kinds.pop(), values, enum=annotation, optional=optional, many=many)
    if annotation is bool and many:
        raise TypeError("list[bool]: a bool flag is a --x / --no-x switch, not a list")
    return FlagKind(annotation, optional=optional, many=many)


class _Parser(argparse.ArgumentParser):
    """argparse, refusing `--flag false` for a switch (it would set --flag and pass "false" on as a text)."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        for word, after in zip(args, args[1:]):
            if word == "--":
                break
            switch = self._switch(word)
            if switch is not None and after.lower() in _BOOL_WORDS:
                self.error(f"argument {word}: takes no value ({after!r}): write "
                           f"{' or '.join(switch.option_strings)} (a text {after!r} goes before the flags, or "
                           "after --)")
        return super().parse_known_args(args, namespace)

    def _switch(self, word: str) -> argparse.Action | None:
        """The --x / --no-x action `word` names (whole, or abbreviated as argparse allows), else None."""
        if not word.startswith("--"):
            return None
        names = [word] if word in self._option_string_actions else \
            [s for s in self._option_string_actions if s.startswith(word)] if self.allow_abbrev else []
        action = self._option_string_actions[names[0]] if len(names) == 1 else None
        return action if isinstance(action, argparse.BooleanOptionalAction) else None


class _ToEnum(argparse.Action):
    """Stores the Enum member of a word (argparse has checked the word against the values)."""

    def __init__(self, *args, enum_type: type[enum.Enum], **kwargs):
        super().__init__(*args, **kwargs)
        self.enum_type = enum_type

    def __call__(self, parser, namespace, values, option_string=None):
        convert = self.enum_type
        value = None if values is None else [convert(v) for v in values] if isinstance(values, list) \
            else convert(values)
        setattr(namespace, self.dest, value)


def parser_for(cls, *, prog: str, **parser_kwargs: Any) -> argparse.ArgumentParser:
    """The argparse parser of the dataclass `cls`: --flag per field, positionals where marked; the
    description is the class docstring unless parser_kwargs say otherwise (epilog, usage, ...)."""
    parser_kwargs.setdefault("description", (cls.__doc__ or "").strip())
    parser = _Parser(prog=prog, **parser_kwargs)
    hints = typing.get_type_hints(cls)
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for f in dataclasses.fields(cls):
        exclusive = f.metadata.get("exclusive")
        if exclusive and exclusive not in groups:
            groups[exclusive] = parser.add_mutually_exclusive_group()
        target = groups[exclusive] if exclusive else parser
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        name = f.name if f.metadata.get("positional") else "--" + f.name.replace("_", "-")
        target.add_argument(name, **_argument(cls, f, hints[f.name], default))
    return parser


def _argument(cls, f: dataclasses.Field, annotation, default) -> dict[str, Any]:
    """add_argument's keywords for field `f` of `cls`."""
    where = f"{cls.__name__}.{f.name}"
    try:
        kind = flag_kind(annotation)
    except TypeError as e:
        raise TypeError(f"{where}: {e}") from None
    help_text = f.metadata.get("help", "")
    extra = {k: v for k, v in f.metadata.items() if k not in _OURS}
    positional = f.metadata.get("positional")
    if kind.type is bool:
        if positional:
            raise TypeError(f"{where}: a bool is a --x / --no-x switch, not a positional argument")
        return dict(action=argparse.BooleanOptionalAction, default=default,
                    help=f"{help_text} (default: {default})", **extra)
    if kind.choices is not None:
        if "choices" in extra:
            raise TypeError(f"{where}: its choices come from the annotation {annotation}; drop choices=")
        extra["choices"] = kind.choices
    if "choices" in extra:  # a wrong default would pass unchecked (argparse checks only what is typed)
        extra["choices"] = tuple(extra["choices"])
        for value in default if isinstance(default, list) else [default]:
            shown = value.value if isinstance(value, enum.Enum) else value
            if value is not None and shown not in extra["choices"]:
                raise TypeError(f"{where}: the default {shown!r} is not one of its choices {extra['choices']}")
    if kind.enum is not None:
        extra.update(action=_ToEnum, enum_type=kind.enum)
    keywords = dict(type=kind.type, default=default, **extra)
    if positional:
        return dict(help=help_text, **keywords)
    shown = default.value if isinstance(default, enum.Enum) else default
    suffix = "" if extra.get("required") or default is None else f" (default: {shown})"
    return dict(help=help_text + suffix, **keywords)


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


def _is_union(annotation) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)
