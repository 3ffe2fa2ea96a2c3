"""The plan of a rulebook that uses every trigger and operator, in durable_rules' dialect, compared with a golden
file.

Regenerate after an intended change with: GPUSLO_UPDATE_GOLDEN=1 pytest tests/engine/test_compile_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpuslo.engine import matcher
from gpuslo.engine.plan import plan_rulebook
from gpuslo.engine.rulebook import load_rulebook

GOLDEN = Path(__file__).parent / "golden"


def _compiled() -> dict:
    unit = plan_rulebook(load_rulebook(GOLDEN / "diagnostics.yaml"), ruleset="diagnostics")
    return {
        "ruleset": unit.ruleset,
        "definition": matcher.definition(unit),
        "kinds": sorted(unit.kinds),
        "keys": sorted(unit.keys),
        "text_tests": [vars(t) for t in unit.text_tests],
        "max_window_s": unit.max_window_s,
        "actions": {name: [a.rule.id, a.alias] for name, a in sorted(unit.actions.items())},
    }


def test_compiled_rulebook_matches_golden_file():
    path = GOLDEN / "diagnostics.compiled.json"
    got = json.dumps(_compiled(), indent=1, sort_keys=True) + "\n"
    if os.environ.get("GPUSLO_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()
