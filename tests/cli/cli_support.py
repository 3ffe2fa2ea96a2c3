"""Shared by the CLI tests: paths of the shipped rules and example, and the live-server handle."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "rules"
EXAMPLE_INCIDENT = ROOT / "examples" / "incidents" / "serving-fragmentation-stall.jsonl"


@dataclass(frozen=True)
class LiveServer:
    url: str
    core: Any
