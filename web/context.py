"""Where views find the application core: `app.extensions["gpuslo"]`, set once by create_app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import current_app

if TYPE_CHECKING:
    from gpuslo.engine.core import Gpuslo

EXTENSION = "gpuslo"


def current_core() -> Gpuslo:
    """The Gpuslo core of the running app."""
    core: Gpuslo = current_app.extensions[EXTENSION]
    return core
