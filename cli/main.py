"""The `gpuslo` command: serve, worker, rules check, replay, db upgrade and the probe commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuslo.cli.lazy_commands import make_lazy
from gpuslo.engine.config import Settings, load_settings
from gpuslo.engine.errors import GpusloError


class GpusloGroup(click.Group):
    """A click group that turns any GpusloError into one `error:` line and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GpusloError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


def settings_of(ctx: click.Context) -> Settings:
    """The Settings built once by the `gpuslo` group."""
    settings: Settings = ctx.find_root().obj
    return settings


@click.group(cls=GpusloGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TOML settings file (else $GPUSLO_CONFIG); GPUSLO_* environment variables override it.",
)
@click.version_option(package_name="gpuslo")
@click.pass_context
def main(ctx: click.Context, config_file: Path | None) -> None:
    """gpuslo: explains why a GPU fleet broke its SLO."""
    ctx.obj = load_settings(config_file=config_file)


@main.command()
@click.option("--host", default=None, help="Interface to listen on (setting `host`, default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="TCP port (setting `port`, 8080).")
@click.option(
    "--rules",
    "rules_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Rulebook folder (setting `rules_dir`, default rules/).",
)
@click.option("--probe", "probes", multiple=True, metavar="NAME[:ARG]",
              help="Also run a node probe in this process (as `gpuslo agent --probe`); repeatable.")
@click.option("--probe-token", envvar="GPUSLO_PROBE_TOKEN", default=None,
              help="Ingest token the local probes use once access control is on (or $GPUSLO_PROBE_TOKEN).")
@click.option("--bus", "bus_url", envvar="GPUSLO_BUS", default=None, metavar="NATS_URLS",
              help="Fleet mode: publish ingested events to NATS JetStream (workers evaluate them); no engine here.")
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None, rules_dir: Path | None, probes: tuple[str, ...],
          probe_token: str | None, bus_url: str | None) -> None:
    """Run ingest, the rules engine, the web UI and the JSON API in one process (SIGHUP reloads rulebooks)."""
    from gpuslo.cli.serve import configure_logging, run_server

    configure_logging()
    changes = {"host": host, "port": port, "rules_dir": rules_dir}
    settings = settings_of(ctx).with_overrides(**{k: v for k, v in changes.items() if v is not None})
    run_server(settings, probes, probe_token, bus_url)


@main.group()
def rules() -> None:
    """Work with rulebooks."""


@rules.command("check")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--overrides", "overrides_dir", type=click.Path(path_type=Path), default=None,
              help="Site overrides folder to check with them (default: the `rules_overrides_dir` setting).")
@click.pass_context
def rules_check(ctx: click.Context, paths: tuple[Path, ...], overrides_dir: Path | None) -> None:
    """Validate rulebook files and folders (default: the `rules_dir` setting) and their site overrides; exit 1
    on any problem."""
    from gpuslo.cli.rules import check

    settings = settings_of(ctx)
    ok, lines = check(paths or (settings.rules_dir,), overrides_dir or settings.rules_overrides_dir)
    for line in lines:
        click.echo(line)
    ctx.exit(0 if ok else 1)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--server", default=None, help="Base URL of the server (default: the `public_url` setting).")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=500, show_default=True)
