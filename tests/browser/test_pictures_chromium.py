"""Charts and the phone/dark layout in headless Chromium, on a server that replayed every recorded incident.

At 1400 px, at 420 px and in dark mode each page is screenshotted (into GPUSLO_SCREENSHOTS when set, else the
test's tmp folder); every chart must have drawn (a canvas with painted pixels and data points), nothing may
overflow sideways, and the console stays free of errors (CSP violations among them)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, require_chromium, serving
from test_ui_chromium import _record_problems

from gpuslo.engine.config import Settings

ROOT = Path(__file__).resolve().parents[2]
INCIDENTS = sorted((ROOT / "examples" / "incidents").glob("*.jsonl"))
# What each chart page must draw: (path, chart ids).
WIDTHS = {"wide": 1400, "phone": 420}

PAINTED_PIXELS = """(node) => {
  const canvas = node.querySelector('canvas');
  if (!canvas) { return 0; }
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < data.length; i += 4) { if (data[i] > 0) { painted++; } }
  return painted;
}"""
OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
# The elements sticking out on the right, for the failure message.
WIDE_ELEMENTS = """() => Array.from(document.querySelectorAll('body *'))
  .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1
                 || (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible'))
  .slice(-6).map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + e.scrollWidth + '/' + e.clientWidth + ' '
                 + e.textContent.slice(0, 60))"""


def _replay(core: Any) -> None:
    for path in INCIDENTS:
        items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        report = core.ingest(items)
        assert all(r.status in ("accepted", "duplicate") for r in report.results), path


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    folder = tmp_path_factory.mktemp("pictures")
    settings = Settings(database_url=f"sqlite:///{folder / 'gpuslo.db'}", rules_dir=ROOT / "rules")
    with serving(settings) as (base, core):
        _replay(core)
        assert core.wait_idle(timeout=60)
        yield base, core


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("GPUSLO_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _violation_with_evidence(base: str, page: Any) -> str:
    page.goto(f"{base}/violations?rule=fragmentation-then-stall")
    link = page.locator("a.violation-link").first
    return str(link.get_attribute("href"))


def _check_charts(page: Any, expected: int) -> list[dict[str, Any]]:
    charts = page.locator(".chart[data-chart]")
    assert charts.count() == expected, page.content()[:3000]
    drawn = []
    for index in range(charts.count()):
        chart = charts.nth(index)
        chart.wait_for(state="visible")
        points = int(chart.get_attribute("data-points") or 0)
        painted = chart.evaluate(PAINTED_PIXELS)
        drawn.append({"id": chart.get_attribute("id"), "points": points, "painted": painted})
    for found in drawn:
        assert found["points"] > 0 and found["painted"] > 500, drawn
    return drawn


def _token_series_replayed() -> int:
    """Token series (host, GPU, endpoint, model) in the replayed recordings, read from the files themselves: the
    tokens page draws one heatmap for each, at most 8."""
    keys = set()
    for path in INCIDENTS:
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line) if line.strip() else {}
            if event.get("kind") in ("token_latency", "token_stall"):
                attrs = event.get("attrs") or {}
                keys.add((event["host"], event.get("gpu"), attrs.get("endpoint"), attrs.get("model")))
    return min(len(keys), 8)


def _pages(base: str, violation_path: str) -> list[tuple[str, str, int]]:
    """(name, URL, charts on it)."""
    return [("violations", f"{base}/violations", 1), ("violation", f"{base}{violation_path}", 1),
            ("tokens", f"{base}/charts/tokens", _token_series_replayed()),
            ("memory", f"{base}/charts/memory?host=gpu-node-7", 4),
            ("memory-vm", f"{base}/charts/memory?host=vm&gpu=0", 1), ("events", f"{base}/events", 0)]


@pytest.mark.browser
@pytest.mark.parametrize(("layout", "scheme"), [("wide", "light"), ("phone", "light"), ("phone", "dark"),
                                                ("wide", "dark")])
def test_charts_render_and_nothing_overflows(replayed, tmp_path: Path, layout: str, scheme: str) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    base, _ = replayed
    shots = _shots(tmp_path)
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": WIDTHS[layout], "height": 900},
                                          color_scheme=scheme, timezone_id="Europe/Berlin")
            page = context.new_page()
            _record_problems(page, problems)
            violation_path = _violation_with_evidence(base, page)
            for name, url, expected in _pages(base, violation_path):
                page.goto(url)
                page.wait_for_load_state("load")
                drawn = _check_charts(page, expected)
                page.screenshot(path=str(shots / f"{name}-{layout}-{scheme}.png"), full_page=True)
                page.screenshot(path=str(shots / f"{name}-{layout}-{scheme}-top.png"), full_page=True,
                                clip={"x": 0, "y": 0, "width": WIDTHS[layout], "height": 1600})
                assert page.evaluate(OVERFLOW) <= 0, (f"{name} overflows sideways at {WIDTHS[layout]} px: "
                                                      f"{page.evaluate(WIDE_ELEMENTS)}")
                background = page.evaluate("getComputedStyle(document.body).backgroundColor")
                assert (background == "rgb(17, 22, 28)") == (scheme == "dark"), background
                assert all(d["points"] > 0 for d in drawn)
        finally:
            browser.close()
    assert problems == []
