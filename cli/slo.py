"""`gpuslo slo ...`: list the measured SLOs, recount them from stored events, export them for Prometheus/OpenSLO."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.slo.model import Sli


def _slis(ctx: click.Context, rules_dir: Path | None, only: tuple[str, ...]) -> list[Sli]:
    from gpuslo.cli.main import settings_of

    settings = settings_of(ctx)
    books, problems = load_directory(rules_dir or settings.rules_dir, settings.rules_overrides_dir)
    if problems:
        raise RulebookError(problems)
    found: dict[str, Sli] = {}
    for book in books:
        for slo in book.slos.values():
            if slo.indicator is not None and slo.id not in found:
                found[slo.id] = slo.indicator
    unknown = [name for name in only if name not in found]
    if unknown:
        raise click.BadParameter(f"no measured SLO {', '.join(unknown)} (known: {', '.join(found) or 'none'})",
                                 param_hint="SLO")
    return [sli for sli in found.values() if not only or sli.slo_id in only]


_RULES = click.option("--rules", "rules_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                      default=None, help="Rulebook folder (default: the `rules_dir` setting).")


@click.group("slo")
def slo() -> None:
    """Measured SLOs: SLIs counted from events, error budgets and burn rates."""


@slo.command("list")
@_RULES
@click.pass_context
def slo_list(ctx: click.Context, rules_dir: Path | None) -> None:
    """List every SLO group with its budget left and burn rates, from the database."""
    from gpuslo.cli.main import settings_of
    from gpuslo.engine.slo.report import slo_groups
    from gpuslo.engine.store.db import Database

    database = Database(settings_of(ctx).database_url)
    try:
        with database.session(readonly=True) as session:
            groups = slo_groups(session, _slis(ctx, rules_dir, ()))
    finally:
        database.dispose()
    for group in groups:
        rates = " ".join(f"{name} {rate:.3g}x" for name, rate in group.burn_rates().items())
        click.echo(f"{group.id}  {group.group_key}  {group.total - group.good} bad of {group.total}  budget left "
                   f"{100 * group.remaining:.1f} %  burn {rates}")
    if not groups:
        click.echo("no SLO group has counted a request yet")


@slo.command("backfill")
@click.argument("slos", nargs=-1, metavar="[SLO]...")
@_RULES
@click.pass_context
def slo_backfill(ctx: click.Context, slos: tuple[str, ...], rules_dir: Path | None) -> None:
    """Recount SLOs (all measured ones by default) from the stored events of their window; replaces, never adds.
    Reload a running server's rulebooks afterwards so its burn alerts start from the new counts."""
    from gpuslo.cli.main import settings_of
    from gpuslo.engine.slo.backfill import backfill, pending
    from gpuslo.engine.store.db import Database

    chosen = _slis(ctx, rules_dir, slos)
    database = Database(settings_of(ctx).database_url)
    now = datetime.now(UTC)
    try:
        database.upgrade()
        with click.progressbar(length=pending(database, chosen, now), label="backfilling", file=sys.stderr) as bar:
            counted = backfill(database, chosen, now=now, on_events=bar.update)
    finally:
        database.dispose()
    click.echo(f"ok: {counted} requests counted for {', '.join(s.slo_id for s in chosen) or 'no SLO'}")


@slo.command("export")
@click.option("--format", "fmt", type=click.Choice(["prometheus", "openslo"]), required=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file instead of standard output.")
@_RULES
@click.pass_context
def slo_export(ctx: click.Context, fmt: str, output: Path | None, rules_dir: Path | None) -> None:
    """Write the measured SLOs as Prometheus recording and alerting rules or as OpenSLO v1 documents."""
    from gpuslo.engine.slo.export import openslo_documents, prometheus_rules

    slis = _slis(ctx, rules_dir, ())
    text = prometheus_rules(slis) if fmt == "prometheus" else openslo_documents(slis)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
