"""Helpers of the SLO tests: a rulebook with one measured SLO, request events, and the brute-force figures."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.rulebook.model import Rulebook

T0 = datetime(2026, 1, 5, tzinfo=UTC)
_IDS = itertools.count()

RULEBOOK = """\
rulebook: slo-test
version: "1.0.0"
slos:
  itl:
    service: llm-serving
    sli: max inter-token gap per request
    objective: "99 % of requests without a 200 ms gap"
    window: {window}
    indicator:
      requests: {{event: token_latency, if: "tokens > 0"}}
      good: itl_max_ms < 200ms
      target: {target}
      group_by: [endpoint]
{extra}
rules:
  - id: frag
    title: fragmentation
    slo: itl
    severity: warning
    when: {{event: mem_fragmentation, if: fragmentation_ratio > 0.65}}
    group_by: [host, gpu]
    summary: frag
    remediation: none
"""


def measured_rulebook(window: str = "28d", target: float = 0.99, extra: str = "") -> Rulebook:
    return load_rulebook_text(RULEBOOK.format(window=window, target=target, extra=extra), "slo-test.yaml")


def request(at_s: float, good: bool, endpoint: str = "/v1/chat", host: str = "node-1", gpu: int | None = 0,
            **attrs: Any) -> Event:
    envelope: dict[str, Any] = {"host": host}
    if gpu is not None:
        envelope["gpu"] = gpu
    return parse_event({"id": f"req-{next(_IDS)}", "kind": "token_latency",
                        "time": format_time(T0 + timedelta(seconds=at_s)), **envelope,
                        "attrs": {"endpoint": endpoint, "tokens": 10, "itl_max_ms": 50.0 if good else 450.0, **attrs}})


def fragmentation(at_s: float, host: str = "node-1", gpu: int = 0) -> Event:
    return parse_event({"id": f"frag-{next(_IDS)}", "kind": "mem_fragmentation",
                        "time": format_time(T0 + timedelta(seconds=at_s)), "host": host, "gpu": gpu,
                        "attrs": {"fragmentation_ratio": 0.9, "free_bytes": 8 << 30, "largest_free_bytes": 1 << 30}})


def brute_counts(events: list[Event], now_minute: int, width_m: int, endpoint: str = "/v1/chat") -> tuple[int, int]:
    """good/total of the requests whose minute is within now − width + 1 … now, from the raw events."""
    chosen = [e for e in events if e.kind == "token_latency" and e.attrs.get("endpoint") == endpoint
              and now_minute - width_m < int(e.timestamp // 60) <= now_minute]
    return sum(1 for e in chosen if e.attrs["itl_max_ms"] < 200), len(chosen)
