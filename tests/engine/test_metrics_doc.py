"""docs/api.md lists every /metrics family with its type, labels and help text, exactly as served."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from metrics_support import INCIDENTS, incident_items, open_core, served_families

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| (counter|gauge|histogram|info) \| ([^|]*) \| (.+) \|$", re.MULTILINE)


def _documented() -> dict[str, tuple[str, set[str], str]]:
    section = DOC.read_text(encoding="utf-8").split("## GET /metrics", 1)[1].split("\n## ", 1)[0]
    return {name: (kind, set(re.findall(r"`([a-z_]+)`", labels)), text.strip())
            for name, kind, labels, text in ROW.findall(section)}


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory):
    core = open_core(tmp_path_factory.mktemp("metrics-doc"))
    try:
        for path in INCIDENTS:
            core.ingest(incident_items(path))
        core.ingest([{"id": "bad", "kind": "mem_fragmentation"}])  # one rejection: its labels are served
        core.ingest(incident_items(INCIDENTS[0]))  # duplicates
        core.ingest_refused(413)  # a request refused whole
        assert core.wait_idle(30)
        core.metrics.http.observe("ui.violations", "GET", 200, 0.01)
        yield served_families(core)
    finally:
        core.close()


def test_every_served_family_is_documented_and_nothing_else(families):
    documented = _documented()
    assert len(documented) >= 25
    assert sorted(set(families) - set(documented)) == [], "add these families to '## GET /metrics' in docs/api.md"
    assert sorted(set(documented) - set(families)) == [], "docs/api.md lists families /metrics does not serve"


def test_types_help_texts_and_labels_match(families):
    documented = _documented()
    for name, family in families.items():
        kind, labels, text = documented[name]
        assert (name, kind) == (name, family.type)
        assert (name, text) == (name, family.documentation)
        assert family.samples, f"{name} served no sample to read its labels from"
        served = {key for sample in family.samples for key in sample.labels} - {"le"}
        assert (name, served) == (name, labels)
