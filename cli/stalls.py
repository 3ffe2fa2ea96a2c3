"""`gpuslo stalls cluster`: group attributed token stalls into named causes (engine/stall_clusters)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from gpuslo.engine.errors import EventError, GpusloError
from gpuslo.engine.events import Event, parse_event


def _read(path: Path) -> list[Event]:
    events = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(parse_event(json.loads(line)))
        except (ValueError, EventError) as exc:
            raise GpusloError(f"{path}:{number}: not an event: {exc}") from exc
    return events


@click.group()
def stalls() -> None:
    """Work with attributed token stalls."""


@stalls.command("cluster")
@click.option("--events", "events_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read events from this JSONL file instead of the database.")
@click.option("--hours", type=click.FloatRange(min=0, min_open=True), default=24.0, show_default=True,
              help="From the database: stalls of the last HOURS.")
@click.option("--eps", type=click.FloatRange(min=0, min_open=True), default=0.2, show_default=True,
              help="DBSCAN's neighbourhood radius in feature space.")
@click.option("--min-samples", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the clustering as JSON.")
@click.option("--model-out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the clusters (centroids and ids) for the attribution probe's clusters= option.")
@click.pass_context
def cluster_command(ctx: click.Context, events_file: Path | None, hours: float, eps: float, min_samples: int,
                    as_json: bool, model_out: Path | None) -> None:
    """Cluster the attributed token stalls by their causes and print one line per cluster."""
    from gpuslo.engine.stall_clusters import cluster

    if events_file is not None:
        events = _read(events_file)
        stalls_ = [e for e in events if e.kind == "token_stall"]
        context = [e for e in events if e.kind == "mem_fragmentation"]
    else:
        from gpuslo.cli.main import settings_of
        from gpuslo.engine.stall_causes import stored
        from gpuslo.engine.store.db import Database

        database = Database(settings_of(ctx).database_url)
        since = datetime.now(UTC) - timedelta(hours=hours)
        stalls_ = stored(database, "token_stall", since)
        context = stored(database, "mem_fragmentation", since - timedelta(minutes=1))
        database.dispose()
    result = cluster(stalls_, context, eps=eps, min_samples=min_samples)
    if model_out is not None:
        model_out.write_text(json.dumps({k: v for k, v in result.to_dict().items() if k != "labels"}, indent=1))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
        return
    total = len(result.labels)
    click.echo(f"{total} attributed stalls in {len(result.clusters)} clusters")
    for c in result.clusters:
        click.echo(f"{c.id:<18} {c.count:>5} stalls {c.time_share * 100:5.1f}% of stall time  {c.name}"
                   f"  (e.g. {', '.join(c.examples[:2])})")
