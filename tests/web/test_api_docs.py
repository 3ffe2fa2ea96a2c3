"""docs/api.md documents every route of the app: the route table matches app.url_map both ways (with each
route's permission), every API route has its own description, and every in-page link has its section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuslo.web import create_app
from gpuslo.web.policy import ROUTE_POLICY

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE)` \| `([^`]+)` \| `([a-z]+)` \|", re.MULTILINE)
MENTION = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[\w/{}.-]*)")
API_PREFIXES = ("/api/", "/healthz", "/metrics")


def _paths(rule: str) -> list[str]:
    """A Flask rule as documented: `<int:name>` → `{name}`; an `any(a, b)` converter → one path per choice."""
    choice = re.search(r"<any\(([^)]*)\):[^>]+>", rule)
    if choice:
        return [p for option in choice.group(1).split(",")
                for p in _paths(rule[:choice.start()] + option.strip() + rule[choice.end():])]
    return [re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule)]


def _app_routes(fake_core) -> dict[tuple[str, str], str]:
    """(method, documented path) → the permission gpuslo.web.policy gives its endpoint."""
    app = create_app(fake_core.settings, core=fake_core)
    routes = {}
    for rule in app.url_map.iter_rules():
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            for path in _paths(rule.rule):
                routes[(method, path)] = ROUTE_POLICY[rule.endpoint]
    return routes


def _route_table(text: str) -> dict[tuple[str, str], str]:
    return {(m.group(1), m.group(2)): m.group(3) for m in ROW.finditer(text)}


def _generic(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_route_table_lists_every_route_and_nothing_else(fake_core):
    routes = _app_routes(fake_core)
    table = _route_table(DOC.read_text(encoding="utf-8"))
    assert len(routes) > 30  # the app really was inspected
    missing = sorted(set(routes) - set(table))
    stale = sorted(set(table) - set(routes))
    assert missing == [], "add these routes to the table under '## Every route' in docs/api.md"
    assert stale == [], "docs/api.md lists routes the app does not have"
    wrong = sorted(f"{m} {p}: docs say {table[(m, p)]}, policy says {need}" for (m, p), need in routes.items()
                   if table[(m, p)] != need)
    assert wrong == []


def test_every_api_route_is_described_outside_the_table(fake_core):
    text = DOC.read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not ROW.match(line))
    described = {(m.group(1), _generic(m.group(2))) for m in MENTION.finditer(body)}
    undescribed = sorted(f"{m} {p}" for m, p in _app_routes(fake_core)
                         if p.startswith(API_PREFIXES) and (m, _generic(p)) not in described)
    assert undescribed == [], "describe these API routes in a section of docs/api.md"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_in_page_links_point_at_sections():
    text = DOC.read_text(encoding="utf-8")
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links, "the route table links to its sections"
    assert sorted(links - anchors) == []


@pytest.mark.parametrize(("rule", "expected"), [
    ("/api/v1/notifications/<int:notification_id>/retry", ["/api/v1/notifications/{notification_id}/retry"]),
    ("/v/<int:id>/<any(ack, resolve):action>", ["/v/{id}/ack", "/v/{id}/resolve"]),
    ("/static/<path:filename>", ["/static/{filename}"]),
])
def test_rule_to_documented_path(rule, expected):
    assert _paths(rule) == expected
