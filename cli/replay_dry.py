"""`gpuslo replay --dry-run --rules DIR FILE.jsonl`: a backtest that prints the violations the rulebooks of DIR
would raise over recorded events (nothing is stored), and with `--compare DIR2` what DIR2 adds and removes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from gpuslo.engine.backtest import BacktestResult, Comparison, FoldedViolation, backtest, compare
from gpuslo.engine.errors import RulebookError
from gpuslo.engine.events import format_time
from gpuslo.engine.explain import group_key
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.slo.counter import GroupFigures
from gpuslo.engine.slo.maths import budget_remaining, burn_rate

FORMATS = ("text", "jsonl")
PROGRESS_MIN_BYTES = 1 << 20  # smaller files finish before a bar is worth drawing


def _rulebooks(directory: Path) -> tuple[Rulebook, ...]:
    books, problems = load_directory(directory)
    if problems:
        raise RulebookError(problems)
    return books


def _text_line(v: FoldedViolation, mark: str = "") -> str:
    span = f"{format_time(v.first_seen)[:23]} .. {format_time(v.last_seen)[11:23]}"
    return f"{mark}{v.severity:<8} {v.rule}  [{v.group_key}]  x{v.count}  {span}  {v.summary}"


def _json_line(v: FoldedViolation, change: str | None = None) -> str:
    obj = v.to_dict()
    if change is not None:
        obj["change"] = change
    return json.dumps(obj, sort_keys=True)


def _totals(result: BacktestResult, rules_dir: Path) -> str:
    return (f"{rules_dir}: {len(result.violations)} violations ({result.matches} matches) from "
            f"{result.events} events ({result.duplicates} duplicate ids, {len(result.bad_lines)} bad lines skipped)")


def render(result: BacktestResult, rules_dir: Path, fmt: str) -> Iterable[str]:
    """The lines of a plain dry run: one per folded violation, then (text only) the totals."""
    if fmt == "jsonl":
        yield from (_json_line(v) for v in result.violations)
        return
    yield from (_text_line(v) for v in result.violations)
    yield from (budget_line(f) for f in result.slos)
    yield _totals(result, rules_dir)


def budget_line(f: GroupFigures) -> str:
    """One measured SLO group at the end of the file: window counts, budget left, burn rates."""
    sli = f.sli
    rates = " ".join(f"{name} {burn_rate(good, total, sli.target):.3g}x" for name, (good, total) in f.lookbacks.items())
    return (f"slo {sli.slo_id}  [{group_key(f.group)}]  {f.total - f.good} bad of {f.total}  budget left "
            f"{100 * budget_remaining(f.good, f.total, sli.target):.1f} %  burn {rates}")


def render_comparison(diff: Comparison, base_dir: Path, other_dir: Path, fmt: str) -> Iterable[str]:
    """The lines of a `--compare` run: added (`+`) and removed (`-`) violations of DIR2 relative to DIR."""
    if fmt == "jsonl":
        yield from (_json_line(v, "added") for v in diff.added)
        yield from (_json_line(v, "removed") for v in diff.removed)
        return
    yield from (_text_line(v, "+ ") for v in diff.added)
    yield from (_text_line(v, "- ") for v in diff.removed)
    yield (f"{other_dir} against {base_dir}: {len(diff.added)} added, {len(diff.removed)} removed, "
           f"{diff.unchanged} unchanged")


def run_dry_replay(file: Path, rules_dir: Path, *, fmt: str = "text", compare_dir: Path | None = None,
                   lateness_s: float = 60.0) -> int:
    """Run the backtest and print it (results to stdout, bad lines and progress to stderr); returns the exit
    status: 0, or 1 when bad lines were skipped. Raises RulebookError when a rulebook folder does not load."""
    sets = [_rulebooks(rules_dir)] + ([_rulebooks(compare_dir)] if compare_dir is not None else [])
    size = file.stat().st_size
    if size >= PROGRESS_MIN_BYTES:
        with click.progressbar(length=size, label="backtesting", file=sys.stderr) as bar:
            results = backtest(file, sets, lateness_s=lateness_s, on_bytes=bar.update)
    else:
        results = backtest(file, sets, lateness_s=lateness_s)
    base = results[0]
    for bad in base.bad_lines:
        click.echo(f"{file}:{bad}", err=True)
    if compare_dir is None:
        lines = render(base, rules_dir, fmt)
    else:
        lines = render_comparison(compare(base, results[1]), rules_dir, compare_dir, fmt)
    for line in lines:
        click.echo(line)
    return 1 if base.bad_lines else 0


@click.command("replay")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, required=True, help="Backtest locally; store and send nothing.")
@click.option("--rules", "rules_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=Path("rules"), show_default=True, help="Rulebook folder to run.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--compare", "compare_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="A changed rulebook folder: print the violations it adds and removes.")
@click.pass_context
def dry_replay(ctx: click.Context, file: Path, dry_run: bool, rules_dir: Path, fmt: str,
               compare_dir: Path | None) -> None:
    """Backtest FILE (JSON Lines events) against a rulebook folder without storing anything."""
    ctx.exit(run_dry_replay(file, rules_dir, fmt=fmt, compare_dir=compare_dir))
