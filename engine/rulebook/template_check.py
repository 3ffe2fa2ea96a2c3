"""Check a rule's `summary:` Jinja template: it parses, its filters exist, and it uses only known variables."""

from __future__ import annotations

from collections.abc import Iterator

import jinja2
import jinja2.meta

from gpuslo.engine.errors import RulebookProblem
from gpuslo.engine.rulebook.hints import did_you_mean
from gpuslo.engine.rulebook.marked_yaml import Document, Path_
from gpuslo.engine.templates import summary_environment

# collective: gpuslo.engine.collectives, None if no hang; cascade: gpuslo.engine.cascades (root and cascades)
TEMPLATE_NAMES = ("event", "group", "collective", "cascade")


def template_problems(doc: Document, path: Path_, text: object, rule: str | None) -> Iterator[RulebookProblem]:
    """A summary template's syntax errors, unknown filters and unknown variables."""
    if not isinstance(text, str):
        return
    env = summary_environment()
    try:
        tree = env.parse(text)
        undeclared = jinja2.meta.find_undeclared_variables(tree)  # also checks that every filter exists
        env.compile(tree)  # what the explainer runs: a template nested too deeply for Python fails here, at load
    except jinja2.TemplateError as exc:  # syntax errors, and assertions such as an unknown filter
        line = getattr(exc, "lineno", None)
        where = f" (template line {line})" if line else ""
        yield RulebookProblem(doc.at(path), f"summary template: {exc.message}{where}", rule)
        return
    except (RecursionError, MemoryError, SyntaxError, ValueError, OverflowError) as exc:
        deep = isinstance(exc, RecursionError | MemoryError)
        why = "it nests too deeply" if deep else f"{type(exc).__name__}: {exc}"
        yield RulebookProblem(doc.at(path), f"summary template cannot be compiled: {why}", rule,
                              "keep a summary to a sentence with a few {{ fields }} and {% if %} blocks")
        return
    for name in sorted(undeclared - set(TEMPLATE_NAMES)):
        yield RulebookProblem(
            doc.at(path),
            f"summary template uses unknown variable '{name}' (known: {', '.join(TEMPLATE_NAMES)})",
            rule,
            did_you_mean(name, TEMPLATE_NAMES),
        )
