"""Correlation and count triggers build into model.Correlation / model.Count."""

from __future__ import annotations

import pytest

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.rulebook.model import Correlation, Count, FieldRef

HEAD = """\
rulebook: windows
version: "1.0.0"
slos:
  token-latency: {service: s, sli: x, objective: y, window: 28d}
rules:
  - id: w
    title: T
    slo: token-latency
    severity: warning
    summary: "{{ group.host }}"
    remediation: r
    group_by: [host, gpu]
"""

CORRELATION = HEAD + """\
    when:
      all:
        - {name: frag, event: mem_fragmentation, if: fragmentation_ratio > 0.65}
        - {name: stall, event: token_stall, if: gap_ms >= 200ms and gpu == frag.gpu}
      same: [host, gpu]
      within: 60s
      ordered: true
"""

COUNT = HEAD + """\
    when:
      count: 3
      event: cuda_oom
      same: [host, gpu]
      within: 5m
"""


def test_correlation_builds() -> None:
    when = load_rulebook_text(CORRELATION, "c.yaml").rules[0].when
    assert isinstance(when, Correlation)
    assert [p.alias for p in when.patterns] == ["frag", "stall"]
    assert when.same == ("host", "gpu") and when.within_s == 60.0 and when.ordered is True
    assert when.patterns[1].condition.items[1].right == FieldRef("gpu", "frag")
    assert when.patterns[1].condition_text == "gap_ms >= 200ms and gpu == frag.gpu"


def test_count_builds() -> None:
    when = load_rulebook_text(COUNT, "n.yaml").rules[0].when
    assert isinstance(when, Count)
    assert (when.count, when.same, when.within_s) == (3, ("host", "gpu"), 300.0)
    assert when.pattern.kind == "cuda_oom" and when.pattern.condition is None


def test_windowed_problems() -> None:
    text = (CORRELATION.replace("within: 60s", "within: 2d")
            .replace("same: [host, gpu]", "same: [host, gap_ms]")
            .replace("gpu == frag.gpu", "gpu == stall.gpu"))
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(text, "c.yaml")
    assert [str(p) for p in caught.value.problems] == [
        "c.yaml:16:76: rule \"w\": expected a value (number, 'string', 1GiB, 200ms) after 'gpu', found "
        "'stall.gpu' ('alias.field' names an earlier pattern of the correlation (here: frag))",
        "c.yaml:17:20: rule \"w\": unknown field 'gap_ms' for event mem_fragmentation in 'same'",
        "c.yaml:18:15: rule \"w\": 'within' must be above 0 and at most 86400s, got 2d",
    ]
