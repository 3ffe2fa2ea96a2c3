"""Secret references (`env:VAR`, `file:/path`) resolved to values that never print themselves."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REDACTED = "***"


@dataclass(frozen=True)
class Secret:
    """A resolved secret; `ref` says where it came from, `value` is hidden from repr and str."""

    ref: str
    value: str = field(repr=False)

    def __str__(self) -> str:
        return f"Secret({self.ref})"


def is_reference(text: str) -> bool:
    return text.startswith(("env:", "file:"))


def resolve(ref: str, environ: Mapping[str, str] | None = None) -> Secret:
    """The value behind `env:NAME` or `file:/path` (one trailing newline stripped). ValueError says why not."""
    environ = os.environ if environ is None else environ
    if ref.startswith("env:"):
        name = ref[4:]
        if not name:
            raise ValueError("'env:' needs a variable name, e.g. env:PAGERDUTY_ROUTING_KEY")
        if name not in environ or not environ[name]:
            raise ValueError(f"environment variable {name} is not set (referenced as {ref!r})")
        return Secret(ref, environ[name])
    if ref.startswith("file:"):
        path = Path(ref[5:])
        try:
            value = path.read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
        except OSError as exc:
            raise ValueError(f"cannot read secret file {str(path)!r}: {exc.strerror}") from exc
        if not value:
            raise ValueError(f"secret file {str(path)!r} is empty")
        return Secret(ref, value)
    raise ValueError("secrets must be references, 'env:VAR' or 'file:/path', never written in the config")


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value (longest first) replaced by ***."""
    for value in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
MIN_FRAGMENT = 16


def secret_fragments(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets plus the parts of secret URLs a receiver may echo alone: the path with its query, the query,
    and every path segment of 16 characters or more (a Slack webhook's token)."""
    found = []
    for secret in secrets:
        found.append(secret)
        match = _URL.fullmatch(secret)
        if not match:
            continue
        rest = secret[len(urlsplit(secret).scheme) + 3:].partition("/")[2]
        path, _, query = rest.partition("?")
        found += ["/" + rest, query, *(part for part in path.split("/") if len(part) >= MIN_FRAGMENT)]
    return tuple(f for f in found if len(f) >= MIN_FRAGMENT // 2)


def _host_only(match: re.Match[str]) -> str:
    url = match.group(0)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return REDACTED
    host = f"[{host}]" if ":" in host else host
    rest = url[len(parts.scheme) + 3 + len(parts.netloc):]  # path, query and fragment
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}{'/' + REDACTED if rest.strip('/') else ''}"


def scrub(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """A delivery error as people may see it: every secret (and echoed part of a secret URL) replaced by *** and
    every URL reduced to scheme://host[:port], since its path or query may hold a credential nobody declared."""
    if not text:
        return text
    return _URL.sub(_host_only, redact(text, secret_fragments(secrets)))
