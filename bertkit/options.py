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
A misspelt flag is argparse's usage error with the closest flag named (`--lrr`: did you mean --lr?), before
any required flag is said to be missing; closest() is the one "did you mean" rule of flags, settings files,
keyword arguments and command names (bertkit.cli).

The annotation decides how a flag parses:
    int, float, str, X | None     one value of that type; None is the default only (no flag spells it)
    Literal["a", "b"]             choices a, b: argparse refuses anything else (Literal[1, 2]: int choices)
    an Enum subclass              choices: its members' values; the field holds the member
    bool, bool | None             --flag / --no-flag, taking no value; unset: the default (None: tri-state).
                                  `--flag false` is refused rather than read as --flag and a text "false"
    list[X]                       one X per word (with nargs)
A registry (a dict of recipes, tasks, presets) cannot be a Literal: its field stays `str` with
choices=list(REGISTRY), the keys themselves, so the flag's choices cannot drift from the registry.

The same settings come from a file or from Python, checked by the same rules:
    bertkit finetune --config run.yaml --lr 3e-5        # the file's settings; flags given win over it
    settings_of(FinetuneConfig, where="bertkit.finetune", lr=3e-5, task="tag")
    write_settings(cfg, "runs/x/settings.yaml", command="finetune")   # what --config reads back
A settings file is YAML (JSON is YAML too): one key per field, named as the field (seq_len) or its
flag (seq-len). YAML because it is what training recipes are kept in (torchtune, Lightning, Hydra),
reads like the flags, holds comments, and PyYAML reads and writes it; TOML would need a second
library to write it back. An unknown key, or a value the flag would refuse, is an error naming the
file, the key and, for a misspelt key or choice, the closest known one. A settings file is plain setting: value
lines, so reading one refuses what only builds more than the file says: a key given twice (seq-len and seq_len
are one key), YAML anchors, aliases and merge keys (nine levels of nine aliases are 387 million values from
500 bytes), values nested deeper than MAX_CONFIG_DEPTH, and files over MAX_CONFIG_BYTES (64 KB); each naming the
file and the line. An error shows a value cut short (shown), however large the value.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import functools
import os
import re
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, overload

from .errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_OURS = ("help", "positional", "may_change_on_resume", "exclusive")  # metadata keys that are not argparse's
_BOOL_WORDS = {"true", "false", "yes", "no"}  # a word after a bool flag that must be meant as its value
MAX_CONFIG_BYTES = 1 << 16  # a settings file is a few hundred bytes (a run folder's: about 1 KB); 64 KB is not one
MAX_CONFIG_DEPTH = 8  # a file's mapping -> a list -> its values is as deep as settings go; this leaves room, not more
SHOWN_CHARS = 60  # what an error message shows of a value (shown) at most
CONFIG_HELP = (
    "read settings from this YAML file (keys: the flags' names, e.g. seq_len: 256; a run folder's "
    "settings.yaml reruns that run); flags given here win over the file"
)


T = TypeVar("T")
SettingsT = TypeVar("SettingsT", bound="DataclassInstance")  # a settings dataclass


@overload
def opt(
    default: Callable[[], T],
    help: str,
    *,
    positional: bool = False,
    may_change_on_resume: bool = False,
    exclusive: str | None = None,
    **argparse_kwargs: Any,
) -> T: ...


@overload
def opt(
    default: T,
    help: str,
    *,
    positional: bool = False,
    may_change_on_resume: bool = False,
    exclusive: str | None = None,
    **argparse_kwargs: Any,
) -> T: ...


def opt(
    default: Any,
    help: str,
    *,
    positional: bool = False,
    may_change_on_resume: bool = False,
    exclusive: str | None = None,
    **argparse_kwargs: Any,
) -> Any:
    """A dataclass field with the one line of help its flag shows.

    positional: an argument without a flag (e.g. the texts of `bertkit predict`); a callable
    default (list) is a default factory. may_change_on_resume: a setting that does not change what
    a resumed run computes (its log interval, its device), so --resume may take a new value.
    exclusive: fields naming the same group may not be given together (--trace | --mlm).
    Other keywords go to argparse's add_argument (nargs, metavar, required; choices only for a
    registry's keys: a fixed list of words is a Literal annotation).
    """
    meta = {
        "help": help,
        "positional": positional,
        "may_change_on_resume": may_change_on_resume,
        "exclusive": exclusive,
        **argparse_kwargs,
    }
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def may_change_on_resume(cls: type[DataclassInstance]) -> set[str]:
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


