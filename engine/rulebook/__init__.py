"""Rulebooks: load YAML (with line marks) → validate → frozen model. The public entry points are here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.rulebook.build import build_rulebook
from gpuslo.engine.rulebook.expr import parse_expression
from gpuslo.engine.rulebook.loader import decode, load_yaml
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.rulebook.validate import rulebook_json_schema, validate

__all__ = [
    "check_paths",
    "load_directory",
    "load_rulebook",
    "load_rulebook_text",
    "parse_expression",
    "rulebook_json_schema",
]

RULEBOOK_SUFFIXES = (".yaml", ".yml")
TEST_SUFFIX = ".test.yaml"


def load_rulebook_text(text: str, filename: str) -> Rulebook:
    """Parse, validate and build one rulebook; raises RulebookError listing every problem, in file order."""
    doc = load_yaml(text, filename)
    problems = validate(doc)
    if problems:
        raise RulebookError(problems)
    return build_rulebook(doc, text)


def load_rulebook(path: Path) -> Rulebook:
    """Load one rulebook file (at most 1 MiB of UTF-8)."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RulebookError(
            [RulebookProblem(Location(name), f"cannot read file: {exc.strerror or exc}")]
        ) from exc
    return load_rulebook_text(decode(raw, name), name)


def _rulebook_files(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.name.endswith(RULEBOOK_SUFFIXES) and not p.name.endswith(TEST_SUFFIX)
    )


def _load_many(files: Sequence[Path]) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
    """Load files, refusing rule ids and rulebook names that repeat across them (the later one is refused)."""
    good: list[Rulebook] = []
    problems: list[RulebookProblem] = []
    rule_seen: dict[str, Location] = {}
    name_seen: dict[str, Location] = {}
    for path in files:
        try:
            book = load_rulebook(path)
        except RulebookError as exc:
            problems.extend(exc.problems)
            continue
        clashes = []
        if book.name in name_seen:
            clashes.append(
                RulebookProblem(
                    book.location,
                    f"duplicate rulebook name '{book.name}' (first defined at {name_seen[book.name]})",
                )
            )
        for rule in book.rules:
            if rule.id in rule_seen:
                clashes.append(
                    RulebookProblem(
                        rule.location,
                        f"duplicate rule id '{rule.id}' (first defined at {rule_seen[rule.id]})",
                        rule.id,
                    )
                )
        if clashes:
            problems.extend(clashes)
            continue
        name_seen[book.name] = book.location
        rule_seen.update((rule.id, rule.location) for rule in book.rules)
        good.append(book)
    return tuple(good), tuple(problems)


def load_directory(directory: Path) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
    """Every `*.yaml`/`*.yml` rulebook of a directory (sorted, not recursive, `*.test.yaml` skipped)."""
    directory = Path(directory)
    if not directory.is_dir():
        return (), (RulebookProblem(Location(str(directory)), "not a directory"),)
    return _load_many(_rulebook_files(directory))


def check_paths(paths: Sequence[Path]) -> tuple[RulebookProblem, ...]:
    """Every problem of the given rulebook files and directories, for `gpuslo rules check`."""
    files: list[Path] = []
    missing: list[RulebookProblem] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(_rulebook_files(path))
        elif path.exists():
            files.append(path)
        else:
            missing.append(RulebookProblem(Location(str(path)), "no such file or directory"))
    return tuple(missing) + _load_many(files)[1]
