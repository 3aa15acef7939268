"""The settings of every ``wpb`` command: declared once, merged in one place.

A command declares its settings as a ``CommandSettings`` table of ``Setting``s: the name
(the key of its YAML config, the flag's name with ``-`` for ``_``), the default, the help
text and the one function that checks a value. ``CommandSettings.add_to`` makes the flags;
``CommandSettings.resolve`` merges the defaults, then the YAML file of ``--config``, then the
flags that were given, and returns a read-only ``Settings`` object the command works from.
A value is checked by the same function whether it comes from a flag or a file, and a key
the command does not know is refused with the list of those it does.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.setting_values import parse_bool, parse_path
from ..core.settings_files import read_settings
from .inputs import flag_type


@dataclass(frozen=True)
class Setting:
    """One setting of a command.

    ``check(value, where)`` returns the value checked and normalised, or raises ``InputError``
    starting with ``where``; a flag's text and a config's value go through it alike. A ``many``
    setting is a list whose items are checked one by one: given as a positional argument, as
    a flag followed by several values, or (``repeat``) as a flag given several times.
    A ``pairs`` setting is a list of (key, value) pairs (``--set KEY=VALUE``; a mapping in a
    config): the flags' pairs are added to the config's, a flag winning for its key. Items of
    a ``many`` setting, and keys of a ``pairs`` one, may appear once per source.
    ``in_config=False`` keeps a setting on the command line only (where to write, whether to
    replace): a config file describes an experiment, not what may be overwritten.
    """

    name: str
    check: Callable[[Any, str], Any]
    help: str
    default: Any = None
    required: bool = False
    positional: bool = False
    switch: bool = False
    many: bool = False
    repeat: bool = False
    pairs: bool = False
    in_config: bool = True
    flag: str | None = None
    metavar: str | None = None
    default_text: str | None = None

    @property
    def option(self) -> str:
        """How the command line names it: ``--episodes-per-condition``, or ``RUN`` for a positional."""
        if self.positional:
            return self.metavar or self.name.upper()
        return self.flag or "--" + self.name.replace("_", "-")

    def from_file(self, value: Any, where: str) -> Any:
        if self.switch:
            return parse_bool(value, where)
        if not self.many:
            return self.check(value, where)
        if isinstance(value, Mapping):
            if not self.pairs:
                raise InputError(f"{where}: expected a list, got a mapping")
            value = list(value.items())  # KEY: VALUE pairs for a setting whose flag takes KEY=VALUE
        items = value if isinstance(value, list) else [value]
        if not items:
            raise InputError(f"{where}: expected a non-empty list")
        return self.distinct([self.check(item, where) for item in items], where)

    def distinct(self, items: list[Any], where: str) -> list[Any]:
        """``items`` of a ``many`` setting, refusing repeats (of keys, for ``pairs``)."""
        keys = [item[0] for item in items] if self.pairs else [repr(item) for item in items]
        repeated = sorted({str(key) for key in keys if keys.count(key) > 1})
        if repeated:
            what = "key" if self.pairs else "value"
            raise InputError(f"{where}: the {what} {repeated[0]} is given more than once")
        return items


def switch(name: str, help: str, in_config: bool = True) -> Setting:
    """An on/off setting: ``--name`` (and ``--no-name`` where a config may have turned it on)."""
    return Setting(name, parse_bool, help, default=False, switch=True, in_config=in_config)


class Settings(Mapping[str, Any]):
    """A command's settings once merged: read by attribute or by key, never changed.

    ``origin_of(name)`` says where a value came from: ``default``, the config file or the flag.
    """

    __slots__ = ("_values", "_sources", "_command")

    def __init__(self, command: str, values: dict[str, Any], sources: dict[str, str]) -> None:
        object.__setattr__(self, "_command", command)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_sources", dict(sources))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{self._command} has no setting {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the settings of {self._command} are read-only")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def origin_of(self, name: str) -> str:
        return self._sources[name]

    def with_value(self, name: str, value: Any, origin: str) -> Settings:
        """These settings with ``name`` set to ``value``, said to come from ``origin``."""
        if name not in self._values:
            raise KeyError(f"{self._command} has no setting {name!r}")
        return Settings(self._command, {**self._values, name: value}, {**self._sources, name: origin})

    def __repr__(self) -> str:
        return f"Settings({self._command!r}, {self._values!r})"


@dataclass(frozen=True)
class CommandSettings:
    """The settings table of one command, and the one place they are merged.

    ``one_of`` lists groups of settings of which exactly one must be set (``wpb report``'s
    tables). ``config=False``: the command has no ``--config`` (or gives it another meaning).
    """

    command: str
    settings: tuple[Setting, ...]
    one_of: tuple[tuple[str, ...], ...] = ()
    config: bool = True
    by_name: dict[str, Setting] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names) or (self.config and "config" in names):
            raise ValueError(f"{self.command}: a setting is declared twice in {names}")
        hidden = sorted(set(names) & set(dir(Settings)))
        if hidden:  # read by attribute, such a setting would be the method of that name
            raise ValueError(f"{self.command}: settings {hidden} are names of Settings' own methods")
        object.__setattr__(self, "by_name", {s.name: s for s in self.settings})

    @property
    def defaults(self) -> dict[str, Any]:
        return {s.name: s.default for s in self.settings}

    def known_in_config(self) -> list[str]:
        return [s.name for s in self.settings if s.in_config]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """The flags (and positionals) of the table on ``parser``; each flag left out stays None."""
        if self.config:
            parser.add_argument(
                "--config",
                type=flag_type(parse_path),
                action=_Once,
                metavar="FILE",
                help=f"YAML file of settings: {', '.join(self.known_in_config())} (flags override it)",
            )
        groups = {name: parser.add_mutually_exclusive_group() for group in self.one_of for name in group[:1]}
        owner = {name: groups[group[0]] for group in self.one_of for name in group}
        for setting in self.settings:
            target = owner.get(setting.name, parser)
            help = setting.help
            if setting.default is not None and setting.default is not False and not setting.positional:
                help += f" (default: {setting.default_text or _shown(setting.default)})"
            if setting.required and not setting.positional:
                help += " (required)" if not setting.in_config or not self.config else " (required here or in --config)"
            kwargs: dict[str, Any] = {"help": help, "default": None, "dest": setting.name}
            if setting.switch:
                # --no-NAME turns off what a config turned on; a choice among tables needs none.
                negatable = setting.in_config and self.config and setting.name not in owner
                action = argparse.BooleanOptionalAction if negatable else "store_const"
                if action == "store_const":
                    kwargs["const"] = True
                target.add_argument(setting.option, action=action, **kwargs)
                continue
            kwargs["type"] = flag_type(setting.check)
            if setting.metavar:
                kwargs["metavar"] = setting.metavar
            if setting.positional:
                del kwargs["dest"]
                kwargs["metavar"] = setting.option
                target.add_argument(setting.name, nargs="*" if setting.many else "?", **kwargs)
            elif setting.repeat:
                target.add_argument(setting.option, action="append", **kwargs)
            else:  # given twice, a flag would silently keep its last value
                target.add_argument(setting.option, nargs="+" if setting.many else None, action=_Once, **kwargs)

    def resolve(self, args: argparse.Namespace | Mapping[str, Any], *, file_only: bool = False) -> Settings:
        """Defaults, then ``--config``'s file, then the flags given: the command's ``Settings``.

        ``file_only``: the settings of a config file alone, without those only the command line
        gives (``wpb ablate`` reads two ``wpb eval`` configs)."""
        given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
        values, sources = self.defaults, {s.name: "default" for s in self.settings}
        config = given.get("config") if self.config else None
        if config is not None:
            for name, value in self.read_config(config).items():
                values[name], sources[name] = value, f"'{name}:' in {config}"
        for setting in self.settings:
            value = given.get(setting.name)
            if value is None or value == []:
                continue
            source = setting.option
            if setting.many:
                value = setting.distinct(list(value), setting.option)
                if setting.pairs and sources[setting.name] != "default":  # the config's pairs, then the flags'
                    value = list({**dict(values[setting.name]), **dict(value)}.items())
                    source = f"{sources[setting.name]} and {setting.option}"
            values[setting.name], sources[setting.name] = value, source
        for setting in self.settings:
            if file_only and not setting.in_config:
                continue
            if setting.required and values[setting.name] in (None, []):
                if file_only:
                    raise InputError(f"{config}: '{setting.name}:' is required")
                raise InputError(f"{self._how_to_give(setting)} is required")
        for group in self.one_of:
            chosen = [name for name in group if values[name] not in (None, False, [])]
            if len(chosen) != 1:
                options = ", ".join(self.by_name[name].option for name in group)
                got = ", ".join(sources[name] for name in chosen) or "none"
                raise InputError(f"give exactly one of {options} (got {got})")
        return Settings(self.command, values, sources)

    def read_config(self, path: str | Path) -> dict[str, Any]:
        """The checked settings of the YAML file ``path``: unknown keys, and keys only the
        command line may give, are refused by name. ``null`` for a setting whose default is
        None (nothing) is the default."""
        known = self.known_in_config()
        try:
            loaded = read_settings(path, self.by_name)
        except (FileNotFoundError, ValueError) as error:
            message = str(error)
            if "unknown setting" in message:  # list what a config may hold, not the command-line-only keys
                message = message[: message.rindex("; known: ")] + f"; known: {known}"
            raise InputError(message) from None
        line_only = sorted(set(loaded) - set(known))
        if line_only:
            flags = ", ".join(self.by_name[name].option for name in line_only)
            raise InputError(f"{path}: {line_only} can only be given on the command line ({flags}); known: {known}")
        return {
            name: self.by_name[name].from_file(value, f"{path}: {name}")
            for name, value in loaded.items()
            if value is not None or self.by_name[name].default is not None
        }

    def _how_to_give(self, setting: Setting) -> str:
        if setting.in_config and self.config:
            return f"{setting.option} (or '{setting.name}:' in --config FILE)"
        return setting.option


class _Once(argparse.Action):
    """Store a flag's value, refusing the flag a second time (argparse would keep the last)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"argument {option_string}: given more than once; give it once")
        setattr(namespace, self.dest, values)


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)
