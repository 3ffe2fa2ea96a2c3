"""Where views find the application core: `app.extensions["gpuslo"]`, set once by create_app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import current_app

if TYPE_CHECKING:
    from gpuslo.engine.service import Gpuslo

EXTENSION = "gpuslo"


def current_core() -> Gpuslo:
    """The Gpuslo core of the running app."""
    core: Any = current_app.extensions[EXTENSION]
    return core
