"""XSS payloads in every event field, label, rule name, summary and runbook, opened in headless Chromium.

Nothing may run: no dialog, no `window.__xss` marker, no CSP violation (a reported one would mean a payload
reached the page unescaped and only the policy stopped it), no failed request (an `<img src=x>` that rendered).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, require_chromium, serving

from gpuslo.engine.config import Settings
from gpuslo.engine.events import parse_event
from gpuslo.engine.store import repository, violations
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match

SCRIPT = "<script>window.__xss=1</script>"
IMG = "\"><img src=x onerror=window.__xss=1>"
PAYLOAD = SCRIPT + IMG + "'><svg onload=alert(1)>"
SHORT = "<svg onload=alert(1)>"
RULEBOOK = f"""
rulebook: xss
version: "1.0.0"
description: {json.dumps(PAYLOAD)}
requires: ">=0.1"
slos:
  availability:
    service: {json.dumps(PAYLOAD)}
    sli: {json.dumps(PAYLOAD)}
    objective: {json.dumps(PAYLOAD)}
    window: 28d
rules:
  - id: xss-rule
    title: {json.dumps("OOM " + PAYLOAD)}
    description: {json.dumps(PAYLOAD)}
    slo: availability
    severity: error
    when:
      event: cuda_oom
    group_by: [host, gpu]
    summary: >-
      on {{{{ event.host }}}} job {{{{ event.job }}}} {{{{ event.message }}}} {{{{ event.attrs.api }}}} {SCRIPT}
    remediation: {json.dumps(PAYLOAD)}
    runbook: {json.dumps("https://runbooks.example/a" + IMG)}
    labels: {{team: {json.dumps(PAYLOAD)}}}
"""
EVENT = {"id": "xss-1", "kind": "cuda_oom", "time": "2025-01-01T00:00:00Z", "host": PAYLOAD, "gpu": 0,
         "job": PAYLOAD, "source": SHORT, "message": PAYLOAD, "labels": {"team": PAYLOAD, "model": IMG},
         "attrs": {"api": PAYLOAD, "requested_bytes": 2 * 1024**3, "free_bytes": 1024**3, "error_name": PAYLOAD}}
WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation',
  (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));
"""


def _post(url: str, body: object) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type":
                                                                                   "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def _seed_javascript_runbook(core: Any) -> int:
    """A violation stored straight through the repository (rulebook validation would refuse it)."""
    event = parse_event({**EVENT, "id": "xss-2", "host": "node-js"})
    explanation = Explanation(conditions=(ConditionResult(PAYLOAD, "requested_bytes", PAYLOAD, True),),
                              evidence=(event,), chain=(ChainLink(event.id, event.kind, event.time, PAYLOAD),))
    now = datetime(2025, 1, 1, tzinfo=UTC)
    match = Match(rule_id="js-runbook", rule_title=PAYLOAD, rulebook=PAYLOAD, rulebook_version="1",
                  rulebook_hash="a" * 64, slo=PAYLOAD, slo_objective=PAYLOAD, severity="critical",
                  group_key="host=node-js", group=MappingProxyType({"host": PAYLOAD}), summary=PAYLOAD,
                  remediation=PAYLOAD, runbook="javascript:window.__xss=1", explanation=explanation,
                  seen_at=event.time, labels=MappingProxyType({"team": PAYLOAD}))
    with core.database.session() as session:
        repository.store_events(session, [event], now=now)
        return violations.record_match(session, match, now=now).id


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "xss.yaml").write_text(RULEBOOK, encoding="utf-8")
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'gpuslo.db'}", rules_dir=rules,
                        secret_key_file=tmp_path / "secret_key")

    def loaded_clean(core: Any) -> None:
        assert core.rulebooks.status().problems == (), core.rulebooks.status().problems

    with serving(settings, loaded_clean) as served:
        yield served


@pytest.mark.browser
def test_payloads_never_run_in_chromium(server) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    base, core = server
    assert _post(f"{base}/api/v1/events", EVENT) in (200, 202)
    assert core.wait_idle(timeout=20)
    fired = _violation_ids(core)
    assert fired, "the xss rule did not fire"
    js_id = _seed_javascript_runbook(core)
    core.lifecycle.comment(fired[0], actor=PAYLOAD, comment=PAYLOAD, source="127.0.0.1")
    now = datetime.now(UTC)
    core.lifecycle.create_silence(matchers={"host": PAYLOAD, "labels.team": PAYLOAD}, starts_at=now,
                        ends_at=now + timedelta(hours=1), author=PAYLOAD, comment=PAYLOAD)
    pages = ["/violations", *(f"/violations/{v}" for v in (*fired, js_id)), "/events", "/rulebooks", "/silences",
             "/audit", "/login"]
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.add_init_script(WATCH)
            page.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}")
                    if not r.url.endswith("favicon.svg") else None)
            for path in pages:
                page.goto(base + path)
                page.wait_for_load_state("load")
                assert page.evaluate("window.__xss") is None, path
                assert page.evaluate("window.__csp") == [], path
                assert page.locator("img[src='x'], svg[onload]").count() == 0, path
                if path.startswith("/violations/"):
                    assert PAYLOAD in page.locator("main").inner_text(), f"{path} does not show the payload as text"
            page.goto(f"{base}/violations/{js_id}")
            assert page.locator("a[href^='javascript']").count() == 0
        finally:
            browser.close()
    assert problems == []


def _violation_ids(core: Any) -> list[int]:
    from gpuslo.engine.store.read_models import ViolationFilter

    with core.database.session(readonly=True) as session:
        return [v.id for v in repository.list_violations(session, ViolationFilter(rule_id="xss-rule")).items]
