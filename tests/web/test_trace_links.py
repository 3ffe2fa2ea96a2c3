"""Events with a W3C trace context: stored and served as sent, refused when malformed, linked from the violation
page to the trace UI of `trace_url_template` (none without one), and a bad template refused at start."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from werkzeug.serving import make_server

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.errors import ConfigError
from gpuslo.web import create_app
from gpuslo.web.trace_links import check_template

RULES = Path(__file__).resolve().parents[2] / "rules"
TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
OOM = {"id": "oom-traced", "kind": "cuda_oom", "time": "2026-11-29T12:00:00Z", "host": "node-3", "gpu": 1,
       "trace_id": TRACE, "span_id": SPAN,
       "attrs": {"requested_bytes": 2**31, "error_name": "cudaErrorMemoryAllocation"}}


def _serve(settings: Settings):
    core = Gpuslo.open(settings)
    http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    return core, http, thread, f"http://127.0.0.1:{http.server_port}"


@pytest.mark.parametrize("template", ["https://tempo.example/trace/{trace_id}?span={span_id}", ""])
def test_trace_ids_round_trip_and_link_from_the_violation_page(database, template: str) -> None:
    core, http, thread, url = _serve(Settings(database_url=database.url, rules_dir=RULES,
                                              trace_url_template=template))
    try:
        assert httpx.post(f"{url}/api/v1/events", json=OOM, timeout=10).status_code == 202
        bad = httpx.post(f"{url}/api/v1/events", json={**OOM, "id": "bad", "trace_id": "0" * 32}, timeout=10)
        assert bad.status_code == 422 and bad.json()["results"][0]["problems"][0]["field"] == "trace_id"
        assert core.wait_idle()
        stored = httpx.get(f"{url}/api/v1/events", params={"host": "node-3"}, timeout=10).json()["items"]
        assert [(e["trace_id"], e["span_id"]) for e in stored] == [(TRACE, SPAN)]
        violation = httpx.get(f"{url}/api/v1/violations", params={"rule": "cuda-oom"}, timeout=10).json()["items"][0]
        page = httpx.get(f"{url}/violations/{violation['id']}", timeout=10).text
    finally:
        http.shutdown()
        thread.join(timeout=10)
        core.close()
    if template:
        assert f'href="https://tempo.example/trace/{TRACE}?span={SPAN}"' in page
    else:
        assert 'class="trace-link"' not in page and f"trace {TRACE}" in page


@pytest.mark.parametrize("template", ["tempo/{trace_id}", "https://x.example/", "https://x/{trace_id}/{0.__class__}"])
def test_a_bad_template_is_refused(template: str) -> None:
    with pytest.raises(ConfigError, match="trace_url_template"):
        check_template(template)
