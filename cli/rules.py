"""`gpuslo rules check`: every problem of some rulebooks as `file:line:col: rule "id": message (hint)`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuslo.engine.rulebook import check_paths, load_directory, load_rulebook
from gpuslo.engine.rulebook.model import Rulebook


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _rulebooks(paths: Sequence[Path]) -> list[Rulebook]:
    books: list[Rulebook] = []
    for path in paths:
        books.extend(load_directory(path)[0] if path.is_dir() else (load_rulebook(path),))
    return books


def check(paths: Sequence[Path]) -> tuple[bool, list[str]]:
    """Check rulebook files and folders: (True, [summary]) when clean, else (False, problems + summary)."""
    problems = check_paths(list(paths))
    if problems:
        files = {problem.location.file for problem in problems}
        summary = f"error: {_plural(len(problems), 'problem')} in {_plural(len(files), 'file')}"
        return False, [str(problem) for problem in problems] + [summary]
    books = _rulebooks(paths)
    rules = sum(len(book.rules) for book in books)
    return True, [f"ok: {_plural(len(books), 'rulebook')}, {_plural(rules, 'rule')}"]
