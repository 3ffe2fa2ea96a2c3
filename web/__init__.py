"""The Flask app factory: create_app(settings) reads like a table of contents."""

from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING, Any

from flask import Flask, Response

from gpuslo.engine.config import Settings
from gpuslo.web.context import EXTENSION

if TYPE_CHECKING:
    from gpuslo.engine.core import Gpuslo

SECURITY_HEADERS = {
    # frame-ancestors (and X-Frame-Options for browsers without CSP 2): no page may be framed (clickjacking).
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def create_app(settings: Settings, core: Gpuslo | None = None) -> Flask:
    """Build the web app on a Gpuslo core; when none is given, open one and close it at exit."""
    app = Flask(__name__)
    configure_app(app, settings)
    configure_logging(app)
    configure_core(app, settings, core)
    configure_access(app, settings)
    register_blueprints(app)
    register_error_handlers(app)
    register_security_headers(app)
    configure_http_metrics(app)
    configure_proxies(app, settings)
    return app


def configure_app(app: Flask, settings: Settings) -> None:
    from gpuslo.web.trace_links import check_template

    check_template(settings.trace_url_template)  # a ConfigError at start, not a broken link on every page
    # Werkzeug enforces this on Content-Length and on streamed (chunked) bodies alike.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]  # keep the documented field order


def configure_proxies(app: Flask, settings: Settings) -> None:
    """Behind trusted reverse proxies, the client's address and scheme come from their forwarding headers."""
    from gpuslo.web.proxies import TrustedProxies, trusted_networks

    networks = trusted_networks(settings.trusted_proxies)
    if networks:
        app.wsgi_app = TrustedProxies(app.wsgi_app, networks)  # type: ignore[method-assign]


def configure_http_metrics(app: Flask) -> None:
    from gpuslo.web.http_metrics import init_app

    init_app(app)


def configure_logging(app: Flask) -> None:
    """Log through the `gpuslo.web` logger; the process owner decides handlers and level."""
    app.logger.name = "gpuslo.web"
    logging.getLogger("gpuslo.web").setLevel(logging.INFO)


def configure_core(app: Flask, settings: Settings, core: Gpuslo | None) -> None:
    if core is None:
        from gpuslo.engine.core import Gpuslo

        opened = Gpuslo.open(settings)
        atexit.register(opened.close)
        core = opened
    app.extensions[EXTENSION] = core


def configure_access(app: Flask, settings: Settings) -> None:
    """Sessions, then authentication, authorization, CSRF and rate limits on every request (docs/security.md)."""
    from gpuslo.web.access import init_app
    from gpuslo.web.sessions import configure_sessions

    configure_sessions(app, settings)
    init_app(app, settings)


def register_blueprints(app: Flask) -> None:
    from gpuslo.web.admin_api import admin_api
    from gpuslo.web.api import api
    from gpuslo.web.audit_ui import audit_ui
    from gpuslo.web.auth_ui import auth
    from gpuslo.web.charts_ui import charts_ui
    from gpuslo.web.display import display
    from gpuslo.web.integrations_api import integrations_api
    from gpuslo.web.lifecycle_api import lifecycle_api
    from gpuslo.web.lifecycle_ui import lifecycle_ui
    from gpuslo.web.notifications_api import notifications_api
    from gpuslo.web.notifications_ui import notifications_ui
    from gpuslo.web.ops import ops
    from gpuslo.web.slos import slos_api, slos_ui
    from gpuslo.web.stalls_ui import stalls_ui
    from gpuslo.web.ui import ui

    app.register_blueprint(api)
    app.register_blueprint(integrations_api)
    app.register_blueprint(lifecycle_api)
    app.register_blueprint(ops)
    app.register_blueprint(ui)
    app.register_blueprint(display)
    app.register_blueprint(charts_ui)
    app.register_blueprint(lifecycle_ui)
    app.register_blueprint(auth)
    app.register_blueprint(audit_ui)
    app.register_blueprint(admin_api)
    app.register_blueprint(notifications_api)
    app.register_blueprint(notifications_ui)
    app.register_blueprint(slos_api)
    app.register_blueprint(slos_ui)
    app.register_blueprint(stalls_ui)


def register_error_handlers(app: Flask) -> None:
    from gpuslo.web.errors import register_error_handlers as register

    register(app)


def register_security_headers(app: Flask) -> None:
    @app.after_request
    def _headers(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def core_of(app: Flask) -> Any:
    """The core an app was built on (for the CLI and tests)."""
    return app.extensions[EXTENSION]
