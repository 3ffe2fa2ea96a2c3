"""A click group's commands, imported at first use: `gpuslo replay --dry-run` need not import the alert
deliveries, the probes and the database layer that other subcommands are written with (start-up time)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping

import click


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's name → command mapping where an entry may be "module:attribute", imported when read.

    Listing names (`list_commands`, completion of names) imports nothing; reading an entry (running it, `--help`
    of the group) imports its module once. A loaded command whose name is not its key is a wiring mistake and
    raises at load."""

    def __init__(self, commands: Mapping[str, click.Command] | None = None) -> None:
        self._entries: dict[str, click.Command | str] = dict(commands or {})

    def lazy(self, name: str, target: str) -> None:
        """Register `name` as the command at `target` ("package.module:attribute"), imported at first read."""
        self._entries[name] = target

    def __getitem__(self, name: str) -> click.Command:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != name:
                raise TypeError(f"{entry} is not the click command {name!r}")
            self._entries[name] = entry = command
        return entry

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._entries[name] = command

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def make_lazy(group: click.Group, entries: Mapping[str, str]) -> None:
    """Give `group` lazily imported subcommands: name → "module:attribute"."""
    commands = LazyCommands(group.commands)
    for name, target in entries.items():
        commands.lazy(name, target)
    group.commands = commands
