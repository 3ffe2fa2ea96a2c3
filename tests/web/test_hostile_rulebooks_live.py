"""Hostile rulebooks against a real server (werkzeug on a free port, the real core) on SQLite and PostgreSQL:
summaries that raise, recurse, explode or loop still create their violation with the default text, and a broken
rulebook file keeps its last good version while the others are applied (reload endpoint and file watcher)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from live_server import open_and_serve
from web_support import app_settings

from gpuslo.engine.store.db import Database

HOSTILE_SUMMARIES = {
    "format-map-index": "{{ '{0.__class__}'.format_map(event) }}",  # IndexError
    "recursive-macro": "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",  # RecursionError
    "huge-product": "{{ event.host * 4000000 }}",  # stored 92 MB before
    "format-width": "{{ '{:>999999999}'.format(1) }}",  # a 1 GB string before
    "nested-loops": "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}"
                    "{% endfor %}{% endfor %}",  # 10^9 iterations
    "too-long": "{% for i in range(5) %}{{ event.message }}{% endfor %}",  # 40,000 characters > 16 KiB
    "zero-division": "{{ 1 / 0 }}",
}


def _rule(rule_id: str, summary: str) -> str:
    body = "\n".join(f"      {line}" for line in summary.splitlines())
    return (f"  - id: {rule_id}\n    title: Rule {rule_id}\n    slo: availability\n    severity: warning\n"
            f"    when: {{event: cuda_oom}}\n    summary: |-\n{body}\n    remediation: none\n")


def rulebook(name: str, rules: dict[str, str], version: str = "1") -> str:
    return (f"rulebook: {name}\nversion: \"{version}\"\nslos:\n  availability: {{service: s, sli: x, objective: y, "
            f"window: 28d}}\nrules:\n" + "".join(_rule(rule_id, summary) for rule_id, summary in rules.items()))


@contextmanager
def serving(database: Database, rules_dir: Path, **settings: Any) -> Iterator[tuple[str, Any]]:
    """The real app and core on `database`, served on a free loopback port; yields its URL and the core."""
    with open_and_serve(app_settings(database, rules_dir, **settings)) as served:
        yield served


def _oom(ident: str) -> dict[str, Any]:
    return {"id": ident, "kind": "cuda_oom", "time": "2025-01-01T00:00:00Z", "host": "node-a", "gpu": 0,
            "attrs": {"requested_bytes": 2 * 1024**3, "free_bytes": 1024**3}, "message": "m" * 8000}


def _violations(url: str) -> dict[str, dict[str, Any]]:
    items = httpx.get(f"{url}/api/v1/violations", params={"page_size": 100}, timeout=10).json()["items"]
    return {v["rule_id"]: v for v in items}


def test_hostile_summaries_create_their_violations_with_the_default_text(database: Database, tmp_path: Path):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    rules = {**HOSTILE_SUMMARIES, "plain": "OOM on {{ event.host }}"}
    (rules_dir / "hostile.yaml").write_text(rulebook("hostile", rules))
    with serving(database, rules_dir, max_body_bytes=1024 * 1024) as (url, core):
        assert httpx.get(f"{url}/api/v1/rulebooks", timeout=10).json()["problems"] == []
        assert httpx.post(f"{url}/api/v1/events", json=[_oom("oom-1")], timeout=30).status_code == 200
        assert core.wait_idle(30)
        got = _violations(url)
        for rule_id in HOSTILE_SUMMARIES:
            assert got[rule_id]["summary"] == f"Rule {rule_id} (host=node-a)", rule_id
        assert got["plain"]["summary"] == "OOM on node-a"
        # the batch was not retried forever: a later event is evaluated and folds into the same violations
        assert httpx.post(f"{url}/api/v1/events", json=[_oom("oom-2")], timeout=30).status_code == 200
        assert core.wait_idle(30)
        again = _violations(url)
        assert {rule_id: v["occurrences"] for rule_id, v in again.items()} == {r: 2 for r in got}
        page = httpx.get(f"{url}/violations", timeout=30)
        assert page.status_code == 200 and len(page.content) < 1024 * 1024


NESTED = "rulebook: b\nversion: \"2\"\nx: " + "[" * 10_000 + "]" * 10_000 + "\n"


def _status(url: str) -> tuple[dict[str, str], list[str]]:
    body = httpx.get(f"{url}/api/v1/rulebooks", timeout=10).json()
    return {rb["name"]: rb["version"] for rb in body["rulebooks"]}, body["problems"]


def _wait_for(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_a_broken_rulebook_keeps_its_last_good_version_and_the_others_apply(database: Database, tmp_path: Path):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    plain = {"plain": "OOM on {{ event.host }}"}
    (rules_dir / "a.yaml").write_text(rulebook("a", {"a-1": "a"}))
    (rules_dir / "b.yaml").write_text(rulebook("b", {"b-1": "b"}))
    with serving(database, rules_dir, rules_poll_seconds=0.2) as (url, _core):
        assert _status(url) == ({"a": "1", "b": "1"}, [])
        # the reload endpoint: b nests 10,000 levels deep; a changed and c is new, and both are applied
        (rules_dir / "b.yaml").write_text(NESTED)
        (rules_dir / "a.yaml").write_text(rulebook("a", {"a-1": "a", **plain}, version="2"))
        (rules_dir / "c.yaml").write_text(rulebook("c", {"c-1": "c"}))
        reload = httpx.post(f"{url}/api/v1/rulebooks/reload", timeout=30)
        assert reload.status_code == 200
        names = {rb["name"]: rb["version"] for rb in reload.json()["rulebooks"]}
        assert names == {"a": "2", "b": "1", "c": "1"}
        assert reload.json()["problems"] == [
            f"{rules_dir / 'b.yaml'}:3:67: nesting deeper than 64 levels is not allowed in a rulebook"]
        health = httpx.get(f"{url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["rulebook_errors"] == 1
        # the file watcher: b gets a NUL byte, c changes; c is applied, b stays at its last good version
        (rules_dir / "b.yaml").write_bytes(rulebook("b", {"b-1": "b\x00"}, version="3").encode())
        (rules_dir / "c.yaml").write_text(rulebook("c", {"c-1": "c"}, version="2"))
        assert _wait_for(lambda: _status(url)[0].get("c") == "2")
        versions, problems = _status(url)
        assert versions == {"a": "2", "b": "1", "c": "2"}
        assert problems == [f"{rules_dir / 'b.yaml'}:12:8: character U+0000 is not allowed in YAML "
                            "(special characters are not allowed)"]
        assert httpx.get(f"{url}/healthz", timeout=10).json()["rulebook_errors"] == 1
        # mended, b is applied by the watcher and the errors are gone
        (rules_dir / "b.yaml").write_text(rulebook("b", {"b-1": "b"}, version="4"))
        assert _wait_for(lambda: _status(url) == ({"a": "2", "b": "4", "c": "2"}, []))
        assert httpx.get(f"{url}/healthz", timeout=10).json()["rulebook_errors"] == 0
