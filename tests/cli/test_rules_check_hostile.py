"""`gpuslo rules check` on hostile files, as a real process: located errors and exit status 1, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GPUSLO = Path(sys.executable).parent / "gpuslo"
HEADER = 'rulebook: x\nversion: "1"\n'


@pytest.mark.parametrize(("content", "expected"), [
    ((HEADER + "rules: " + "[" * 10_000 + "]" * 10_000 + "\n").encode(),
     "hostile.yaml:3:71: nesting deeper than 64 levels is not allowed in a rulebook"),
    ((HEADER + "rules: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n").encode(),
     "hostile.yaml:3:260: nesting deeper than 64 levels is not allowed in a rulebook"),
    ((HEADER + "description: a\x00b\n").encode(),
     "hostile.yaml:3:15: character U+0000 is not allowed in YAML (special characters are not allowed)"),
    ((HEADER + 'description: "a\\0b"\n').encode(),
     "hostile.yaml:3:14: U+0000 (a control character) is not allowed in rulebook text"),
    ((HEADER + 'description: "a\\ud800"\n').encode(),
     "hostile.yaml:3:14: U+D800 (a lone surrogate) is not allowed in rulebook text"),
    (HEADER.encode() + b"description: caf\xe9\n",
     "hostile.yaml:3:17: file is not valid UTF-8 (byte 41: invalid continuation byte)"),
    ((HEADER + "description: !!int abc\n").encode(),
     "hostile.yaml:3:14: value 'abc' is not a valid int (invalid literal for int() with base 10: 'abc')"),
])
def test_rules_check_reports_a_hostile_file_as_located_errors(tmp_path: Path, content: bytes, expected: str):
    path = tmp_path / "hostile.yaml"
    path.write_bytes(content)
    done = subprocess.run([str(GPUSLO), "rules", "check", str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and "RecursionError" not in output
    assert f"{tmp_path}/{expected}" in output.splitlines()