def flag_kind(annotation: object) -> FlagKind:
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


def closest(word: str, names: Iterable[str]) -> str | None:
    """The known name closest to a misspelt `word` (difflib's, similarity >= 0.6), else None: the one rule for
    "did you mean" of flags, settings files, keyword arguments and command names."""
    found = difflib.get_close_matches(word, list(names), n=1)
    return found[0] if found else None


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """ "; did you mean 'name'?" with closest(word, names), or "" when nothing is close: a message's ending."""
    near = closest(word, names)
    return f"; did you mean {near!r}?" if near is not None else ""


class _Parser(argparse.ArgumentParser):
    """argparse, refusing `--flag false` for a switch (it would set --flag and pass "false" on as a text), and
    naming the closest flag to a misspelt one, before a required flag that is missing (it may be that one)."""

    _words: tuple[str, ...] = ()  # what parse_known_args parses last: error() looks for misspelt flags in it
    _looking = False  # error() is parsing `_words` again: an error there is argparse's own

    def parse_known_args(  # one signature for argparse's overloads: the namespace passes on as given
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        args = sys.argv[1:] if args is None else list(args)
        self._words = tuple(args)
        for word, after in zip(args, args[1:]):
            if word == "--":
                break
            switch = self._switch(word)
            if switch is not None and after.lower() in _BOOL_WORDS:
                self.error(
                    f"argument {word}: takes no value ({after!r}): write "
                    f"{' or '.join(switch.option_strings)} (a text {after!r} goes before the flags, or "
                    "after --)"
                )
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """argparse's usage line and error (exit status 2); words no flag takes are named first, each misspelt flag
        with its closest (options.closest), also where argparse would have said a required flag is missing."""
        if message.startswith(("unrecognized arguments:", "the following arguments are required:")):
            unknown = self._unknown()
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}{self._did_you_mean(unknown)}"
        message += self._closest_choice(message)
        super().error(message)

    def _closest_choice(self, message: str) -> str:
        """The "; did you mean 'classify'?" of argparse's "argument --task: invalid choice: 'clasify' ...", from the
        flag's own choices; "" for any other message."""
        found = re.match(r"argument (\S+): invalid choice: '?(.*?)'? \(choose from", message)
        action = self._option_string_actions.get(found.group(1)) if found else None
        if found is None or action is None or action.choices is None:
            return ""
        return did_you_mean(found.group(2), [c for c in action.choices if isinstance(c, str)])

    def _unknown(self) -> list[str]:
        """The words of the last parse that no flag or positional takes, parsed again with nothing required."""
        if self._looking:
            return []
        saved = [(action, action.required) for action in self._actions]
        self._looking = True
        try:
            for action in self._actions:
                action.required = False
            return self.parse_known_args(list(self._words))[1]
        finally:
            self._looking = False
            for action, required in saved:
                action.required = required

    def _did_you_mean(self, unknown: list[str]) -> str:
        """The "; did you mean --lr?" of unknown flags that have a close one ("--lr (for --lrr), ..." for several)."""
        flags = {s[2:]: s for s in self._option_string_actions if s.startswith("--")}
        pairs = []
        for word in unknown:
            name = word.partition("=")[0]
            near = closest(name.lstrip("-"), flags) if name.startswith("-") and name.lstrip("-") else None
            if near is not None:
                pairs.append((flags[near], name))
        if not pairs:
            return ""
        if len(pairs) == 1:
            return f"; did you mean {pairs[0][0]}?"
        return "; did you mean " + ", ".join(f"{flag} (for {typed})" for flag, typed in pairs) + "?"

    def _switch(self, word: str) -> argparse.Action | None:
        """The --x / --no-x action `word` names (whole, or abbreviated as argparse allows), else None."""
        if not word.startswith("--"):
            return None
        names = (
            [word]
            if word in self._option_string_actions
            else [s for s in self._option_string_actions if s.startswith(word)]
            if self.allow_abbrev
            else []
        )
        action = self._option_string_actions[names[0]] if len(names) == 1 else None
        return action if isinstance(action, argparse.BooleanOptionalAction) else None


