"""`gpuslo rules check` and `gpuslo rules test` with site overrides (`rules_overrides_dir`, `--overrides`)."""

from __future__ import annotations

from pathlib import Path

from cli_support import RULES_DIR
from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.engine.rulebook import load_directory

RAISED = "rulebook: memory\nrules:\n  fragmentation-high:\n    if: fragmentation_ratio > 0.8\n"


def _run(*args: str, env: dict[str, str | None] | None = None):
    env = {"GPUSLO_RULES_OVERRIDES_DIR": None, "GPUSLO_RULES_DIR": None, **(env or {})}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_check_reports_override_problems_from_the_setting(tmp_path: Path):
    (tmp_path / "memory.yaml").write_text(RAISED.replace("fragmentation-high", "fragmentation-hi"))
    result = _run("rules", "check", str(RULES_DIR), env={"GPUSLO_RULES_OVERRIDES_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'memory.yaml'}:3:3: unknown rule id 'fragmentation-hi' (did you mean 'fragmentation-high'?)",
        f"{RULES_DIR / 'memory.yaml'}:1:11: rulebook 'memory' not loaded: its site override "
        f"{tmp_path / 'memory.yaml'} has problems",
        "error: 2 problems in 2 files",
    ]


def test_check_counts_the_overrides_in_force(tmp_path: Path):
    (tmp_path / "memory.yaml").write_text(RAISED)
    result = _run("rules", "check", str(RULES_DIR), "--overrides", str(tmp_path))
    books, _ = load_directory(RULES_DIR, tmp_path)
    rules = sum(len(book.rules) for book in books)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"ok: {len(books)} rulebooks, {rules} rules; 1 site override in {tmp_path / 'memory.yaml'}"]


def test_rules_test_uses_shipped_thresholds_unless_asked(tmp_path: Path):
    (tmp_path / "memory.yaml").write_text(RAISED)
    env = {"GPUSLO_RULES_OVERRIDES_DIR": str(tmp_path)}
    test_file = str(RULES_DIR / "memory.test.yaml")
    shipped = _run("rules", "test", test_file, env=env)
    assert shipped.exit_code == 0, shipped.output
    assert "site overrides" not in shipped.output
    site = _run("rules", "test", test_file, "--with-overrides", env=env)
    assert site.exit_code == 1
    lines = site.stdout.splitlines()
    assert lines[0] == f"with site overrides from {tmp_path}: shipped tests describe shipped thresholds"
    assert "FAILED" in lines[1]
    at = next(i for i, line in enumerate(lines) if line.strip().startswith('rule "fragmentation-high"'))
    assert lines[at + 1].strip().startswith("exp: [") and lines[at + 2].strip() == "got: []"
    assert _run("rules", "test", test_file, "--overrides", str(tmp_path)).exit_code == 1  # implies the flag


def test_with_overrides_needs_a_folder():
    result = CliRunner().invoke(main, ["rules", "test", str(RULES_DIR), "--with-overrides"],
                                env={"GPUSLO_RULES_OVERRIDES_DIR": None})
    assert result.exit_code == 2
    assert "--with-overrides needs the rules_overrides_dir setting or --overrides DIR" in result.output
