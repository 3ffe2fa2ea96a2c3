"""The catalog's shortcuts lose nothing: a family's `needs` literals are in every line its start regex matches
(on every fixture and corpus line, and on each literal alternative of the start pattern spelled out)."""

from __future__ import annotations

from corpus import REPORTED, load
from logprobe_helpers import FIXTURES, fixture_bytes

from gpuslo.probes.logs.catalog import FAMILIES, _Candidates, candidates
from gpuslo.probes.logs.prefixes import normalise


def _lines() -> list[str]:
    texts = [fixture_bytes(p.name).decode("utf-8", "replace") for p in sorted(FIXTURES.glob("*.log"))]
    texts += [case.text for split in REPORTED for case in load(split)]
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


def test_the_candidate_automaton_picks_the_families_the_needs_loop_picks():
    lines = _lines()
    loop = _Candidates(FAMILIES, automaton=False)  # the stdlib path, as on a platform without ahocorasick-rs
    picked = 0
    for text in lines + [text[1:-1] for text in lines]:  # and with literals cut at either end
        assert [f.name for f in candidates(text)] == [f.name for f in loop(text)], text
        picked += bool(candidates(text))
    assert picked > 300
