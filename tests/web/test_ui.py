"""Server-rendered pages on the real core: content, escaping, safe links, filters, error pages, headers."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from web_support import RULES_DIR, app_settings, assert_no_inline_code, seed_violation

from gpuslo.engine.events import parse_event
from gpuslo.web import create_app

BROKEN_RULEBOOK = 'rulebook: broken\nversion: "1"\nrules:\n  - id: x\n    withn: 3\n'


def _frag(event_id: str, ratio: float = 0.71, **extra: Any):
    body = {"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": "node-1",
            "gpu": 0, "attrs": {"fragmentation_ratio": ratio}}
    return parse_event({**body, **extra})


def _page(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert response.mimetype == "text/html"
    assert response.headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"
    html = response.get_data(as_text=True)
    assert_no_inline_code(html)
    return html


def test_root_redirects_to_violations(client):
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"].endswith("/violations")


def test_violations_table_lists_rows_newest_first_with_pagination(client, core):
    for n in range(3):
        seed_violation(core.database, [_frag(f"f-{n}")], rule_id=f"rule-{n}", rule_title=f"Title {n}",
                       seen_at=_frag("x").time.replace(hour=n))
    html = _page(client, "/violations")
    assert 'id="violations-table"' in html
    rows = re.findall(r'class="violation-row" id="violation-\d+" data-rule="([^"]+)"', html)
    assert rows == ["rule-2", "rule-1"]  # page_size is 2 in the tests
    assert 'id="page-next"' in html and "3 in all" in html
    older = _page(client, "/violations?severity=warning&page=2")
    assert re.findall(r'data-rule="([^"]+)"', older) == ["rule-0"]
    assert unescape(re.search(r'id="page-prev" href="([^"]+)"', older).group(1)) == (
        "/violations?severity=warning&page=1")


def test_violations_filters(client, core):
    seed_violation(core.database, [_frag("a-1")], rule_id="frag-high")
    assert "frag-high" in _page(client, "/violations?rule=frag-high&status=open&gpu=0")
    assert 'id="no-violations"' in _page(client, "/violations?host=elsewhere")
    html = _page(client, "/violations?since=tomorrow", status=400)
    assert "since" in html and "RFC 3339" in html


def test_violation_detail_explains_and_escapes(client, core):
    events = [_frag("ev-x", host="<b>node</b>", message="<script>alert(1)</script>")]
    seeded = seed_violation(core.database, events, remediation="<img src=x onerror=alert(1)>\nstep two",
                            summary="<i>summary</i>", runbook="javascript:alert(1)")
    html = _page(client, f"/violations/{seeded.id}")
    for marker in ('id="explanation"', 'id="evidence"', 'id="conditions"', 'id="chain"', 'id="remediation"'):
        assert marker in html
    assert "<code>0.71</code>" in html and "✔ holds" in html
    assert "&lt;b&gt;node&lt;/b&gt;" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;\nstep two" in html
    assert "&lt;i&gt;summary&lt;/i&gt;" in html
    assert 'href="javascript' not in html and 'id="runbook-text"' in html
    assert "memory 1.2.0" in html and "ab12cd34ef56</code>" in html
    assert "99.9% of requests succeed over 30d" in html and "host=&lt;b&gt;node&lt;/b&gt;,gpu=0" in html


def test_https_runbook_becomes_a_link(client, core):
    seeded = seed_violation(core.database, [_frag("r-1")], runbook="https://runbooks.example/frag")
    assert 'id="runbook" href="https://runbooks.example/frag"' in _page(client, f"/violations/{seeded.id}")


def test_missing_violation_is_an_html_404(client):
    html = _page(client, "/violations/424242", status=404)
    assert "No violation with id 424242" in html


def test_events_page_search(client, core):
    seed_violation(core.database, [_frag("s-1"), _frag("s-2", host="node-2")])
    html = _page(client, "/events?host=node-2")
    assert 'id="events-table"' in html and "s-2" in html and "s-1" not in html
    assert 'id="no-events"' in _page(client, "/events?kind=cuda_oom")
    assert "kind" in _page(client, "/events?kind=nonsense", status=400)


def test_rulebooks_page_empty(client):
    html = _page(client, "/rulebooks")
    assert 'id="no-rulebooks"' in html and 'id="rulebook-errors"' not in html


@pytest.mark.parametrize("url", ["/static/style.css", "/static/favicon.svg"])
def test_static_files_are_served(client, url):
    with client.get(url) as response:
        assert response.status_code == 200
        assert response.headers["X-Content-Type-Options"] == "nosniff"


@pytest.fixture
def rules_client(database, tmp_path):
    """An app whose rules folder holds the shipped memory rulebook and one broken rulebook."""
    from gpuslo.engine.core import Gpuslo

    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "memory.yaml").write_text((RULES_DIR / "memory.yaml").read_text())
    (rules_dir / "broken.yaml").write_text(BROKEN_RULEBOOK)
    core = Gpuslo.open(app_settings(database, rules_dir))
    yield create_app(core.settings, core=core).test_client()
    core.close()


def test_rulebooks_page_shows_rules_and_load_errors(rules_client):
    html = _page(rules_client, "/rulebooks")
    assert 'id="rulebook-errors"' in html and "broken.yaml" in html
    assert 'id="rulebook-memory"' in html and 'id="rule-fragmentation-high"' in html
    api = rules_client.get("/api/v1/rulebooks").get_json()
    assert any("broken.yaml" in problem for problem in api["problems"])
    memory = next(rb for rb in api["rulebooks"] if rb["name"] == "memory")
    assert "fragmentation-high" in [rule["id"] for rule in memory["rules"]]
    assert rules_client.get("/healthz").get_json()["rulebook_errors"] >= 1
