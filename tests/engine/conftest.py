"""Fixtures for engine tests: rulebooks written on the fly and events built from short specs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from engine_support import T0, rulebook_text

from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.rulebook.model import Rulebook


@pytest.fixture
def rulebook() -> Callable[..., Rulebook]:
    def build(rules: str, name: str = "t") -> Rulebook:
        return load_rulebook_text(rulebook_text(rules, name), f"{name}.yaml")

    return build


@pytest.fixture
def event() -> Callable[..., Event]:
    counter = itertools.count()

    def build(kind: str, at: float = 0.0, **fields: Any) -> Event:
        envelope = {k: fields.pop(k) for k in ("host", "gpu", "pid", "job", "rank", "labels", "message")
                    if k in fields}
        envelope.setdefault("host", "node-7")
        return parse_event({"id": f"ev-{next(counter)}", "kind": kind, "time": format_time(T0 + timedelta(seconds=at)),
                            **envelope, "attrs": fields})

    return build


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "rules"
    directory.mkdir()
    return directory
