"""Shared helpers for rulebook tests: a minimal valid rulebook to mutate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rulebooks"

MINIMAL = """\
rulebook: mini
version: "1.0.0"
slos:
  availability: {service: s, sli: x, objective: y, window: 28d}
lists:
  fatal_xids: [48, 79]
macros:
  big_request: requested_bytes >= 1GiB
rules:
  - id: r1
    title: T
    slo: availability
    severity: warning
    when:
      event: EVENT
      if: CONDITION
    summary: "{{ event.host }}"
    remediation: restart
"""


def rulebook_text(event: str = "cuda_oom", condition: str = "big_request") -> str:
    return MINIMAL.replace("EVENT", event).replace("CONDITION", condition)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(name="rulebook_text")
def rulebook_text_fixture() -> Callable[..., str]:
    """The minimal rulebook with its trigger's event kind and condition filled in."""
    return rulebook_text
