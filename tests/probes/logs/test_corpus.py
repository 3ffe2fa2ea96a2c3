"""The corpus of public-report excerpts (tests/probes/logs/corpus/): every excerpt gives exactly its expected
events and fields, every look-alike gives nothing, and the prefilter's fast scan agrees with line-by-line feeding.
The held-out split's first, untuned measurement is kept beside it (corpus/heldout-first-run.txt)."""

from __future__ import annotations

import pytest
from corpus import READ_TIME, REPORTED, SPLITS, check, load, run, score

from gpuslo.engine.events import parse_event
from gpuslo.probes.logs.parser import LogParser, ParserSettings

CASES = [case for split in SPLITS for case in load(split)]
# tuned after their first runs (heldout3-first-run.txt, heldout4-first-run.txt): now held to exact events too
HELDOUT3 = [case for split in ("heldout3", "heldout4", "heldout6", "heldout7", "heldout8", "heldout9")
            for case in load(split)]


def test_the_corpus_has_a_hundred_incident_excerpts_with_sources_and_look_alikes():
    incidents = [c for c in CASES if not c.lookalike]
    assert len(incidents) >= 100 and sum(c.lookalike for c in CASES) >= 20
    assert all("#" in c.source or c.source.startswith("https://") for c in CASES)


def test_the_third_and_fourth_held_out_splits_name_sources_no_earlier_split_has():
    earlier = {c.source for split in ("tune", "heldout", "heldout2", "heldout-nan") for c in load(split)}
    heldout3, heldout4 = load("heldout3"), load("heldout4")
    assert len([c for c in heldout3 if not c.lookalike]) >= 40
    assert not {c.source for c in heldout3} & earlier
    later = earlier | {c.source for split in ("heldout3", "tune-h15b") for c in load(split)}
    assert not {c.source for c in heldout4} & later
    assert not {c.source for c in load("heldout5")} & (later | {c.source for c in heldout4})
    assert not {c.source for c in load("heldout6")} & (later | {c.source for s in ("heldout4", "heldout5")
                                                               for c in load(s)})
    for index, split in enumerate(("heldout7", "heldout8", "heldout9", "heldout10", "heldout11", "heldout12")):
        before = later | {c.source for s in ("heldout4", "heldout5", "heldout6", "heldout7", "heldout8",
                                             "heldout9", "heldout10", "heldout11")[:3 + index] for c in load(s)}
        assert not {c.source for c in load(split)} & before, split


def test_the_session_6_splits_name_sources_no_other_split_has():
    """heldout12 (measured once before any change of its session), tune-h15d (measured once before tuning on it)
    and heldout13 (measured once after the tuning, untuned) draw from reports no other split uses."""
    for split in ("heldout12", "tune-h15d", "heldout13", "tune-h15d-2", "heldout14", "tune-h15e", "heldout15",
                  "heldout16", "heldout17"):
        others = {c.source for s in REPORTED if s != split for c in load(s)}
        assert not {c.source for c in load(split)} & others, split


@pytest.mark.parametrize("split", ["heldout12", "heldout13", "tune-h15d-2"])
def test_the_session_6_batches_keep_their_tuned_figures(split):
    """These keep their misses beside their first runs (<split>-first-run.txt): heldout12 an echo judged as one
    incident and a CUDA error the echo rule folds into the cupy one, heldout13 a TGI allocator message and
    tune-h15d-2 the vectorAdd sample's "(error code ...)" line, neither with a trigger word (the prefilter's 64 are
    spent, test_checks.py). Recall >= 90 %, no false positive."""
    result = score(load(split))
    assert result["recall"] >= 0.90 and result["false_positives"] == 0, result["failing"]


@pytest.mark.parametrize("case", CASES + HELDOUT3, ids=lambda c: f"{c.split}:{c.name}")
def test_excerpt_gives_its_events_and_fields(case):
    events = run(case)
    outcome = check(case, events)
    assert not outcome.problems, f"{case.source}: {outcome.problems}"
    for event in events:
        assert parse_event(event.to_dict()) == event  # every event is valid on the wire


def test_the_second_held_out_split_meets_the_bar():
    """heldout2.yaml keeps its misses (its first run is in heldout2-first-run.txt): recall >= 95 %, at most one
    false positive per 20 look-alikes, fields >= 90 % right."""
    result = score(load("heldout2"))
    assert result["recall"] >= 0.95 and result["field_accuracy"] >= 0.90, result["failing"]
    assert result["false_positives"] * 20 <= result["lookalikes"], result["failing"]


@pytest.mark.parametrize("case", CASES + load("heldout2") + load("heldout-nan") + HELDOUT3 + load("heldout5")
                         + load("heldout10") + load("heldout11") + load("heldout12")
                         + load("heldout13") + load("tune-h15d-2") + load("heldout14"),
                         ids=lambda c: f"{c.split}:{c.name}")
def test_fast_scan_matches_line_by_line(case):
    data = case.text.encode() if case.text.endswith("\n") else case.text.encode() + b"\n"
    slow = LogParser(ParserSettings(host="node1", source=case.name), clock=lambda: READ_TIME)
    by_line, offset = [], 0
    for line in data.splitlines(keepends=True):
        by_line += slow.feed(line, offset)
        offset += len(line)
    by_line += slow.flush()
    assert [e.to_dict() for e in run(case)] == [e.to_dict() for e in by_line]
