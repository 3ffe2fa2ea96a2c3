"""The one JSON error envelope of the API, and the HTML error page of the UI."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, render_template, request
from werkzeug.exceptions import HTTPException, InternalServerError, MethodNotAllowed

from gpuslo.engine.errors import GpusloError, InvalidSilence, InvalidTransition, NotFoundError

log = logging.getLogger(__name__)

# Paths answered with JSON even on errors; everything else is a page for humans.
_JSON_PREFIXES = ("/api/", "/healthz", "/metrics")


class RequestError(GpusloError):
    """A client error with an HTTP status, a stable code and optional per-field details."""

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None, *,
                 retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []
        self.retry_after = retry_after  # whole seconds, sent as Retry-After (429, 503)


def wants_json() -> bool:
    return request.path.startswith(_JSON_PREFIXES)


def error_response(error: RequestError) -> Response:
    """The envelope `{"error": {status, code, message, details}}` for API paths, a page otherwise."""
    if wants_json():
        body = {"error": {"status": error.status, "code": error.code, "message": error.message,
                          "details": error.details}}
        response = jsonify(body)
    else:
        response = Response(render_template("error.html", error=error), mimetype="text/html")
    response.status_code = error.status
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _code_for(exc: HTTPException) -> str:
    name = (exc.name or "error").lower()
    return "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")


def register_error_handlers(app: Flask) -> None:
    """Turn every error into the envelope (API) or the error page (UI); no stack trace leaks."""

    @app.errorhandler(RequestError)
    def _request_error(exc: RequestError) -> Response:
        return error_response(exc)

    @app.errorhandler(InvalidTransition)
    def _invalid_transition(exc: InvalidTransition) -> Response:
        return error_response(RequestError(409, "invalid_transition", str(exc)))

    @app.errorhandler(NotFoundError)
    def _not_found(exc: NotFoundError) -> Response:
        return error_response(RequestError(404, "not_found", str(exc)))

    @app.errorhandler(InvalidSilence)
    def _invalid_silence(exc: InvalidSilence) -> Response:
        return error_response(RequestError(400, "invalid_silence", str(exc)))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        message = exc.description or exc.name
        if status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"request body is larger than the limit of {limit} bytes"
            return error_response(RequestError(413, "body_too_large", message))
        response = error_response(RequestError(status, _code_for(exc), message))
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            response.headers["Allow"] = ", ".join(exc.valid_methods)
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.path)
        if isinstance(exc, GpusloError):
            return error_response(RequestError(503, "service_error", str(exc)))
        return error_response(RequestError(500, "internal_error", InternalServerError.description))
