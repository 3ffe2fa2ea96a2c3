"""A real core on SQLite that replayed the recorded incidents, and its /metrics families as served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo

ROOT = Path(__file__).resolve().parents[2]
INCIDENTS = sorted((ROOT / "examples" / "incidents").glob("*.jsonl"))


def incident_items(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def open_core(folder: Path, rules_dir: Path = ROOT / "rules") -> Gpuslo:
    return Gpuslo.open(Settings(database_url=f"sqlite:///{folder / 'gpuslo.db'}", rules_dir=rules_dir))


def served_name(family: Any) -> str:
    """The name a family's samples carry in the text format (what PromQL and docs/api.md use)."""
    return {"counter": family.name + "_total", "info": family.name + "_info"}.get(family.type, family.name)


def served_families(core: Gpuslo) -> dict[str, Any]:
    return {served_name(f): f for f in core.metrics.exposed().collect()}
