"""Check a loaded rulebook document: structure against schema.json, then meaning (references, kinds)."""

from __future__ import annotations

from gpuslo.engine.errors import Location, RulebookProblem
from gpuslo.engine.rulebook.check_context import CheckContext
from gpuslo.engine.rulebook.expr import KEYWORDS
from gpuslo.engine.rulebook.marked_yaml import Document
from gpuslo.engine.rulebook.rule_checks import rule_problems
from gpuslo.engine.rulebook.schema_check import schema_problems
from gpuslo.engine.rulebook.value_checks import duration_problem
from gpuslo.engine.rulebook.version_check import requires_problems
from gpuslo.engine.slo.checks import indicator_problems


def validate(doc: Document) -> list[RulebookProblem]:
    """Every problem of the document, in file order (structure and meaning together)."""
    problems = schema_problems(doc) + semantic_problems(doc)
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.location.line or 0, p.location.col or 0))


def semantic_problems(doc: Document) -> list[RulebookProblem]:
    """Problems of meaning: unknown SLOs, kinds and fields, bad conditions, windows, templates, duplicates."""
    if not isinstance(doc.data, dict):
        return []
    ctx, problems = CheckContext.of(doc), []
    problems.extend(requires_problems(doc, doc.data.get("requires")))
    for slo_id, slo in ctx.slos.items():
        if isinstance(slo, dict):
            problems.extend(duration_problem(doc, ("slos", slo_id, "window"), slo.get("window"), None))
            problems.extend(indicator_problems(ctx, slo_id, slo))
    for name in ctx.macros:
        if name in KEYWORDS:
            problems.append(
                RulebookProblem(doc.at(("macros", name), key=True), f"macro name '{name}' is a keyword")
            )
    seen: dict[str, Location] = {}
    rules = doc.data.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, dict):
            problems.extend(rule_problems(ctx, i, rule, seen))
    return problems
