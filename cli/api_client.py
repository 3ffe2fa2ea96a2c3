"""The HTTP client of the terminal commands (violations, silences, slos): one base URL, one token, one error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from gpuslo.engine.errors import GpusloError

# Exit codes of the client commands (docs: README "Exit codes").
EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE = 0, 1, 2


class ApiError(GpusloError):
    """The server refused the request (`status` 4xx) or could not answer it (`status` None or 5xx)."""

    def __init__(self, message: str, status: int | None):
        super().__init__(message)
        self.status = status

    @property
    def exit_code(self) -> int:
        return EXIT_REFUSED if self.status is not None and 400 <= self.status < 500 else EXIT_UNREACHABLE


@dataclass(frozen=True)
class ApiClient:
    """Calls a gpuslo server's JSON API with a bearer token (a `read` token lists, `operate` acts)."""

    server: str
    token: str | None = None
    timeout_s: float = 15.0

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "gpuslo-cli"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                body: Mapping[str, Any] | None = None) -> Any:
        url = self.server.rstrip("/") + path
        try:
            response = httpx.request(method, url, params={k: v for k, v in (params or {}).items() if v is not None},
                                     json=body, headers=self._headers(), timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach {self.server}: {type(exc).__name__}: {exc}", None) from exc
        if response.status_code >= 400:
            raise ApiError(f"{method} {path}: HTTP {response.status_code}: {_message(response)}",
                           response.status_code)
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(f"{method} {path}: the answer is not JSON", response.status_code) from exc

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return self.request("POST", path, body=body or {})


def _message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
    except (ValueError, AttributeError):
        return response.text[:300].strip() or response.reason_phrase
    message = str(error.get("message") or response.reason_phrase)
    details = error.get("details") or []
    fields = "; ".join(f"{d.get('field') or d.get('param')}: {d.get('reason')}" for d in details
                       if isinstance(d, dict))
    return f"{message} ({fields})" if fields and fields not in message else message
