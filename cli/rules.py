"""`gpuslo rules check`: every problem of some rulebooks as `file:line:col: rule "id": message (hint)`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuslo.engine.rulebook import check_paths, load_directory, load_rulebook
from gpuslo.engine.rulebook.model import Rulebook


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _rulebooks(paths: Sequence[Path], overrides_dir: Path | None) -> list[Rulebook]:
    books: list[Rulebook] = []
    for path in paths:
        books.extend(load_directory(path, overrides_dir)[0] if path.is_dir()
                     else (load_rulebook(path, overrides_dir=overrides_dir),))
    return books


def check(paths: Sequence[Path], overrides_dir: Path | None = None) -> tuple[bool, list[str]]:
    """Check rulebook files and folders (with the site overrides of `overrides_dir`): (True, [summary]) when
    clean, else (False, problems + summary)."""
    problems = check_paths(list(paths), overrides_dir)
    if problems:
        files = {problem.location.file for problem in problems}
        summary = f"error: {_plural(len(problems), 'problem')} in {_plural(len(files), 'file')}"
        return False, [str(problem) for problem in problems] + [summary]
    books = _rulebooks(paths, overrides_dir)
    rules = sum(len(book.rules) for book in books)
    line = f"ok: {_plural(len(books), 'rulebook')}, {_plural(rules, 'rule')}"
    overridden = [book for book in books if book.override_file]
    if overridden:
        changes = sum(len(book.overrides) for book in overridden)
        line += f"; {_plural(changes, 'site override')} in {', '.join(b.override_file or '' for b in overridden)}"
    return True, [line]
