"""The UI in headless Chromium: shipped rules fire, the explanation shows observed values, CSP holds."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, require_chromium, serving

from gpuslo.engine.config import Settings

RULES_DIR = Path(__file__).resolve().parents[2] / "rules"

EVENTS = [
    {"id": "browser-frag-1", "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": "node-7",
     "gpu": 3, "source": "test", "attrs": {"scope": "allocator", "fragmentation_ratio": 0.71,
                                           "free_bytes": 8 * 1024**3, "largest_free_bytes": 2 * 1024**3}},
    {"id": "browser-oom-1", "kind": "cuda_oom", "time": "2025-01-01T00:00:05Z", "host": "node-7", "gpu": 3,
     "source": "test", "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
     "attrs": {"api": "cudaMalloc", "requested_bytes": 2 * 1024**3, "free_bytes": 1024**3,
               "error_code": 2, "error_name": "cudaErrorMemoryAllocation"}},
]


def _request(url: str, body: object | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """The real app on a free local port, on SQLite, with the shipped rulebooks."""
    with serving(Settings(database_url=f"sqlite:///{tmp_path / 'gpuslo.db'}", rules_dir=RULES_DIR)) as served:
        yield served


def _fragmentation_violation(base: str) -> dict[str, Any]:
    _, listing = _request(f"{base}/api/v1/violations?page_size=500")
    for item in listing["items"]:
        if any(c["observed"] == 0.71 for c in item["explanation"].get("conditions", [])):
            return item
    raise AssertionError(f"no violation explained by fragmentation_ratio 0.71 in {listing['items']}")


def _record_problems(page: Any, problems: list[str]) -> None:
    """Console errors and warnings (CSP violations among them), page errors and failed requests."""

    def on_console(message: Any) -> None:
        if message.type in ("error", "warning"):
            problems.append(f"console {message.type}: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    def on_request_failed(request: Any) -> None:
        # Chromium aborts a pending favicon fetch when the next navigation starts; that is not a fault.
        if not (request.failure == "net::ERR_ABORTED" and request.url.endswith("favicon.svg")):
            problems.append(f"request failed: {request.url} {request.failure}")

    page.on("requestfailed", on_request_failed)


@pytest.mark.browser
def test_violation_explanation_in_chromium(server) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    base, core = server
    status, report = _request(f"{base}/api/v1/events", EVENTS)
    assert status == 200 and report["accepted"] == len(EVENTS), report
    assert core.wait_idle(timeout=20)
    violation = _fragmentation_violation(base)

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            _record_problems(page, problems)

            page.goto(f"{base}/violations")
            rows = page.locator("#violations-table tr.violation-row")
            assert rows.count() >= 2, page.content()
            assert page.locator(f"#violation-{violation['id']}").count() == 1

            page.locator(f"#violation-{violation['id']} a.violation-link").click()
            page.wait_for_url(f"{base}/violations/{violation['id']}")
            assert page.locator("#violation-title").inner_text() == violation["rule_title"]
            explanation = page.locator("#explanation")
            assert "kind = mem_fragmentation" in explanation.locator("tr.condition").first.inner_text()
            condition = explanation.locator("tr.condition", has_text="fragmentation_ratio")
            assert condition.count() == 1
            assert condition.locator("td.observed").inner_text() == "0.71"
            assert "holds" in condition.locator("td.mark").inner_text()
            evidence = page.locator("#evidence")
            assert "browser-frag-1" in evidence.inner_text()
            assert page.locator("#remediation").inner_text().strip()
            stylesheet_applied = page.evaluate(
                "getComputedStyle(document.querySelector('#remediation')).whiteSpace")
            assert stylesheet_applied == "pre-wrap"

            page.goto(f"{base}/rulebooks")
            assert page.locator("article.rulebook").count() >= 1
            page.goto(f"{base}/events?kind=cuda_oom")
            assert "browser-oom-1" in page.locator("#events-table").inner_text()
        finally:
            browser.close()
    assert problems == []
