"""Read rulebook YAML safely into plain data plus the line/column of every key and value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64  # nesting of YAML mappings and sequences; the shipped rulebooks need 8
_BAD_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")  # controls, lone surrogates
Path_ = tuple[str | int, ...]

_STANDARD_TAGS = {
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")
}


@dataclass(frozen=True)
class Document:
    """A parsed YAML file: plain `data`, and where each value (`marks`) and mapping key (`key_marks`) is."""

    data: Any
    filename: str
    marks: Mapping[Path_, Location] = field(default_factory=dict)
    key_marks: Mapping[Path_, Location] = field(default_factory=dict)
    styles: Mapping[Path_, str | None] = field(default_factory=dict)
    multiline: frozenset[Path_] = frozenset()

    def at(self, path: Path_, *, key: bool = False) -> Location:
        """Where the node at `path` (or its key) is; falls back to the nearest enclosing node."""
        path = tuple(path)
        if key and path in self.key_marks:
            return self.key_marks[path]
        while path:
            if path in self.marks:
                return self.marks[path]
            path = path[:-1]
        return self.marks.get((), Location(self.filename, 1, 1))


class _Refused(Exception):
    """A node the rulebook loader will not accept (alias, anchor)."""

    def __init__(self, mark: yaml.Mark, message: str):
        super().__init__(message)
        self.mark = mark
        self.message = message


class _MarkedLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases while composing (which also stops alias bombs), and nesting
    deeper than MAX_DEPTH (composing recurses once per level)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent) and self.depth >= MAX_DEPTH:
            raise _Refused(event.start_mark, f"nesting deeper than {MAX_DEPTH} levels is not allowed in a rulebook")
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(
                event.start_mark,
                f"YAML alias '*{event.anchor}' is not allowed: rulebooks use "
                "'lists' and 'macros' for reuse (this also rules out alias bombs)",
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise _Refused(
                event.start_mark,
                f"YAML anchor '&{anchor}' is not allowed: rulebooks use "
                "'lists' and 'macros' for reuse (this also rules out alias bombs)",
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _loc(filename: str, mark: yaml.Mark) -> Location:
    return Location(filename, mark.line + 1, mark.column + 1)


class _Converter:
    """Turns a composed node graph into plain data, recording marks and collecting problems."""

    def __init__(self, loader: _MarkedLoader, filename: str):
        self.loader = loader
        self.filename = filename
        self.marks: dict[Path_, Location] = {}
        self.key_marks: dict[Path_, Location] = {}
        self.styles: dict[Path_, str | None] = {}
        self.multiline: set[Path_] = set()
        self.problems: list[RulebookProblem] = []

    def refuse(self, node: yaml.Node, message: str) -> None:
        self.problems.append(RulebookProblem(_loc(self.filename, node.start_mark), message))

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        self.marks[path] = _loc(self.filename, node.start_mark)
        if node.tag not in _STANDARD_TAGS:
            self.refuse(node, f"YAML tag '{node.tag}' is not allowed in a rulebook (only plain YAML is)")
            return None
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
        self.styles[path] = node.style
        if node.start_mark.line != node.end_mark.line or node.style in ("|", ">"):
            self.multiline.add(path)
        if not self._clean(node, node.value):
            return None
        if node.tag.endswith((":timestamp", ":merge")):
            return node.value  # keep dates as written; JSON has no date type
        try:
            return self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, KeyError, TypeError, OverflowError) as exc:  # e.g. `!!int abc`
            self.refuse(node, f"value {node.value[:40]!r} is not a valid {node.tag.rsplit(':', 1)[-1]} ({exc})")
            return None

    def _clean(self, node: yaml.Node, text: str) -> bool:
        """Refuse a string holding a control character or a lone surrogate (written as a YAML escape): neither
        can be stored in PostgreSQL or shown safely."""
        bad = _BAD_CHAR.search(text)
        if bad is not None:
            code = ord(bad.group())
            self.refuse(node, f"U+{code:04X} ({'a lone surrogate' if code >= 0xD800 else 'a control character'}) "
                              "is not allowed in rulebook text")
        return bad is None

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.refuse(key_node, "mapping keys must be plain strings")
                continue
            key = str(key_node.value)
            if not self._clean(key_node, key):
                continue
            if key in out:
                first = self.key_marks[(*path, key)]
                self.refuse(key_node, f"duplicate key '{key}' (first at line {first.line})")
                continue
            self.key_marks[(*path, key)] = _loc(self.filename, key_node.start_mark)
            out[key] = self.convert(value_node, (*path, key))
        return out


def _reader_location(text: str, filename: str, position: int) -> Location:
    before = text[:position]
    return Location(filename, before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1)


def _compose(text: str, filename: str) -> tuple[yaml.Node | None, _MarkedLoader]:
    try:
        loader = _MarkedLoader(text)  # the reader checks every character here
    except yaml.reader.ReaderError as exc:
        raise _reader_error(text, filename, exc) from exc
    try:
        return loader.get_single_node(), loader
    except yaml.reader.ReaderError as exc:
        raise _reader_error(text, filename, exc) from exc
    except _Refused as exc:
        raise RulebookError([RulebookProblem(_loc(filename, exc.mark), exc.message)]) from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _loc(filename, mark) if mark else Location(filename)
        message = f"YAML syntax error: {exc.problem or exc.context}"
        if exc.context and exc.problem:
            message += f" ({exc.context})"
        raise RulebookError([RulebookProblem(where, message)]) from exc
    except yaml.YAMLError as exc:
        raise RulebookError([RulebookProblem(Location(filename), f"YAML error: {exc}")]) from exc
    finally:
        loader.dispose()


def _reader_error(text: str, filename: str, exc: yaml.reader.ReaderError) -> RulebookError:
    """A character YAML does not allow (NUL, other controls): where it is, and which it is."""
    where = _reader_location(text, filename, exc.position)
    what = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
    return RulebookError([RulebookProblem(where, f"character {what} is not allowed in YAML ({exc.reason})")])


def decode(raw: bytes, filename: str) -> str:
    """Bytes of a rulebook file → text; refuses oversize and non-UTF-8 files before any parsing."""
    if len(raw) > MAX_BYTES:
        raise RulebookError(
            [
                RulebookProblem(
                    Location(filename),
                    f"file is {len(raw)} bytes; rulebooks are limited to 1 MiB ({MAX_BYTES} bytes)",
                )
            ]
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = len(raw[raw.rfind(b"\n", 0, exc.start) + 1: exc.start].decode("utf-8", "replace")) + 1
        raise RulebookError(
            [
                RulebookProblem(
                    Location(filename, line, col), f"file is not valid UTF-8 (byte {exc.start}: {exc.reason})"
                )
            ]
        ) from exc


def load_yaml(text: str, filename: str) -> Document:
    """Parse one YAML document with marks; raises RulebookError for syntax errors and refused constructs."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BYTES:
        raise RulebookError(
            [
                RulebookProblem(
                    Location(filename),
                    f"file is {size} bytes; rulebooks are limited to 1 MiB ({MAX_BYTES} bytes)",
                )
            ]
        )
    node, loader = _compose(text, filename)
    if node is None:
        return Document(None, filename, {(): Location(filename, 1, 1)})
    converter = _Converter(loader, filename)
    data = converter.convert(node, ())
    if converter.problems:
        problems = converter.problems
        raise RulebookError(sorted(problems, key=lambda p: (p.location.line or 0, p.location.col or 0)))
    return Document(
        data, filename, converter.marks, converter.key_marks, converter.styles, frozenset(converter.multiline)
    )
