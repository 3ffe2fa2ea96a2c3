"""`gpuslo mcp`: a Model Context Protocol server (the official `mcp` SDK) with read-only tools over a gpuslo
server's JSON API, so an assistant can list violations, explain one, read SLO budgets and recent events.

It only ever sends GET requests, with the token it was given: give it a `read` token. Transport: stdio (what
assistants start locally) or streamable HTTP on loopback.
"""

from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import FastMCP

from gpuslo.cli.api_client import ApiClient, ApiError

EVIDENCE_SHOWN = 50
INSTRUCTIONS = (
    "gpuslo explains why a GPU LLM serving or training fleet broke its SLO. Start with list_violations (open "
    "ones, newest first), then explain_violation for the rule, the conditions with their observed values, the "
    "evidence events, the causal chain, the stall attribution and the remediation. slo_status gives error "
    "budgets and burn rates; recent_events the raw events of a host or GPU.")


def _compact_event(event: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "kind", "time", "host", "gpu", "pid", "job", "rank", "attrs", "message")
    return {k: event[k] for k in keep if event.get(k) is not None}


def explanation_of(detail: dict[str, Any]) -> dict[str, Any]:
    """What an assistant needs to explain a violation, from GET /api/v1/violations/{id}."""
    explanation = detail.get("explanation") or {}
    evidence = detail.get("evidence") or []
    return {
        "id": detail["id"], "summary": detail["summary"], "status": detail["status"],
        "severity": detail["severity"], "rule": {"id": detail["rule_id"], "title": detail["rule_title"],
                                                 "rulebook": detail["rulebook"],
                                                 "version": detail["rulebook_version"]},
        "slo": {"id": detail["slo"], "objective": detail.get("slo_objective")},
        "where": {"host": detail.get("host"), "gpu": detail.get("gpu"), "group": detail.get("group")},
        "first_seen": detail["first_seen"], "last_seen": detail["last_seen"], "occurrences": detail["occurrences"],
        "conditions": explanation.get("conditions", []), "chain": explanation.get("chain", []),
        "attribution": explanation.get("attribution"), "root_cause": explanation.get("root_cause"),
        "evidence": [_compact_event(e) for e in evidence[:EVIDENCE_SHOWN]],
        "evidence_total": len(evidence), "remediation": detail.get("remediation"), "runbook": detail.get("runbook"),
        "history": [{k: h.get(k) for k in ("at", "action", "actor", "comment")} for h in detail.get("history", [])],
    }


def build_server(client: ApiClient, **settings: Any) -> FastMCP:
    """The MCP server and its tools, each one GET on `client`'s server."""
    server: FastMCP = FastMCP("gpuslo", instructions=INSTRUCTIONS, **settings)

    def call(path: str, **params: Any) -> Any:
        try:
            return client.get(path, **params)
        except ApiError as exc:
            return {"error": str(exc), "status": exc.status}

    @server.tool()
    def list_violations(status: str | None = "open", severity: str | None = None, rule: str | None = None,
                        host: str | None = None, gpu: int | None = None, slo: str | None = None,
                        since: str | None = None, limit: int = 20) -> dict[str, Any]:
        """Violations newest first. status: open, acknowledged, resolved or null for all; severity: critical,
        error, warning, info; since: RFC 3339 time."""
        found = call("/api/v1/violations", status=status, severity=severity, rule=rule, host=host, gpu=gpu,
                     slo=slo, since=since, page_size=max(1, min(limit, 200)))
        if "items" not in found:
            return found
        keep = ("id", "status", "severity", "rule_id", "slo", "host", "gpu", "summary", "first_seen", "last_seen",
                "occurrences")
        return {"total": found["total"], "items": [{k: v.get(k) for k in keep} for v in found["items"]]}

    @server.tool()
    def explain_violation(violation_id: int) -> dict[str, Any]:
        """Why a violation fired: rule and rulebook version, SLO, conditions with observed values, evidence
        events, causal chain, stall attribution, root cause vs cascade, remediation and history."""
        detail = call(f"/api/v1/violations/{int(violation_id)}")
        return detail if "error" in detail else explanation_of(detail)

    @server.tool()
    def slo_status(slo_id: str | None = None) -> dict[str, Any]:
        """Error budget remaining, burn rates over 5m..3d and time to exhaustion of every SLO, or of one with the
        budget it lost by cause."""
        return call(f"/api/v1/slos/{slo_id}") if slo_id else call("/api/v1/slos")

    @server.tool()
    def recent_events(host: str | None = None, gpu: int | None = None, kind: str | None = None,
                      since: str | None = None, limit: int = 50) -> dict[str, Any]:
        """The newest stored events of a host or GPU (kind: e.g. cuda_oom, token_stall, mem_fragmentation)."""
        found = call("/api/v1/events", host=host, gpu=gpu, kind=kind, since=since, page_size=max(1, min(limit, 500)))
        if "items" not in found:
            return found
        return {"total": found["total"], "items": [_compact_event(e) for e in found["items"]]}

    return server
