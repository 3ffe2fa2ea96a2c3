"""`gpuslo violations ...` and `gpuslo silences ...` against a real server on both databases: table, JSON and
YAML output, actions, and the documented exit codes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cli_support import EXAMPLE_INCIDENT, RULES_DIR, LiveServer
from click.testing import CliRunner
from werkzeug.serving import make_server

from gpuslo.cli.main import main
from gpuslo.engine.config import Settings
from gpuslo.web import create_app


@pytest.fixture
def server(database) -> Iterator[LiveServer]:
    from gpuslo.engine.core import Gpuslo

    settings = Settings(database_url=database.url, rules_dir=RULES_DIR)
    core = Gpuslo.open(settings)
    core.ingest([json.loads(line) for line in EXAMPLE_INCIDENT.read_text().splitlines() if line.strip()])
    assert core.wait_idle()
    http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield LiveServer(f"http://127.0.0.1:{http.server_port}", core)
    finally:
        http.shutdown()
        thread.join(timeout=10)
        core.close()


def gpuslo(server: LiveServer, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args[:2], *args[2:], "--server", server.url], catch_exceptions=False)
    return result.exit_code, result.output


def test_list_show_as_table_json_and_yaml(server: LiveServer) -> None:
    code, text = gpuslo(server, "violations", "list")
    assert code == 0 and text.splitlines()[0].split()[:4] == ["ID", "STATUS", "SEVERITY", "RULE"]
    assert "fragmentation-then-stall" in text and "violations, page 1" in text
    code, text = gpuslo(server, "violations", "list", "-o", "json", "--rule", "cuda-oom")
    listed = json.loads(text)
    assert code == 0 and listed["total"] == 1 and listed["items"][0]["rule_id"] == "cuda-oom"
    code, text = gpuslo(server, "violations", "list", "-o", "yaml", "--severity", "critical")
    assert code == 0 and {v["severity"] for v in yaml.safe_load(text)["items"]} == {"critical"}
    violation_id = listed["items"][0]["id"]
    code, text = gpuslo(server, "violations", "show", str(violation_id))
    assert code == 0 and f"violation {violation_id}:" in text and "rule       cuda-oom" in text
    assert "evidence" in text


def test_ack_comment_resolve_and_the_exit_codes(server: LiveServer, closed_port: int) -> None:
    code, text = gpuslo(server, "violations", "list", "-o", "json", "--status", "open")
    violation_id = json.loads(text)["items"][0]["id"]
    assert gpuslo(server, "violations", "ack", str(violation_id), "-c", "looking") == (
        0, f"violation {violation_id} is acknowledged\n")
    code, text = gpuslo(server, "violations", "comment", str(violation_id), "drained the node")
    assert code == 0
    code, text = gpuslo(server, "violations", "resolve", str(violation_id), "-o", "json")
    assert code == 0 and json.loads(text)["status"] == "resolved"
    code, text = gpuslo(server, "violations", "show", str(violation_id), "-o", "json")
    actions = [h["action"] for h in json.loads(text)["history"]]
    assert "acknowledged" in " ".join(actions) and "comment" in " ".join(actions)
    # 1: refused by the server (an invalid transition, an unknown violation, a bad filter named by its field)
    code, text = gpuslo(server, "violations", "ack", str(violation_id))
    assert code == 1 and "409" in text
    code, text = gpuslo(server, "violations", "show", "999999")
    assert code == 1 and "404" in text
    code, text = gpuslo(server, "violations", "list", "--filter", "since=yesterday")
    assert code == 1 and "since" in text
    # 2: no server there
    result = CliRunner().invoke(main, ["violations", "list", "--server", f"http://127.0.0.1:{closed_port}"])
    assert result.exit_code == 2 and "cannot reach" in result.output


def test_silences_add_list_expire(server: LiveServer) -> None:
    code, text = gpuslo(server, "silences", "add", "host=node-7", "rule=token-stall", "team=serving", "-d", "2h",
                        "-c", "draining", "-a", "alice", "-o", "json")
    made = json.loads(text)
    assert code == 0 and made["matchers"] == {"host": "node-7", "rule_id": "token-stall", "labels.team": "serving"}
    code, text = gpuslo(server, "silences", "list")
    assert code == 0 and "host=node-7" in text and "draining" in text
    code, text = gpuslo(server, "silences", "expire", str(made["id"]))
    assert code == 0 and f"silence {made['id']} expired" in text
    code, text = gpuslo(server, "silences", "list", "-o", "json")
    assert json.loads(text)["items"] == []
    code, text = gpuslo(server, "silences", "list", "--expired", "-o", "json")
    assert [s["id"] for s in json.loads(text)["items"]] == [made["id"]]
    code, text = gpuslo(server, "silences", "add", "nonsense", "-c", "x")
    assert code == 2 and "NAME=VALUE" in text


def test_help_short_flag_and_completion_scripts() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["-h"], prog_name="gpuslo").output.startswith("Usage: gpuslo [OPTIONS]")
    assert runner.invoke(main, ["violations", "list", "-h"], prog_name="gpuslo").output.startswith(
        "Usage: gpuslo violations list")
    for shell, marker in (("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --no-files")):
        result = runner.invoke(main, ["completion", shell])
        assert result.exit_code == 0 and marker in result.output and "_GPUSLO_COMPLETE" in result.output


def test_documented_exit_codes_are_the_ones_used() -> None:
    from gpuslo.cli.api_client import EXIT_REFUSED, EXIT_UNREACHABLE

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert EXIT_REFUSED == 1 and EXIT_UNREACHABLE == 2
    assert "exit **0** on success, **1** when the server refused" in readme


def test_slos_list_and_show(server: LiveServer) -> None:
    code, text = gpuslo(server, "slos", "list", "-o", "json")
    listed = json.loads(text)["items"]
    assert code == 0 and listed and all("burn_rates" in i and "error_budget_remaining" in i for i in listed)
    code, text = gpuslo(server, "slos", "list")
    assert code == 0 and text.splitlines()[0].split()[:3] == ["ID", "OBJECTIVE", "GOOD"] and listed[0]["id"] in text
    code, text = gpuslo(server, "slos", "show", listed[0]["id"], "-o", "json")
    shown = json.loads(text)
    assert code == 0 and shown["id"] == listed[0]["id"] and "causes" in shown and "unattributed" in shown
    code, text = gpuslo(server, "slos", "show", "no-such-slo")
    assert code == 1 and "404" in text
