"""Links from an event's W3C trace context to a trace UI (Jaeger, Tempo, Honeycomb...): `trace_url_template`."""

from __future__ import annotations

from urllib.parse import quote

from gpuslo.engine.errors import ConfigError

PLACEHOLDERS = ("{trace_id}", "{span_id}")


def check_template(template: str) -> str:
    """The template when it is usable: empty (no links), or an http(s) URL holding `{trace_id}`."""
    if not template:
        return template
    if not template.startswith(("https://", "http://")) or "{trace_id}" not in template:
        raise ConfigError("trace_url_template: an http(s) URL with {trace_id} (and optionally {span_id}), e.g. "
                          "https://tempo.example/explore?traceId={trace_id}")
    rest = template
    for placeholder in PLACEHOLDERS:
        rest = rest.replace(placeholder, "")
    if "{" in rest or "}" in rest:
        raise ConfigError("trace_url_template: only {trace_id} and {span_id} may be placeholders")
    return template


def trace_url(template: str, trace_id: str | None, span_id: str | None) -> str | None:
    """The trace UI's URL of an event, or None when there is no template or no trace."""
    if not template or not trace_id:
        return None
    return template.replace("{trace_id}", quote(trace_id, safe="")).replace("{span_id}", quote(span_id or "", safe=""))
