"""`gpuslo rules test [PATH...]`: run the `<name>.test.yaml` files beside rulebooks, promtool style."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from gpuslo.engine.rule_tests.run import FileResult, find_test_files, run_test_file

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


def run_tests(paths: Sequence[Path], overrides_dir: Path | None = None) -> tuple[bool, list[str]]:
    """Run the test files found under `paths` (against rulebooks with the site overrides of `overrides_dir`,
    when given): (all passed, the lines to print)."""
    files, problems = find_test_files(paths)
    lines = [str(p) for p in problems]
    if overrides_dir is not None:
        lines.append(f"with site overrides from {overrides_dir}: shipped tests describe shipped thresholds")
    results = [run_test_file(path, overrides_dir=overrides_dir) for path in files]
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
@click.option("--with-overrides", is_flag=True,
              help="Apply the site overrides (`rules_overrides_dir`, or --overrides) before testing.")
@click.option("--overrides", "overrides_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Site overrides folder to apply (implies --with-overrides).")
@click.pass_context
def rules_test(ctx: click.Context, paths: tuple[Path, ...], with_overrides: bool, overrides_dir: Path | None) -> None:
    """Run rule tests (`<name>.test.yaml` beside each rulebook; default: the `rules_dir` setting or rules/).

    PATH may be a folder, a test file, or a rulebook (its test file beside it). Exit 1 on any failure. The
    shipped rulebooks are tested as shipped unless --with-overrides is given.
    """
    settings = ctx.find_root().obj
    default = getattr(settings, "rules_dir", None) or DEFAULT_RULES_DIR
    if with_overrides and overrides_dir is None:
        overrides_dir = getattr(settings, "rules_overrides_dir", None)
        if overrides_dir is None:
            raise click.UsageError("--with-overrides needs the rules_overrides_dir setting or --overrides DIR")
    ok, lines = run_tests(paths or (Path(default),), overrides_dir)
    for line in lines:
        click.echo(line)
    ctx.exit(0 if ok else 1)