class _ToEnum(argparse.Action):
    """Stores the Enum member of a word (argparse has checked the word against the values)."""

    def __init__(self, *args: Any, enum_type: type[enum.Enum], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.enum_type = enum_type

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        convert = self.enum_type
        value = (
            None if values is None else [convert(v) for v in values] if isinstance(values, list) else convert(values)
        )
        setattr(namespace, self.dest, value)


def parser_for(cls: type[DataclassInstance], *, prog: str, **parser_kwargs: Any) -> argparse.ArgumentParser:
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
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:  # opt() gives every field a default or a default factory
            raise TypeError(f"{cls.__name__}.{f.name}: no default; declare the field with opt()")
        name = f.name if f.metadata.get("positional") else "--" + f.name.replace("_", "-")
        target.add_argument(name, **_argument(cls, f, hints[f.name], default))
    if "config" in hints:
        raise TypeError(f"{cls.__name__}.config: the name of --config FILE, which every command has; rename the field")
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    return parser


def _argument(
    cls: type[DataclassInstance], f: dataclasses.Field[Any], annotation: object, default: Any
) -> dict[str, Any]:
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
        return dict(
            action=argparse.BooleanOptionalAction, default=default, help=f"{help_text} (default: {default})", **extra
        )
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


def parse(cls: type[SettingsT], argv: list[str], *, prog: str, **parser_kwargs: Any) -> SettingsT:
    """Parse argv into an instance of the dataclass `cls`. With --config FILE the file's settings
    (read_settings) are the defaults and the flags given win over them (one of an exclusive group given
    as a flag drops the file's others). A settings class may have a method `problem()` returning what is
    wrong with a combination of flags (None: nothing): argparse then prints the usage and that message
    and exits with status 2, as for any bad flag; a bad file is a ConfigError."""
    parser = parser_for(cls, prog=prog, **parser_kwargs)
    path = _config_path(argv)
    if path is not None:
        given = _given(parser, argv)  # the flags checked before the file is read
        from_file = read_settings(cls, path)
        groups = {
            f.metadata["exclusive"] for f in dataclasses.fields(cls) if f.name in given and f.metadata.get("exclusive")
        }
        from_file = {
            k: v
            for k, v in from_file.items()
            if k not in given and cls.__dataclass_fields__[k].metadata.get("exclusive") not in groups
        }
        for action in parser._actions:
            if action.dest in from_file:
                action.required = False
        parser.set_defaults(**from_file)
    values = vars(parser.parse_args(argv))
    values.pop("config")
    settings = cls(**values)
    problem = settings.problem() if hasattr(settings, "problem") else None
    if problem:
        parser.error(problem)
    return settings


def _config_path(argv: list[str]) -> str | None:
    """The FILE of --config FILE / --config=FILE in argv (or an abbreviation argparse takes: --conf), before a --."""
    for i, word in enumerate(argv):
        if word == "--":
            break
        flag, eq, value = word.partition("=")
        if len(flag) >= len("--conf") and "--config".startswith(flag):
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The fields argv gives on the command line (parsed, bad flags refused as always, with every default
    suppressed and nothing required: the file may give those)."""
    saved = [(a, a.default, a.required) for a in parser._actions]
    try:
        for action in parser._actions:
            action.default, action.required = argparse.SUPPRESS, False
        return set(vars(parser.parse_args(argv))) - {"config", "help"}
    finally:
        for action, default, required in saved:
            action.default, action.required = default, required


# ----- settings from a file or from Python -------------------------------------------------------
def read_settings(cls: type[DataclassInstance], path: str) -> dict[str, Any]:
    """The settings of YAML file `path` for dataclass `cls`, checked (check_settings); ConfigError naming
    the file (and the line, where there is one) for one that is missing, larger than MAX_CONFIG_BYTES, not
    YAML, not a mapping of settings, or using what _settings_loader refuses."""
    import yaml

    where = f"--config {path}"
    text = _config_text(path, where)
    try:
        values = yaml.load(text, Loader=_settings_loader())  # a SafeLoader taking less still
    except _Refused as e:
        raise ConfigError(f"{where}: line {e.line}: {e.message}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = _cut(str(getattr(e, "problem", None) or e), 2 * SHOWN_CHARS)
        raise ConfigError(f"{where}{at}: not YAML ({problem})") from None
    except ValueError as e:  # a value YAML reads but Python cannot hold: an int of 5,000 digits, a 13th month
        raise ConfigError(
            f"{where}: a value that cannot be read ({_cut(str(e).split(';')[0], 2 * SHOWN_CHARS)})"
        ) from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(
            f"{where}: holds a {type(values).__name__}; a settings file is a mapping of "
            "setting: value lines (e.g. lr: 3.0e-5)"
        )
    return check_settings(cls, values, where)


def _config_text(path: str, where: str) -> str:
    """The text of settings file `path`, read only up to MAX_CONFIG_BYTES: a larger file is refused unread."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a folder; pass the settings file (a run folder's is settings.yaml)") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{where}: {max(size, len(data)):,} bytes; a settings file is at most 64 KB "
            f"({MAX_CONFIG_BYTES:,} bytes) of setting: value lines: pass the settings file, not a data file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (byte {e.start})") from None


