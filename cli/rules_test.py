"""`gpuslo rules test [PATH...]`: run the `<name>.test.yaml` files beside rulebooks, promtool style."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from gpuslo.engine.rulebook.testing import FileResult, find_test_files, run_test_file

DEFAULT_RULES_DIR = Path("rules")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _file_lines(result: FileResult) -> list[str]:
    if result.problems:
        return [f"{result.path}: ERROR (does not load)", *(f"  {p}" for p in result.problems)]
    passed = len(result.cases) - result.failed
    status = "ok" if result.ok else "FAILED"
    lines = [f"{result.path}: {status} ({passed} passed, {result.failed} failed)"]
    lines += [c.message() for c in result.cases if not c.passed]
    return lines


def run_tests(paths: Sequence[Path]) -> tuple[bool, list[str]]:
    """Run the test files found under `paths`: (all passed, the lines to print)."""
    files, problems = find_test_files(paths)
    lines = [str(p) for p in problems]
    results = [run_test_file(path) for path in files]
    for result in results:
        lines += _file_lines(result)
    cases = sum(len(r.cases) for r in results)
    failed = sum(r.failed for r in results)
    broken = sum(bool(r.problems) for r in results) + len(problems)
    ok = failed == 0 and broken == 0 and bool(files)
    summary = f"{_plural(len(files), 'test file')}, {_plural(cases, 'case')}: {cases - failed} passed, {failed} failed"
    if broken:
        summary += f", {_plural(broken, 'file')} with errors"
    if not files:
        summary = "no rule test files (*.test.yaml) found"
    lines.append(("ok: " if ok else "FAILED: ") + summary)
    return ok, lines


@click.command("test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.pass_context
def rules_test(ctx: click.Context, paths: tuple[Path, ...]) -> None:
    """Run rule tests (`<name>.test.yaml` beside each rulebook; default: the `rules_dir` setting or rules/).

    PATH may be a folder, a test file, or a rulebook (its test file beside it). Exit 1 on any failure.
    """
    settings = ctx.find_root().obj
    default = getattr(settings, "rules_dir", None) or DEFAULT_RULES_DIR
    ok, lines = run_tests(paths or (Path(default),))
    for line in lines:
        click.echo(line)
    ctx.exit(0 if ok else 1)
