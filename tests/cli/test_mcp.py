"""`gpuslo mcp` driven by the official MCP SDK's own stdio client, against a real server with a read token."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from cli_support import EXAMPLE_INCIDENT, RULES_DIR, LiveServer
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from werkzeug.serving import make_server

from gpuslo.engine.config import Settings
from gpuslo.web import create_app


@pytest.fixture
def server_with_token(tmp_path: Path) -> Iterator[tuple[LiveServer, str, str]]:
    """A server holding the example incident, with access control on: (server, read token, ingest token)."""
    from gpuslo.engine.access import INGEST, READ
    from gpuslo.engine.core import Gpuslo
    from gpuslo.engine.store import credentials

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'gpuslo.db'}", rules_dir=RULES_DIR)
    core = Gpuslo.open(settings)
    core.ingest([json.loads(line) for line in EXAMPLE_INCIDENT.read_text().splitlines() if line.strip()])
    assert core.wait_idle()
    with core.database.session() as session:
        read = credentials.create_token(session, name="assistant", scopes=[READ], now=datetime.now(UTC))[1]
        ingest = credentials.create_token(session, name="probes", scopes=[INGEST], now=datetime.now(UTC))[1]
    http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield LiveServer(f"http://127.0.0.1:{http.server_port}", core), read, ingest
    finally:
        http.shutdown()
        thread.join(timeout=10)
        core.close()


async def _session_calls(url: str, token: str) -> dict[str, object]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "gpuslo.cli.main", "mcp", "--server", url],
                                   env={**os.environ, "GPUSLO_TOKEN": token})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        listed = await session.call_tool("list_violations", {"status": "open", "limit": 50})
        found = json.loads(listed.content[0].text)
        oom = next(v for v in found["items"] if v["rule_id"] == "cuda-oom")
        explained = await session.call_tool("explain_violation", {"violation_id": oom["id"]})
        events = await session.call_tool("recent_events", {"host": oom["host"], "limit": 5})
        slos = await session.call_tool("slo_status", {})
        return {"tools": sorted(t.name for t in tools.tools), "listed": found,
                "explained": json.loads(explained.content[0].text), "events": json.loads(events.content[0].text),
                "slos": json.loads(slos.content[0].text)}


def test_the_sdk_client_lists_explains_and_reads_events(server_with_token) -> None:
    server, read_token, _ = server_with_token
    got = anyio.run(_session_calls, server.url, read_token)
    assert got["tools"] == ["explain_violation", "list_violations", "recent_events", "slo_status"]
    assert got["listed"]["total"] >= 5
    explained = got["explained"]
    assert explained["rule"]["id"] == "cuda-oom" and explained["conditions"]
    assert all("observed" in c for c in explained["conditions"]) and explained["evidence"]
    assert explained["remediation"] and explained["slo"]["id"]
    assert got["events"]["items"] and all(e["host"] == explained["where"]["host"] for e in got["events"]["items"])
    assert "error" in got["slos"] or "items" in got["slos"]


def test_a_token_without_read_scope_gets_errors_not_data(server_with_token) -> None:
    server, _, ingest_token = server_with_token
    got = anyio.run(_session_calls_refused, server.url, ingest_token)
    assert got["status"] == 403 and "read" in got["error"]


async def _session_calls_refused(url: str, token: str) -> dict[str, object]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "gpuslo.cli.main", "mcp", "--server", url],
                                   env={**os.environ, "GPUSLO_TOKEN": token})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.call_tool("list_violations", {})
        return json.loads(listed.content[0].text)
