"""The SLO pages in headless Chromium after replaying both recorded H200 token runs: budget, burn rates, the
server-drawn burn chart, causes linking to their violations, the budget on a violation's page; no CSP report."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, require_chromium, serving

from gpuslo.engine.config import Settings

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = [ROOT / "examples" / "incidents" / name for name in ("h200-token-stalls.jsonl",
                                                                  "h200-token-requests.jsonl")]


def _post(url: str, body: object) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.browser
def test_slo_pages_in_chromium(tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'gpuslo.db'}", rules_dir=ROOT / "rules",
                        rules_poll_seconds=0)
    with serving(settings) as (base, core):
        for recording in RECORDINGS:
            items = [json.loads(line) for line in recording.read_text().splitlines()]
            assert _post(f"{base}/api/v1/events", items)["accepted"] == len(items)
        assert core.wait_idle(timeout=30)
        listing = _get(f"{base}/api/v1/slos")["items"]
        (itl,) = [i for i in listing if i["slo"] == "token-latency"]
        detail = _get(f"{base}/api/v1/slos/{itl['id']}")
        problems: list[str] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.on("console", lambda m: problems.append(f"{m.type}: {m.text}")
                        if m.type in ("error", "warning") else None)
                page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
                page.goto(f"{base}/violations")
                page.locator("#nav-slos").click()
                page.wait_for_url(f"{base}/slos")
                row = page.locator(f"tr.slo-row[data-id='{itl['id']}']")
                assert row.count() == 1
                assert row.locator("meter").count() == 1
                assert row.locator("td.burn-rate[data-window='1h']").inner_text() == f"{itl['burn_rates']['1h']:.3g}×"
                assert "token-latency-burn-page" in row.locator("td.burn-alerts").inner_text()
                row.locator("a.slo-link").click()
                page.wait_for_url(f"{base}/slos/{itl['id']}")
                chart = page.locator("#burn-chart")
                assert chart.count() == 1 and chart.locator("polyline.burn").count() == 1
                assert chart.locator("circle.point").count() >= 1
                # The stylesheet drew the chart (a class, not an inline style: the CSP forbids those).
                stroke = page.evaluate("getComputedStyle(document.querySelector('polyline.burn')).stroke")
                assert stroke == "rgb(31, 95, 158)"
                remaining = page.locator("#budget-remaining").inner_text()
                assert remaining == f"{100 * itl['error_budget_remaining']:.1f} %"
                causes = page.locator("#causes tr.cause")
                assert causes.count() == len(detail["causes"]) >= 3
                top = detail["causes"][0]
                assert top["rule_id"] in causes.first.inner_text()
                page.screenshot(path=str(tmp_path / "slo.png"), full_page=True)
                causes.first.locator("a").click()
                page.wait_for_url(f"{base}/violations/{top['violation_id']}")
                cost = page.locator("#budget-cost").inner_text()
                assert f"{top['bad']} bad requests" in cost and "token-latency" in cost
            finally:
                browser.close()
    assert problems == []
