"""Render what a client command got as a table for people, or JSON / YAML for scripts (`-o`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click
import yaml

FORMATS = ("table", "json", "yaml")


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """The `-o/--output table|json|yaml` option every client command takes."""
    return click.option("-o", "--output", "output", type=click.Choice(FORMATS), default="table",
                        show_default=True, help="table for people; json or yaml for scripts")(function)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], width: int = 60) -> str:
    """Aligned columns (`(header, key)` pairs); long cells are cut with an ellipsis."""
    cells = [[_cell(row.get(key), width) for _, key in columns] for row in rows]
    headers = [header for header, _ in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any, width: int) -> str:
    text = "-" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def emit(data: Any, output: str, render_table: Callable[[Any], str]) -> None:
    """Print `data` in the chosen format; `render_table` makes the human form."""
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=True, allow_unicode=True).rstrip())
    else:
        click.echo(render_table(data))