class _Refused(Exception):
    """What _settings_loader refuses in a settings file, at `line` (counted from 1)."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.line = mark.line + 1
        self.message = message


NO_ALIASES = (
    "a settings file takes no anchors, aliases or merge keys (they can build far more than the file holds): "
    "write each value out"
)


@functools.cache
def _settings_loader() -> type:
    """PyYAML's SafeLoader for a settings file, refusing (_Refused) anchors, aliases and merge keys, values
    nested deeper than MAX_CONFIG_DEPTH, and a key given twice in a mapping (keys compared as setting names:
    seq-len is seq_len). Built on first use, so that yaml loads only when a file is read."""
    import yaml

    class SettingsLoader(yaml.SafeLoader):
        depth = 0  # of the node being composed: the document's mapping is 1

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                raise _Refused(event.start_mark, f"a YAML alias (*{_cut(event.anchor, 40)}): {NO_ALIASES}")
            if event.anchor is not None:
                raise _Refused(event.start_mark, f"a YAML anchor (&{_cut(event.anchor, 40)}): {NO_ALIASES}")
            if self.depth == MAX_CONFIG_DEPTH:  # the composer recurses: refused long before Python's limit
                raise _Refused(
                    event.start_mark,
                    f"nested deeper than {MAX_CONFIG_DEPTH} levels; a setting's value is one value or a list of them",
                )
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_mapping_node(self, anchor: Any) -> Any:
            node = super().compose_mapping_node(anchor)
            _refuse_twice(node.value)
            return node

    return SettingsLoader


def _refuse_twice(pairs: list[tuple[Any, Any]]) -> None:
    """_Refused for a merge key (<<) among a mapping's (key node, value node) pairs, or a key given twice."""
    seen: dict[str, Any] = {}
    for key, _value in pairs:
        if key.tag == "tag:yaml.org,2002:merge":
            raise _Refused(key.start_mark, f"a YAML merge key (<<): {NO_ALIASES}")
        if not isinstance(key.value, str):  # a list or mapping as a key: yaml refuses it when building the dict
            continue
        name = key.value.removeprefix("--").replace("-", "_")
        first = seen.setdefault(name, key)
        if first is key:
            continue
        lines = first.start_mark.line + 1, key.start_mark.line + 1
        both = (
            f"line {lines[0]} and line {lines[1]}"
            if first.value == key.value
            else f"line {lines[0]} as {_cut(first.value, 40)}, line {lines[1]} as {_cut(key.value, 40)}"
        )
        raise _Refused(key.start_mark, f"{_cut(name, 40)} is given twice ({both}); keep one")


