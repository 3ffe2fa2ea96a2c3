"""docs/api.md lists every event kind with exactly its attributes, the required ones and the allowed values."""

from __future__ import annotations

import re
from pathlib import Path

from gpuslo.engine.events import KINDS, event_json_schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| (.+?) \| .+ \|$", re.MULTILINE)
ATTR = re.compile(r"(\*\*)?`([a-z_0-9.]+)`(?:\*\*)?(?: \(([^)]*)\))?")


def _documented() -> dict[str, list[tuple[str, bool, tuple[str, ...]]]]:
    """kind → [(attribute, required, allowed values)] from the table under '### Event kinds'."""
    section = DOC.read_text(encoding="utf-8").split("### Event kinds", 1)[1].split("\n## ", 1)[0]
    return {kind: [(name, bool(bold), tuple(v.strip() for v in values.split(",")) if values else ())
                   for bold, name, values in ATTR.findall(attrs)]
            for kind, attrs in ROW.findall(section)}


def _schema() -> dict[str, list[tuple[str, bool, tuple[str, ...]]]]:
    kinds = {}
    for branch in event_json_schema()["allOf"]:
        attrs = branch["then"]["properties"]["attrs"]
        kinds[branch["if"]["properties"]["kind"]["const"]] = [
            (name, name in attrs["required"], tuple(prop.get("enum", ())))
            for name, prop in attrs["properties"].items()]
    return kinds


def test_every_kind_is_documented_with_its_attributes():
    documented = _documented()
    assert list(documented) == list(KINDS)
    assert documented == _schema()
