"""docs/rulebooks.md lists every condition operator of the operator table, with its text, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from gpuslo.engine.errors import Location
from gpuslo.engine.rulebook import parse_expression
from gpuslo.engine.rulebook.operators import OPERATORS, Operator

DOC = Path(__file__).resolve().parents[2] / "docs" / "rulebooks.md"
ROW = re.compile(r"^\| `([^`]+)` \| (.+?) \| (.+?) \| (.+) \|$", re.MULTILINE)
TAKES = {"any": "a number or string field", "number": "a number field", "string": "a string field and a quoted "
         "string", "list": "a field and a list", "field": "a field"}


def _documented() -> dict[str, tuple[str, str, str]]:
    """operator → (takes, means, example) from the table under '### Operators'."""
    section = DOC.read_text(encoding="utf-8").split("### Operators", 1)[1].split("\n#", 1)[0]
    return {name: (takes, means, example) for name, takes, means, example in ROW.findall(section)}


def _row(op: Operator) -> tuple[str, str, str]:
    return TAKES[op.takes], op.doc, op.example


def test_every_operator_is_documented_and_every_documented_operator_exists():
    documented = _documented()
    assert sorted(documented) == sorted(OPERATORS), "docs/rulebooks.md's operator table and OPERATORS differ"
    assert list(documented) == list(OPERATORS), "document the operators in the table's order"
    assert documented == {name: _row(op) for name, op in OPERATORS.items()}


def test_every_documented_example_parses():
    kinds = {"state": "probe_status", "gap_ms": "token_stall", "fragmentation_ratio": "mem_fragmentation",
             "tokens": "token_latency", "xid": "gpu_xid"}  # the other examples' fields are cuda_oom's
    lists = {"broken_states": ("down",), "fatal_xids": (79,)}
    for op in OPERATORS.values():
        for example in re.findall(r"`([^`]+)`", op.example):
            kind = kinds.get(example.split()[0], "cuda_oom")
            expr = parse_expression(example, kind, location=Location("docs"), lists=lists)
            assert op.name in str(expr), (example, str(expr))
