"""`gpuslo rules check`: exact problem lines, the summary line and the exit status."""

from __future__ import annotations

from pathlib import Path

from cli_support import RULES_DIR
from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.engine.rulebook import load_directory

GOOD = """\
rulebook: mini
version: "1.0.0"
description: One rule, for the CLI tests.
slos:
  availability:
    service: llm-serving
    sli: share of requests answered
    objective: "99.9 % succeed"
    window: 28d
rules:
  - id: oom
    title: CUDA out of memory
    slo: availability
    severity: error
    when:
      event: cuda_oom
      if: requested_bytes >= 1GiB
    group_by: [host, gpu]
    summary: "OOM on {{ event.host }}"
    remediation: Lower the batch size.
"""
BAD = GOOD.replace("slo: availability", "slo: availabilty").replace("requested_bytes >=", "requested_byte >=")


def _check(*args: str):
    return CliRunner().invoke(main, ["rules", "check", *args], catch_exceptions=False)


def test_a_good_file_reports_its_rulebook_and_rules(tmp_path: Path):
    (tmp_path / "mini.yaml").write_text(GOOD)
    result = _check(str(tmp_path / "mini.yaml"))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["ok: 1 rulebook, 1 rule"]


def test_the_shipped_rules_folder_is_clean():
    books, problems = load_directory(RULES_DIR)
    result = _check(str(RULES_DIR))
    assert problems == ()
    assert result.exit_code == 0
    rules = sum(len(book.rules) for book in books)
    assert result.stdout.splitlines() == [f"ok: {len(books)} rulebooks, {rules} rules"]


def test_every_problem_is_printed_with_its_location_and_a_summary(tmp_path: Path):
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "other.yaml").write_text(BAD.replace("rulebook: mini", "rulebook: other"))
    (tmp_path / "notes.txt").write_text("not a rulebook, ignored")
    result = _check(str(tmp_path), str(tmp_path / "missing.yaml"))
    other = tmp_path / "other.yaml"
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'missing.yaml'}: no such file or directory",
        f"{other}:13:10: rule \"oom\": unknown SLO 'availabilty' (did you mean 'availability'?)",
        f"{other}:17:11: rule \"oom\": unknown field 'requested_byte' for event cuda_oom"
        " (did you mean 'requested_bytes'?)",
        "error: 3 problems in 2 files",
    ]


def test_a_rule_id_repeated_across_files_is_refused(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD.replace("rulebook: mini", "rulebook: mini-two"))
    result = _check(str(tmp_path))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'b.yaml'}:11:5: rule \"oom\": duplicate rule id 'oom'"
        f" (first defined at {tmp_path / 'a.yaml'}:11:5)",
        "error: 1 problem in 1 file",
    ]


def test_without_a_path_the_rules_dir_setting_is_checked(tmp_path: Path):
    (tmp_path / "mini.yaml").write_text(BAD)
    result = CliRunner().invoke(main, ["rules", "check"], env={"GPUSLO_RULES_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "error: 2 problems in 1 file"


def test_the_config_file_is_read_once_by_the_group(tmp_path: Path):
    rules_dir = tmp_path / "my-rules"
    rules_dir.mkdir()
    (rules_dir / "mini.yaml").write_text(GOOD)
    config = tmp_path / "gpuslo.toml"
    config.write_text(f'rules_dir = "{rules_dir}"\n')
    result = CliRunner().invoke(main, ["--config", str(config), "rules", "check"], env={"GPUSLO_RULES_DIR": None})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["ok: 1 rulebook, 1 rule"]
