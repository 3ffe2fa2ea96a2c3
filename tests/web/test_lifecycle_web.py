"""Lifecycle through the API and the UI forms on the real core: transitions, 409s, comments, silences."""

from __future__ import annotations

import re
from html import unescape

from web_support import assert_no_inline_code, seed_violation

from gpuslo.engine.events import parse_event


def _frag(event_id: str, host: str = "node-1"):
    return parse_event({"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": host,
                        "gpu": 0, "attrs": {"fragmentation_ratio": 0.71}})


def _post(client, url: str, body: dict | None = None, status: int = 200):
    response = client.post(url, json=body) if body is not None else client.post(url)
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    return response.get_json()


def test_api_transitions_and_history(client, core):
    vid = seed_violation(core.database, [_frag("f-1")]).id
    base = f"/api/v1/violations/{vid}"
    acked = _post(client, f"{base}/acknowledge", {"comment": "on it", "actor": "alice"})
    assert (acked["status"], acked["acknowledged_by"]) == ("acknowledged", "alice")
    assert _post(client, f"{base}/resolve")["resolved_by"] == "anonymous"
    assert _post(client, f"{base}/reopen", {"actor": "bob"})["status"] == "open"
    _post(client, f"{base}/comments", {"comment": "restarted", "actor": "bob"}, status=201)
    history = client.get(base).get_json()["history"]
    assert [(h["action"], h["actor"], h["status_before"], h["status_after"], h["comment"]) for h in history] == [
        ("created", "engine", None, "open", None),
        ("acknowledged", "alice", "open", "acknowledged", "on it"),
        ("resolved", "anonymous", "acknowledged", "resolved", None),
        ("reopened", "bob", "resolved", "open", None),
        ("commented", "bob", "open", "open", "restarted"),
    ]
    assert {h["source"] for h in history[1:]} == {"127.0.0.1"}


def test_api_invalid_transitions_are_409_in_the_envelope(client, core):
    vid = seed_violation(core.database, [_frag("f-1")]).id
    _post(client, f"/api/v1/violations/{vid}/resolve")
    error = _post(client, f"/api/v1/violations/{vid}/resolve", status=409)["error"]
    assert error == {"status": 409, "code": "invalid_transition", "message": f"violation {vid} is already resolved",
                     "details": []}
    error = _post(client, f"/api/v1/violations/{vid}/acknowledge", {}, status=409)["error"]
    assert error["message"] == f"violation {vid} is resolved; reopen it before acknowledging"
    assert _post(client, "/api/v1/violations/999/resolve", status=404)["error"]["code"] == "not_found"
    assert _post(client, f"/api/v1/violations/{vid}/comments", {"comment": "  "}, status=400)["error"][
        "details"] == [{"field": "comment", "reason": "is required and may not be empty"}]
    response = client.post(f"/api/v1/violations/{vid}/reopen", data="[1]", content_type="application/json")
    assert response.status_code == 400 and "JSON object" in response.get_json()["error"]["message"]


def test_api_silences_create_list_expire(client, core):
    created = _post(client, "/api/v1/silences", {"matchers": {"host": "node-1", "labels.team": "serving"},
                                                 "duration": "2h", "author": "alice", "comment": "maintenance"},
                    status=201)
    assert created["active"] and created["matchers"] == {"host": "node-1", "labels.team": "serving"}
    items = client.get("/api/v1/silences").get_json()["items"]
    assert [s["id"] for s in items] == [created["id"]]
    expired = _post(client, f"/api/v1/silences/{created['id']}/expire", {"actor": "bob"})
    assert (expired["active"], expired["expired_by"]) == (False, "bob")
    assert client.get("/api/v1/silences?include_expired=false").get_json()["items"] == []
    again = _post(client, f"/api/v1/silences/{created['id']}/expire", status=409)["error"]
    assert "already expired" in again["message"]
    bad = _post(client, "/api/v1/silences", {"matchers": {"colour": "red"}, "duration": "1h", "comment": "x"},
                status=400)["error"]
    assert bad["code"] == "invalid_silence" and "unknown matcher 'colour'" in bad["message"]
    assert _post(client, "/api/v1/silences", {"matchers": {"host": "a"}, "comment": "x"}, status=400)["error"][
        "details"][0]["field"] == "ends_at"


