"""The house rules a linter cannot see: import directions, the one durable_rules importer, documented knobs."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest

from gpuslo.cli.main import main
from gpuslo.engine.config import Settings

ROOT = Path(__file__).resolve().parents[1]
# Folder → package name, as pyproject.toml maps them.
PACKAGES = {"engine": "gpuslo.engine", "web": "gpuslo.web", "probes": "gpuslo.probes", "cli": "gpuslo.cli",
            "migrations": "gpuslo.migrations", "gpuslo_pkg": "gpuslo"}
SKIP_PARTS = {".venv", "var", ".gpu", "build", "dist", "__pycache__", ".git", ".ruff_cache", ".pytest_cache"}
PROBES_MAY_USE = ("gpuslo.engine.events", "gpuslo.engine.errors", "gpuslo.engine.config")


def _python_files(*folders: str) -> list[Path]:
    bases = [ROOT / folder for folder in folders] if folders else [ROOT]
    return sorted(
        path
        for base in bases
        for path in base.rglob("*.py")
        if not SKIP_PARTS.intersection(path.relative_to(ROOT).parts)
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = PACKAGES.get(parts[0], parts[0])
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _offences(folders: tuple[str, ...], bad: re.Pattern[str] | Callable[[str], bool]) -> list[str]:
    is_bad = bad.match if isinstance(bad, re.Pattern) else bad
    return [
        f"{path.relative_to(ROOT)}:{line}: imports {name}"
        for path in _python_files(*folders)
        for line, name in _imports(path)
        if is_bad(name)
    ]


def test_engine_imports_neither_web_probes_nor_cli():
    assert _offences(("engine",), re.compile(r"gpuslo\.(web|probes|cli)(\.|$)")) == []


def test_probes_use_only_events_errors_and_config_of_the_engine():
    def bad(name: str) -> bool:
        if re.match(r"gpuslo\.(web|cli)(\.|$)", name):
            return True
        allowed = any(name == ok or name.startswith(ok + ".") for ok in PROBES_MAY_USE)
        return re.match(r"gpuslo\.engine(\.|$)", name) is not None and not allowed

    assert _offences(("probes",), bad) == []


# The matcher, and the test that proves the engine's sharp edges the matcher relies on (as in pyproject's ruff).
DURABLE_IMPORTERS = ("engine/matcher.py:", "tests/engine/test_durable_edges.py:")
DURABLE_MODULES = re.compile(r"(durable|durable_rules_engine)(\.|$)")


def test_only_the_matcher_imports_durable_rules():
    offences = _offences(tuple(PACKAGES) + ("tests",), DURABLE_MODULES)
    assert [o for o in offences if not o.startswith(DURABLE_IMPORTERS)] == []
    assert _offences(("engine",), DURABLE_MODULES), "engine/matcher.py no longer imports durable_rules"


def test_no_bare_folder_imports():
    assert _offences((), re.compile(r"(engine|web|probes|cli|migrations)(\.|$)")) == []


def test_tests_have_no_init_files():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("__init__.py")) == []


def _docs_text() -> str:
    docs = [ROOT / "README.md", ROOT / "docs" / "configuration.md"]
    return "\n".join(path.read_text(encoding="utf-8") for path in docs if path.exists())


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Settings)])
def test_every_setting_is_documented(name: str):
    text = _docs_text()
    assert f"`{name}`" in text, f"setting {name!r} is not documented in README.md or docs/configuration.md"
    assert f"`GPUSLO_{name.upper()}`" in text, f"GPUSLO_{name.upper()} is not documented"


def _leaf_commands(group: click.Group, prefix: str) -> Iterator[str]:
    for name, command in sorted(group.commands.items()):
        if command.hidden:  # a deprecated old name (cli/credentials.py's DeprecatedAlias), not documented
            continue
        if isinstance(command, click.Group) and command.commands:
            yield from _leaf_commands(command, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}"


def test_every_cli_command_is_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = list(_leaf_commands(main, "gpuslo"))
    assert "gpuslo serve" in commands and "gpuslo rules check" in commands
    assert [command for command in commands if command not in readme] == []


# The rulebook stage reads YAML and builds frozen rules; what evaluates them (the plan, the runtime, the matcher,
# explanations, rule tests) sits above it and is never imported from it.
ABOVE_THE_RULEBOOK = re.compile(r"gpuslo\.engine\.(runtime|engine_thread|matcher|plan|facts|clock|explain|windows"
                                r"|backtest|rule_tests|service)(\.|$)")


def test_the_rulebook_stage_imports_nothing_that_evaluates_rules():
    assert _offences(("engine/rulebook",), ABOVE_THE_RULEBOOK) == []
