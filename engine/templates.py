"""The Jinja2 sandbox that renders rule summaries, shared by the rulebook validator and the explainer."""

from __future__ import annotations

from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment


def human_bytes(value: Any) -> str:
    """`2147483648` → `2.00 GiB` (the `bytes` filter of summaries); anything else is shown as it is."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "?" if value is None else str(value)
    size, unit = float(value), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(size) < 1024 or unit == "PiB":
            break
        size /= 1024
    return f"{int(size)} B" if unit == "B" else f"{size:.2f} {unit}"


def summary_environment() -> ImmutableSandboxedEnvironment:
    """A sandbox with gpuslo's filters; None renders as `?`."""
    env = ImmutableSandboxedEnvironment(autoescape=False, finalize=lambda v: "?" if v is None else v)
    env.filters["bytes"] = human_bytes
    return env