def _page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert_no_inline_code(html)
    return html


def _csrf(html: str) -> str:
    """The session's CSRF token from a page's form: every UI form post must carry it."""
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _form_action(html: str, button_id: str) -> str:
    return unescape(re.search(rf'id="{button_id}" formaction="([^"]+)"', html).group(1))


def test_ui_buttons_change_status_and_show_history(client, core):
    vid = seed_violation(core.database, [_frag("f-1")]).id
    html = _page(client, f"/violations/{vid}")
    assert 'id="acknowledge-button"' in html and 'id="reopen-button"' not in html
    response = client.post(_form_action(html, "acknowledge-button"), data={"actor": "alice", "comment": "on it",
                                                                             "csrf_token": _csrf(html)})
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/violations/{vid}")
    html = _page(client, f"/violations/{vid}")
    assert re.search(r'id="violation-status">acknowledged<', html)
    assert 'id="acknowledge-button"' not in html
    row = re.findall(r'<tr class="history-row" data-action="acknowledged">(.*?)</tr>', html, re.S)[0]
    assert "alice" in row and "open → acknowledged" in row and "on it" in row and "127.0.0.1" in row
    client.post(_form_action(html, "resolve-button"), data={"actor": "bob", "csrf_token": _csrf(html)})
    html = _page(client, f"/violations/{vid}")
    assert re.search(r'id="violation-status">resolved<', html) and 'id="reopen-button"' in html
    comment_url = unescape(re.search(r'id="comment-form" method="post" action="([^"]+)"', html).group(1))
    assert client.post(comment_url, data={"actor": "bob", "comment": "<b>fixed</b>",
                                               "csrf_token": _csrf(html)}).status_code == 303
    html = _page(client, f"/violations/{vid}")
    assert "&lt;b&gt;fixed&lt;/b&gt;" in html and "<b>fixed</b>" not in html
    conflict = client.post(f"/violations/{vid}/resolve", data={"actor": "bob", "csrf_token": _csrf(html)})
    assert conflict.status_code == 409 and "already resolved" in conflict.get_data(as_text=True)


def test_ui_flapping_badge(client, core):
    from datetime import UTC, datetime, timedelta

    from gpuslo.engine.store import lifecycle

    vid = seed_violation(core.database, [_frag("f-0")]).id
    assert 'id="flapping-badge"' not in _page(client, f"/violations/{vid}")
    seeded_at = datetime(2025, 1, 1, tzinfo=UTC)  # seed_violation records every match at this time
    for n in range(1, 4):
        with core.database.session() as session:
            lifecycle.resolve(session, vid, actor="alice", now=seeded_at - timedelta(seconds=10 - n))
        again = seed_violation(core.database, [_frag(f"f-{n}")])
        assert again.id == vid
    html = _page(client, f"/violations/{vid}")
    assert 'id="flapping-badge"' in html and 'id="flaps">3 times<' in html


def test_ui_silences_page_create_and_expire(client):
    html = _page(client, "/silences")
    assert 'id="no-silences"' in html and 'id="silence-form"' in html
    response = client.post("/silences", data={"host": "node-1", "labels": "team=serving", "duration": "2h",
                                              "author": "alice", "comment": "maintenance",
                                              "csrf_token": _csrf(html)})
    assert response.status_code == 303
    html = _page(client, "/silences")
    row = re.search(r'<tr class="silence-row " id="silence-(\d+)">(.*?)</tr>', html, re.S)
    assert "host=node-1" in row.group(2) and "labels.team=serving" in row.group(2) and ">active<" in row.group(2)
    expire = client.post(f"/silences/{row.group(1)}/expire", data={"actor": "bob", "csrf_token": _csrf(html)})
    assert expire.status_code == 303
    html = _page(client, "/silences")
    assert "expired by bob" in html and "expire-button" not in html
    refused = client.post("/silences", data={"duration": "2h", "comment": "everything", "csrf_token": _csrf(html)})
    assert refused.status_code == 400 and "at least one matcher" in refused.get_data(as_text=True)
