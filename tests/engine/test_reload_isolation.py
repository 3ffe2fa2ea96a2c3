"""A reload isolates rulebooks: one the engine refuses keeps its running version (or is left out) while the others
are applied, and the watcher job survives any failure of a reload."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from gpuslo.engine import runtime
from gpuslo.engine.config import Settings
from gpuslo.engine.plan import plan_rulebook
from gpuslo.engine.service import Gpuslo

RULEBOOK = """\
rulebook: NAME
version: "VERSION"
slos:
  availability: {service: s, sli: x, objective: y, window: 28d}
rules:
  - id: NAME-oom
    title: OOM
    slo: availability
    severity: warning
    when: {event: cuda_oom}
    summary: "OOM on {{ event.host }}"
    remediation: none
"""


def _write(folder: Path, name: str, version: str) -> None:
    (folder / f"{name}.yaml").write_text(RULEBOOK.replace("NAME", name).replace("VERSION", version))


def _versions(core: Gpuslo) -> dict[str, str]:
    return {rb.name: rb.version for rb in core.rulebook_status().rulebooks}


def test_a_rulebook_the_engine_refuses_keeps_its_running_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in ("a", "b"):
        _write(tmp_path, name, "1")
    core = Gpuslo.open(Settings(database_url=f"sqlite:///{tmp_path / 'g.db'}", rules_dir=tmp_path,
                                rules_poll_seconds=0))
    try:
        def refusing(rulebook: Any, **kwargs: Any) -> Any:  # the engine side failing for b version 2 and for c
            if (rulebook.name, rulebook.version) in {("b", "2"), ("c", "1")}:
                raise OverflowError("the engine cannot hold this")
            return plan_rulebook(rulebook, **kwargs)

        monkeypatch.setattr(runtime, "plan_rulebook", refusing)
        for name in ("a", "b"):
            _write(tmp_path, name, "2")
        _write(tmp_path, "c", "1")
        status = core.reload_rulebooks()
        assert _versions(core) == {"a": "2", "b": "1"}
        assert sorted(str(p) for p in status.problems) == [
            f"{tmp_path / name}.yaml: rulebook '{name}' not loaded by the engine: OverflowError: the engine cannot "
            "hold this" for name in ("b", "c")]
        core.ingest([{"id": "e1", "kind": "cuda_oom", "time": "2025-01-01T00:00:00Z", "host": "h", "gpu": 0}])
        assert core.wait_idle(20)
    finally:
        core.close()


def test_the_watcher_job_survives_a_failing_reload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture):
    _write(tmp_path, "a", "1")
    core = Gpuslo.open(Settings(database_url=f"sqlite:///{tmp_path / 'g.db'}", rules_dir=tmp_path,
                                rules_poll_seconds=0))
    try:
        def broken(*args: Any) -> Any:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr("gpuslo.engine.service.load_directory", broken)
        _write(tmp_path, "a", "22")
        with caplog.at_level(logging.ERROR):
            assert core.reload_if_changed() is None
        assert "the running rulebooks are kept" in caplog.text and _versions(core) == {"a": "1"}
        monkeypatch.undo()
        _write(tmp_path, "a", "333")
        assert core.reload_if_changed() is not None and _versions(core) == {"a": "333"}
    finally:
        core.close()
