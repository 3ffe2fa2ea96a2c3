"""The dashboards generator, loaded from dashboards/generate.py (a script, not a package module)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "dashboards"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuslo_dashboards_generate", FOLDER / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(FOLDER.glob("*.json"))}
