"""`gpuslo alerts test`: send a test notification through a route and show what each receiver got."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click
from sqlalchemy.orm import Session

from gpuslo.engine.alerts import load_alerts_config
from gpuslo.engine.alerts.testsend import send_test
from gpuslo.engine.errors import ConfigError


@click.group("alerts")
def alerts() -> None:
    """Work with alert routing and receivers."""


@alerts.command("test")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="alerts.yaml (default: the `alerts_config` setting).")
@click.option("--route", "route_name", default=None, help="Route to test (default: the routes a test alert matches).")
@click.option("--no-resolve", is_flag=True, help="Send only the trigger, not the resolve that follows it.")
@click.pass_context
def alerts_test(ctx: click.Context, config_path: Path | None, route_name: str | None, no_resolve: bool) -> None:
    """Send a test alert through the routing config; print each receiver's request and answer (secrets as ***)."""
    settings = ctx.find_root().obj
    path = config_path or settings.alerts_config
    if path is None:
        raise ConfigError("no alerts config: pass --config or set alerts_config / GPUSLO_ALERTS_CONFIG")
    config = load_alerts_config(path)
    for warning in config.warnings:
        click.echo(f"warning: {warning}", err=True)
    results = send_test(config, route_name=route_name, public_url=settings.public_url, resolve=not no_resolve)
    if not results:
        click.echo("no receiver matched the test alert")
        ctx.exit(1)
    for result in results:
        click.echo(result.describe())
        click.echo(f"  POST {result.url}")
        click.echo("  " + result.body[:2000])
    ctx.exit(0 if all(r.status == "delivered" for r in results) else 1)


@alerts.command("enable-receiver")
@click.argument("name")
@click.pass_context
def alerts_enable_receiver(ctx: click.Context, name: str) -> None:
    """Re-enable a receiver that answered 410 Gone; its waiting notifications go out again. Audited."""
    from gpuslo.cli.credentials import _actor, _audited
    from gpuslo.engine.store import audit, receivers

    def change(session: Session, now: datetime) -> None:
        before, after = receivers.enable(session, name)
        audit.record(session, at=now, actor=_actor(), action="receiver.enable", target_type="receiver",
                     target_id=name, before=before.to_dict(), after=after.to_dict(), detail="cli")

    _audited(ctx, change)
    click.echo(f"receiver {name} is enabled; its waiting notifications go out again")