@click.option("--token", envvar="GPUSLO_TOKEN", default=None, help="Bearer token (or $GPUSLO_TOKEN).")
@click.option("--dry-run", is_flag=True, help="Backtest locally against --rules; store and send nothing.")
@click.option("--rules", "rules_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Rulebook folder for --dry-run (default: the `rules_dir` setting).")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help="Output of --dry-run: text, or one JSON object per violation.")
@click.option("--compare", "compare_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="With --dry-run: show the violations this rulebook folder adds and removes.")
@click.pass_context
def replay(ctx: click.Context, file: Path, server: str | None, batch_size: int, token: str | None, dry_run: bool,
           rules_dir: Path | None, fmt: str, compare_dir: Path | None) -> None:
    """Post the events of a JSON Lines file to a running server (or backtest them with --dry-run)."""
    if dry_run:
        from gpuslo.cli.replay_dry import run_dry_replay

        ctx.exit(run_dry_replay(file, rules_dir or settings_of(ctx).rules_dir, fmt=fmt, compare_dir=compare_dir))
    from gpuslo.cli.replay import ReplayError, replay_file

    base = server or settings_of(ctx).public_url
    try:
        with click.progressbar(length=file.stat().st_size, label="replaying", file=sys.stderr) as bar:
            report = replay_file(file, base, batch_size=batch_size, token=token, on_bytes=bar.update)
    except ReplayError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    for verdict in report.refused:
        click.echo(str(verdict))
    click.echo(
        f"{report.total} events from {file}: {report.accepted} accepted, {report.duplicate} duplicate, "
        f"{report.rejected} rejected, {report.conflict} conflict"
    )
    ctx.exit(0 if report.ok else 1)


@main.group()
def db() -> None:
    """Manage the database."""


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx: click.Context) -> None:
    """Migrate the database (`database_url`, $GPUSLO_DATABASE_URL) to the latest schema."""
    from gpuslo.engine.store.db import Database

    database = Database(settings_of(ctx).database_url)
    try:
        database.upgrade()
    finally:
        database.dispose()
    click.echo(f"ok: {database!r} is at the latest schema")


@main.group()
def probe() -> None:
    """Run or inspect the node probes."""


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script: `eval "$(gpuslo completion bash)"` (in ~/.bashrc), or for zsh
    `eval "$(gpuslo completion zsh)"`, or `gpuslo completion fish > ~/.config/fish/completions/gpuslo.fish`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # click ships all three; a missing one is a broken install
        raise click.UsageError(f"no completion for {shell}")
    click.echo(completer(main, {}, "gpuslo", "_GPUSLO_COMPLETE").source())


@main.command()
@click.option("--server", default=None, help="Base URL of the gpuslo server (default: the `public_url` setting).")
@click.option("--token", envvar="GPUSLO_TOKEN", default=None, help="A read-scoped token (or $GPUSLO_TOKEN).")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio for an assistant that starts it; http serves streamable HTTP on --listen.")
@click.option("--listen", default="127.0.0.1:8765", show_default=True, help="HOST:PORT for --transport http.")
@click.pass_context
def mcp(ctx: click.Context, server: str | None, token: str | None, transport: str, listen: str) -> None:
    """Run a Model Context Protocol server with read-only tools (list_violations, explain_violation, slo_status,
    recent_events) over a gpuslo server's API."""
    from gpuslo.cli.api_client import ApiClient
    from gpuslo.cli.mcp_server import build_server

    client = ApiClient(server or settings_of(ctx).public_url, token)
    if transport == "stdio":
        build_server(client).run("stdio")
    else:
        host, _, port = listen.rpartition(":")
        build_server(client, host=host or "127.0.0.1", port=int(port)).run("streamable-http")


# Commands written in their own modules, imported when run (or listed by --help): start-up stays small.
make_lazy(main, {
    "violations": "gpuslo.cli.violations:violations",
    "silences": "gpuslo.cli.silences:silences",
    "slos": "gpuslo.cli.slos_client:slos",
    "agent": "gpuslo.cli.agent:agent",
    "alerts": "gpuslo.cli.alerts:alerts",
    "api-tokens": "gpuslo.cli.credentials:api_tokens",
    "tokens": "gpuslo.cli.credentials:tokens_alias",  # hidden: the old name, for one release
    "users": "gpuslo.cli.credentials:users",
    "slo": "gpuslo.cli.slo:slo",
    "stalls": "gpuslo.cli.stalls:stalls",
    "worker": "gpuslo.cli.worker:worker",
})
make_lazy(probe, {"logs": "gpuslo.cli.probe_logs:logs_command", "tokens": "gpuslo.cli.probe_tokens:tokens_command"})
make_lazy(rules, {"test": "gpuslo.cli.rules_test:rules_test"})


if __name__ == "__main__":  # `python -m gpuslo.cli.main`, as the MCP test starts it
    sys.exit(main())
