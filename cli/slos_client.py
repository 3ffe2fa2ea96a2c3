"""`gpuslo slos list|show`: a running server's measured SLOs — budget left, burn rates, causes (client side;
`gpuslo slo ...` works on the rulebooks and the database itself)."""

from __future__ import annotations

from typing import Any

import click

from gpuslo.cli.api_client import ApiClient
from gpuslo.cli.client_commands import client_options
from gpuslo.cli.output import emit, output_option, table

WINDOWS = ("5m", "1h", "6h", "3d")


def _row(item: dict[str, Any]) -> dict[str, Any]:
    rates = item.get("burn_rates") or {}
    remaining = item.get("error_budget_remaining")
    return {**item, "budget_left": None if remaining is None else f"{remaining:.1%}",
            **{f"burn_{w}": None if rates.get(w) is None else f"{rates[w]:.1f}x" for w in WINDOWS}}


COLUMNS = (("ID", "id"), ("OBJECTIVE", "objective"), ("GOOD", "good"), ("TOTAL", "total"),
           ("BUDGET LEFT", "budget_left"), *((f"BURN {w}", f"burn_{w}") for w in WINDOWS))


@click.group("slos")
def slos() -> None:
    """Measured SLOs of a running server: error budget and burn rates."""


@slos.command("list")
@output_option
@client_options
def list_slos(client: ApiClient, output: str) -> None:
    """Every SLO group: objective, good/total, budget left, burn rates."""
    found = client.get("/api/v1/slos")
    emit(found, output, lambda data: table([_row(i) for i in data["items"]], COLUMNS)
         + f"\n{len(data['items'])} SLO groups")


@slos.command("show")
@click.argument("slo_id")
@output_option
@client_options
def show_slo(client: ApiClient, output: str, slo_id: str) -> None:
    """One SLO group with the budget it lost by cause."""
    found = client.get(f"/api/v1/slos/{slo_id}")

    def render(data: dict[str, Any]) -> str:
        causes = table(data.get("causes") or [], (("RULE", "rule_id"), ("VIOLATION", "violation_id"),
                                                 ("GROUP", "group_key"), ("BAD", "bad"), ("SHARE", "share")))
        return (table([_row(data)], COLUMNS) + "\n\ncauses:\n" + causes
                + f"\nunattributed: {data.get('unattributed')}")

    emit(found, output, render)
