"""`make lint` type-checks engine/ strictly, and scripts/typecheck.sh's tree of links gives mypy every package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _recipe(target: str) -> list[str]:
    """The command lines of one Makefile target, in order."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(index for index, line in enumerate(lines) if re.match(rf"{re.escape(target)}:", line))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_lint_runs_ruff_then_the_strict_type_check():
    recipe = _recipe("lint")
    assert [line.split()[0] for line in recipe] == ["$(BIN)/ruff", "./scripts/typecheck.sh"]
    assert (ROOT / "scripts/typecheck.sh").stat().st_mode & 0o111, "scripts/typecheck.sh must be executable"


def test_mypy_is_strict_and_a_dev_dependency():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["mypy"]["strict"] is True
    assert any(requirement.startswith("mypy") for requirement in config["project"]["optional-dependencies"]["dev"])


def test_every_package_folder_is_where_the_link_tree_puts_it():
    """The script links gpuslo/<folder> → <folder>; a package mapped elsewhere would be invisible to mypy."""
    script = (ROOT / "scripts/typecheck.sh").read_text(encoding="utf-8")
    found = re.search(r"for folder in ([\w ]+); do", script)
    assert found, "scripts/typecheck.sh no longer names its linked folders in one `for folder in ...` loop"
    linked = set(found.group(1).split())
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    for package, folder in mapping.items():
        if package == "gpuslo":
            continue
        parts = package.split(".")[1:]
        assert parts[0] in linked, f"{package}: its top folder {parts[0]!r} is not linked by scripts/typecheck.sh"
        assert folder == "/".join(parts), f"{package} lives in {folder!r}, not where the link tree puts it"
