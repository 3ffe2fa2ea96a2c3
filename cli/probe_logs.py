"""`gpuslo probe logs`: print the GPU incidents found in log files, stdin, journald or the kernel log."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import click

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower, JournalSource, KmsgSource, StreamSource
from gpuslo.probes.logs.state import StateStore

MAX_LINE = 64 * 1024


def _print(events: list[Event]) -> None:
    for event in events:
        click.echo(json.dumps(event.to_dict(), sort_keys=True))


@click.command("logs")
@click.argument("paths", nargs=-1)
@click.option("--once", is_flag=True, help="Read to the end of every source, print, and exit.")
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True,
              help="Output format: one JSON event per line.")
@click.option("--host", default=None, help="Host name put in events (default: this machine's).")
@click.option("--job", default=None, help="Job name put in events.")
@click.option("--state-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to remember read positions, so a restart does not repeat events.")
@click.option("--journal", is_flag=True, help="Also follow the systemd journal (journalctl -f -o json).")
@click.option("--kernel", is_flag=True, help="Also follow the kernel log (/dev/kmsg).")
@click.option("--interval", type=float, default=0.5, show_default=True, help="Seconds between polls.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="A label put in every event (repeatable), e.g. world_size=2 for the collective-hang analysis.")
def logs_command(paths: tuple[str, ...], once: bool, fmt: str, host: str | None, job: str | None,
                 state_file: Path | None, journal: bool, kernel: bool, interval: float,
                 labels: tuple[str, ...]) -> None:
    """Recognize GPU incidents in PATH... (`-` is standard input) and print one JSON event per incident."""
    if not paths and not journal and not kernel:
        raise click.UsageError("give at least one PATH (or -), --journal or --kernel")
    host = host or socket.gethostname()
    state = StateStore(state_file)
    if any("=" not in label for label in labels):
        raise click.UsageError("--label takes KEY=VALUE")
    extra = dict(label.split("=", 1) for label in labels)

    def parser(source: str) -> LogParser:
        return LogParser(ParserSettings(host=host, source=source, job=job, max_line_bytes=MAX_LINE, labels=extra))

    try:
        files = [FileFollower(Path(p), parser(str(Path(p).resolve())), state, MAX_LINE) for p in paths if p != "-"]
        stdin = StreamSource(sys.stdin.buffer, parser("-"), MAX_LINE) if "-" in paths else None
        journal_source = JournalSource(parser("journal"), state, follow=not once) if journal else None
        kmsg = KmsgSource(parser("kmsg")) if kernel else None
        while True:
            for follower in files:
                _print(follower.finish() if once else follower.poll())
            if stdin is not None:
                _print(stdin.poll(wait_s=interval if once else 0.0))
            if journal_source is not None:
                _print(journal_source.poll(wait_s=interval if once else 0.0))
            if kmsg is not None:
                _print(kmsg.poll())
            state.save()
            if once and all(s is None or s.done for s in (stdin, journal_source)):
                break
            if not once:
                time.sleep(interval)
    except ProbeError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        state.save()
