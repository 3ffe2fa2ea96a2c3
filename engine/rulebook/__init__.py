"""Rulebooks: read YAML with marks (marked_yaml) → check structure (schema_check) and meaning (validate) in one walk
→ build the frozen model (build); `load` is the entry point for files and folders."""

from __future__ import annotations

from gpuslo.engine.rulebook.expr import parse_expression
from gpuslo.engine.rulebook.load import check_paths, load_directory, load_rulebook, load_rulebook_text
from gpuslo.engine.rulebook.schema_check import rulebook_json_schema

__all__ = [
    "check_paths",
    "load_directory",
    "load_rulebook",
    "load_rulebook_text",
    "parse_expression",
    "rulebook_json_schema",
]
