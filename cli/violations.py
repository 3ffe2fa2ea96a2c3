"""`gpuslo violations list|show|ack|resolve|reopen|comment`: on-call's terminal view, in amtool's habits."""

from __future__ import annotations

from typing import Any

import click

from gpuslo.cli.api_client import ApiClient
from gpuslo.cli.client_commands import client_options
from gpuslo.cli.output import emit, output_option, table

COLUMNS = (("ID", "id"), ("STATUS", "status"), ("SEVERITY", "severity"), ("RULE", "rule_id"), ("HOST", "host"),
           ("GPU", "gpu"), ("LAST SEEN", "last_seen"), ("N", "occurrences"), ("SUMMARY", "summary"))
FILTERS = ("status", "severity", "slo", "rule", "host", "gpu", "since", "until")


@click.group()
def violations() -> None:
    """List, inspect and act on violations of a running server."""


@violations.command("list")
@click.option("--status", type=click.Choice(["open", "acknowledged", "resolved"]), default=None)
@click.option("--severity", type=click.Choice(["critical", "error", "warning", "info"]), default=None)
@click.option("--slo", default=None, help="SLO id.")
@click.option("--rule", default=None, help="Rule id.")
@click.option("--host", default=None)
@click.option("--gpu", type=click.IntRange(0, 1023), default=None)
@click.option("--since", default=None, help="Last seen at or after (RFC 3339, or a duration ago such as 2h).")
@click.option("--until", default=None, help="Last seen at or before (RFC 3339).")
@click.option("--filter", "extra", multiple=True, metavar="NAME=VALUE",
              help="Any other query parameter of GET /api/v1/violations; repeatable.")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 500), default=50, show_default=True)
@output_option
@client_options
def list_violations(client: ApiClient, output: str, page: int, page_size: int, extra: tuple[str, ...],
                    **filters: Any) -> None:
    """Violations matching the filters, most recently seen first."""
    params: dict[str, Any] = {name: filters.get(name) for name in FILTERS}
    for item in extra:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--filter")
        params[name] = value
    found = client.get("/api/v1/violations", page=page, page_size=page_size, **params)
    emit(found, output,
         lambda data: table(data["items"], COLUMNS) + f"\n{data['total']} violations, page {data['page']}"
         + (" (more: --page {})".format(data["page"] + 1) if data["has_next"] else ""))


def _detail(data: dict[str, Any]) -> str:
    gpu = data.get("gpu")
    lines = [f"violation {data['id']}: {data['summary']}",
             f"  rule       {data['rule_id']} ({data['rule_title']}), rulebook {data['rulebook']} "
             f"{data['rulebook_version']}",
             f"  slo        {data['slo']}: {data.get('slo_objective', '')}",
             f"  status     {data['status']}, severity {data['severity']}, {data['occurrences']} occurrences",
             f"  where      host {data.get('host') or '-'} gpu {gpu if gpu is not None else '-'}",
             f"  seen       {data['first_seen']} .. {data['last_seen']}"]
    explanation = data.get("explanation") or {}
    for condition in explanation.get("conditions", []):
        lines.append(f"  condition  {condition.get('text') or condition.get('expression') or condition}")
    if data.get("remediation"):
        lines.append("  remediation")
        lines += [f"    {line}" for line in str(data["remediation"]).splitlines()]
    for event in data.get("evidence", [])[:20]:
        lines.append(f"  evidence   {event.get('time')} {event.get('kind')} {event.get('host')} "
                     f"gpu={event.get('gpu')} {event.get('id')}")
    return "\n".join(lines)


@violations.command("show")
@click.argument("violation_id", type=int)
@output_option
@client_options
def show_violation(client: ApiClient, output: str, violation_id: int) -> None:
    """One violation: why it fired (conditions, evidence), remediation, history."""
    emit(client.get(f"/api/v1/violations/{violation_id}"), output, _detail)


def _action(name: str, path: str, help_text: str) -> click.Command:
    @click.argument("violation_id", type=int)
    @click.option("-c", "--comment", default=None, help="Why (stored in the history and the audit log).")
    @output_option
    @client_options
    def command(client: ApiClient, output: str, violation_id: int, comment: str | None) -> None:
        done = client.post(f"/api/v1/violations/{violation_id}/{path}", {"comment": comment} if comment else {})
        emit(done, output, lambda data: f"violation {data['id']} is {data['status']}")

    command.__doc__ = help_text
    return click.command(name)(command)


violations.add_command(_action("ack", "acknowledge", "Acknowledge a violation (its receivers are told)."))
violations.add_command(_action("resolve", "resolve", "Resolve a violation (its receivers are told)."))
violations.add_command(_action("reopen", "reopen", "Reopen a resolved violation."))


@violations.command("comment")
@click.argument("violation_id", type=int)
@click.argument("text")
@output_option
@client_options
def comment_violation(client: ApiClient, output: str, violation_id: int, text: str) -> None:
    """Add a comment to a violation's history."""
    done = client.post(f"/api/v1/violations/{violation_id}/comments", {"comment": text})
    emit(done, output, lambda data: f"comment added to violation {data['id']}")
