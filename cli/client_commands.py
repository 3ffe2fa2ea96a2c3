"""What every client command shares: `--server`, `--token`, and turning an ApiError into its exit code."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from gpuslo.cli.api_client import ApiClient, ApiError


def client_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--server` and `--token`, and pass the command an ApiClient as `client`; an ApiError is one
    `error:` line and exit 1 (the server refused) or 2 (it could not be reached or failed)."""

    @click.option("--server", default=None, help="Base URL of the server (default: the `public_url` setting).")
    @click.option("--token", envvar="GPUSLO_TOKEN", default=None,
                  help="Bearer token (or $GPUSLO_TOKEN): read scope to list and show, operate to act.")
    @click.pass_context
    @functools.wraps(function)
    def wrapper(ctx: click.Context, server: str | None, token: str | None, **kwargs: Any) -> Any:
        settings = ctx.find_root().obj
        client = ApiClient(server or settings.public_url, token)
        try:
            return ctx.invoke(function, client=client, **kwargs)
        except ApiError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)

    return wrapper