def check_settings(cls: type[DataclassInstance], values: dict[Any, Any], where: str) -> dict[str, Any]:
    """{field: value} of `values` (keys: field names or their flags' spellings, seq-len), each checked as
    its flag would parse it: a known key, a value of the field's type, one of its choices (an Enum's
    value becomes its member). ConfigError naming `where` and the key otherwise."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = str(key).removeprefix("--").replace("-", "_")
        if name not in fields:
            raise ConfigError(
                f"{where}: unknown setting {shown(key)}{did_you_mean(name, fields)} (known: {known(list(fields))})"
            )
        out[name] = _checked(fields[name], hints[name], value, f"{where}: {key}")
    groups: dict[str, str] = {}
    for name in out:
        group = fields[name].metadata.get("exclusive")
        if group and out[name] not in (None, False) and group in groups:
            raise ConfigError(f"{where}: {groups[group]} and {name} cannot be given together")
        if group and out[name] not in (None, False):
            groups[group] = name
    return out


def _checked(f: dataclasses.Field[Any], annotation: object, value: Any, where: str) -> Any:
    """`value` as field `f` holds it, or a ConfigError saying what the field takes."""
    kind = flag_kind(annotation)
    if value is None:
        if kind.optional or f.default is None:
            return None
        raise ConfigError(f"{where}: null, but it needs a value")
    if kind.many:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: {shown(value)} is not a list; write [a, b] or one '- item' line each")
        return [_one(f, kind, v, where) for v in value]
    return _one(f, kind, value, where)


def _one(f: dataclasses.Field[Any], kind: FlagKind, value: Any, where: str) -> Any:
    """One `value` as field `f` of kind `kind` holds it, or a ConfigError saying what it takes (and the closest
    choice to a misspelt one)."""
    expected = kind.type.__name__
    if kind.type is bool:
        ok = isinstance(value, bool)
    elif kind.type is float:  # YAML reads 5e-5 (no dot) as a text: it is still the number the flag would take
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind.type is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind.type is str:
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, kind.type)
    if not ok:
        raise ConfigError(f"{where}: {shown(value)} is not {'a' if expected[0] not in 'aeiou' else 'an'} {expected}")
    choices = kind.choices if kind.choices is not None else f.metadata.get("choices")
    if choices is not None and value not in tuple(choices):
        words = [c for c in choices if isinstance(c, str)]
        close = did_you_mean(value, words) if isinstance(value, str) else ""
        raise ConfigError(f"{where}: {shown(value)} is not one of {', '.join(map(repr, choices))}{close}")
    return kind.enum(value) if kind.enum is not None else value


def settings_of(cls: type[SettingsT], settings: SettingsT | None = None, /, *, where: str, **values: Any) -> SettingsT:
    """An instance of settings dataclass `cls` from Python: `settings` (an instance, or None for the
    defaults) with `values` (keyword arguments named as its fields) checked as a settings file's are;
    fields whose flag is required must be given; problem() raises. ConfigError naming `where` otherwise."""
    if settings is not None and not isinstance(settings, cls):
        raise ConfigError(f"{where}: takes a {cls.__name__} or keyword arguments, not a {type(settings).__name__}")
    checked = check_settings(cls, values, where)
    out = dataclasses.replace(settings, **checked) if settings is not None else cls(**checked)
    missing = [
        f.name for f in dataclasses.fields(cls) if f.metadata.get("required") and getattr(out, f.name) in ("", None, [])
    ]
    if missing:
        raise ConfigError(f"{where}: {', '.join(f'{m}=' for m in missing)} required")
    problem = out.problem() if hasattr(out, "problem") else None
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return out


def settings_dict(cfg: DataclassInstance, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """{field: value} of settings `cfg` as a settings file holds them (an Enum as its value)."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg) if f.name not in leave_out}


@functools.cache
def _plain_dumper() -> type:
    """PyYAML's SafeDumper writing every value out, never as an alias of an equal one: what read_settings takes."""
    import yaml

    class PlainDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return PlainDumper


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def write_settings(cfg: DataclassInstance, path: str, *, command: str, leave_out: tuple[str, ...] = ()) -> str:
    """Settings `cfg` as a YAML file that `bertkit COMMAND --config path` reads back to the same settings
    (written atomically); returns the path."""
    import yaml

    from .files import atomic_write_text

    header = (
        f"# bertkit {command} settings, as the run used them; run it again with\n"
        f"#   bertkit {command} --config {os.path.basename(path)} --out NEW_FOLDER\n"
    )
    body = yaml.dump(
        settings_dict(cfg, leave_out),
        Dumper=_plain_dumper(),
        allow_unicode=True,
        sort_keys=False,
        default_flow_style=False,
    )
    atomic_write_text(path, header + body)
    return path


_SHOWN = reprlib.Repr()  # bounded at every level: a list shows 4 items, 2 levels deep; a text 60 characters
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = _SHOWN.maxdict = 4
_SHOWN.maxlevel = 2
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = SHOWN_CHARS


def shown(value: Any) -> str:
    """repr(value) cut to about SHOWN_CHARS characters, for an error message, at a cost that does not grow with the
    value: a list of 9 aliases of lists 9 deep (387 million items) shows as [[[...], ...], ...]."""
    try:
        return _cut(_SHOWN.repr(value), 2 * SHOWN_CHARS)
    except ValueError:  # an int past Python's digit limit for str() (sys.set_int_max_str_digits)
        return f"<{type(value).__name__}: too long to show>"


def known(names: list[str]) -> str:
    """The names a setting may have, for an error: all of them while short, else the first ones and how many there
    are (the command's --help lists them all)."""
    text = ", ".join(names)
    return text if len(text) <= 6 * SHOWN_CHARS else f"{_cut(text, 5 * SHOWN_CHARS)} ({len(names)} in all, see --help)"


def _cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and an ellipsis."""
    return text if len(text) <= limit else text[:limit] + "..."


def _is_union(annotation: object) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)
