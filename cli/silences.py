"""`gpuslo silences add|list|expire`: mute notifications matching fields and labels for a while (amtool's
`silence add/query/expire`)."""

from __future__ import annotations

import getpass
from datetime import UTC, datetime
from typing import Any

import click

from gpuslo.cli.api_client import ApiClient
from gpuslo.cli.client_commands import client_options
from gpuslo.cli.output import emit, output_option, table

COLUMNS = (("ID", "id"), ("ACTIVE", "active"), ("MATCHERS", "matchers_text"), ("STARTS", "starts_at"),
           ("ENDS", "ends_at"), ("AUTHOR", "author"), ("COMMENT", "comment"))
FIELDS = ("severity", "slo", "rule_id", "host", "gpu")


def _with_text(silence: dict[str, Any]) -> dict[str, Any]:
    matchers = silence.get("matchers") or {}
    return {**silence, "matchers_text": " ".join(f"{k}={v}" for k, v in sorted(matchers.items()))}


@click.group()
def silences() -> None:
    """Mute, list and end silences of a running server."""


def _matchers(items: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name.strip() or not value.strip():
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="MATCHER")
        name = "rule_id" if name.strip() == "rule" else name.strip()
        found[name if name in FIELDS or name.startswith("labels.") else f"labels.{name}"] = value.strip()
    return found


@silences.command("add")
@click.argument("matchers", nargs=-1, required=True, metavar="NAME=VALUE...")
@click.option("-d", "--duration", default="1h", show_default=True, help="How long, e.g. 30m, 2h, 1d.")
@click.option("--end", "ends_at", default=None, help="End time (RFC 3339) instead of --duration.")
@click.option("-c", "--comment", required=True, help="Why (required, as in Alertmanager).")
@click.option("-a", "--author", default=None, help="Who (default: your login name; a token's name wins).")
@output_option
@client_options
def add_silence(client: ApiClient, output: str, matchers: tuple[str, ...], duration: str, ends_at: str | None,
                comment: str, author: str | None) -> None:
    """Silence notifications whose fields match (severity, slo, rule, host, gpu; any other name is a label):
    `gpuslo silences add host=gpu-node-7 rule=token-stall -d 2h -c "draining node"`."""
    body: dict[str, Any] = {"matchers": _matchers(matchers), "comment": comment,
                            "author": author or getpass.getuser()}
    body.update({"ends_at": ends_at} if ends_at else {"duration": duration})
    made = client.post("/api/v1/silences", body)
    emit(made, output, lambda data: f"silence {data['id']} until {data['ends_at']}")


@silences.command("list")
@click.option("--expired/--active-only", default=False, help="Also list expired silences.")
@output_option
@client_options
def list_silences(client: ApiClient, output: str, expired: bool) -> None:
    """Silences, active ones (and with --expired the ended ones too)."""
    found = client.get("/api/v1/silences", include_expired="true" if expired else "false")
    emit(found, output, lambda data: table([_with_text(s) for s in data["items"]], COLUMNS)
         + f"\n{len(data['items'])} silences at {datetime.now(UTC).isoformat(timespec='seconds')}")


@silences.command("expire")
@click.argument("silence_ids", type=int, nargs=-1, required=True)
@output_option
@client_options
def expire_silences(client: ApiClient, output: str, silence_ids: tuple[int, ...]) -> None:
    """End silences now."""
    ended = [client.post(f"/api/v1/silences/{silence_id}/expire") for silence_id in silence_ids]
    emit({"items": ended}, output, lambda data: "\n".join(f"silence {s['id']} expired" for s in data["items"]))
