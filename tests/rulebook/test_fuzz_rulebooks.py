"""Mutation fuzzing of rulebooks: every mutant of a real rulebook either loads (and compiles, and renders) or is
refused with located problems; nothing else escapes (the previous session found 349 uncaught exceptions in 105 s).

CI runs a short, derandomized smoke run. The longer run (docs/rulebooks.md#fuzzing) is the same test with
GPUSLO_FUZZ_EXAMPLES=N, random seeds:
    GPUSLO_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/rulebook/test_fuzz_rulebooks.py \
        --hypothesis-show-statistics -p no:cacheprovider
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from rulebook_mutations import byte_mutants, language_mutants, load_everything, structure_mutants

LONG = int(os.environ.get("GPUSLO_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=LONG or 100, derandomize=not LONG, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(byte_mutants())
def test_byte_mutants_load_or_are_refused_with_locations(raw: bytes) -> None:
    load_everything(raw)


@FUZZ
@given(structure_mutants())
def test_structure_mutants_load_or_are_refused_with_locations(raw: bytes) -> None:
    load_everything(raw)


@FUZZ
@given(language_mutants())
def test_condition_and_summary_mutants_load_or_are_refused_with_locations(raw: bytes) -> None:
    load_everything(raw)
