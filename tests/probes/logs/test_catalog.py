"""The catalog's shortcuts lose nothing: a family's `needs` literals are in every line its start regex matches
(on every fixture and corpus line, and on each literal alternative of the start pattern spelled out)."""

from __future__ import annotations

from corpus import SPLITS, load
from logprobe_helpers import FIXTURES, fixture_bytes

from gpuslo.probes.logs.catalog import FAMILIES
from gpuslo.probes.logs.prefixes import normalise


def _lines() -> list[str]:
    texts = [fixture_bytes(p.name).decode("utf-8", "replace") for p in sorted(FIXTURES.glob("*.log"))]
    texts += [case.text for split in SPLITS for case in load(split)]
    return [normalise(line).text for text in texts for line in text.splitlines()]


def test_every_family_has_needs_and_they_hold_on_every_line_its_start_matches():
    lines = _lines()
    assert len(lines) > 500
    for family in FAMILIES:
        assert family.needs, family.name
        for text in lines:
            if family.start.search(text):
                assert any(need in text for need in family.needs), (family.name, text)
                assert family.starts(text)
