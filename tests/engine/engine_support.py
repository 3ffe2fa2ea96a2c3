"""Shared by the engine tests: a fixed start time and rulebook text built from a few rules."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)

HEADER = """\
rulebook: {name}
version: "1"
description: test rulebook
slos:
  token-latency: {{service: serving, sli: itl, objective: "p99 < 200 ms", window: 28d}}
rules:
"""


def rulebook_text(rules: str, name: str = "t") -> str:
    return HEADER.format(name=name) + textwrap.indent(textwrap.dedent(rules), "  ")

# Fragmentation then a stall on the same GPU within 60 s: the correlation the window tests share.
CORRELATION = """\
- id: frag-then-stall
  title: Fragmentation followed by a token stall
  slo: token-latency
  severity: error
  when:
    all:
      - {name: frag, event: mem_fragmentation, if: fragmentation_ratio > 0.65}
      - {name: stall, event: token_stall, if: gap_ms >= 200ms}
    same: [host, gpu]
    within: 60s
    ordered: true
  group_by: [host, gpu]
  summary: "FR then stall on {{ group.host }} GPU {{ group.gpu }}"
  remediation: r
"""
