"""docs/alerts.md has one row per receiver type in the registry, naming exactly the fields that type takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuslo.engine.alerts import load_alerts_text
from gpuslo.engine.alerts.loader import COMMON
from gpuslo.engine.alerts.receivers import RECEIVER_TYPES
from gpuslo.engine.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| (.+?) \| .+ \|$", re.MULTILINE)
FIELD = re.compile(r"(?:^|, )`([a-z_]+)`")  # a field opens the cell or follows a comma; values are in brackets


def _documented() -> dict[str, set[str]]:
    section = DOC.read_text(encoding="utf-8").split("## Receiver types", 1)[1].split("\n## ", 1)[0]
    return {kind: set(FIELD.findall(re.sub(r"\([^)]*\)", "", fields))) for kind, fields in ROW.findall(section)}


def test_every_receiver_type_is_documented_and_every_documented_type_exists() -> None:
    documented = _documented()
    assert list(documented) == list(RECEIVER_TYPES)


def test_each_documented_type_lists_exactly_its_fields() -> None:
    documented = _documented()
    assert {kind: documented[kind] for kind in RECEIVER_TYPES} == {
        kind: set(t.fields) for kind, t in RECEIVER_TYPES.items()}


def test_the_common_fields_are_documented() -> None:
    intro = DOC.read_text(encoding="utf-8").split("## Receiver types", 1)[1].split("|", 1)[0]
    assert {name for name in COMMON if f"`{name}`" in intro} == COMMON


def test_the_loader_refuses_a_type_the_registry_lacks() -> None:
    with pytest.raises(ConfigError, match=r"a\.yaml:2:21: receiver type must be one of "
                                          + ", ".join(RECEIVER_TYPES)):
        load_alerts_text("receivers:\n  - {name: x, type: teams, url: 'https://x.example'}\n", "a.yaml")
