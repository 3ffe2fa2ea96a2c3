"""The last scrub of delivery errors before they are shown: secrets, echoed parts of secret URLs, any URL."""

from __future__ import annotations

import pytest

from gpuslo.web.notification_display import scrub

SLACK = "https://hooks.slack.com/services/T0AAAA/B0BBBB/abcdefghijklmnopqrstuvwx"
HOOK = "https://alerts.example/hook?api_key=0123456789abcdef"


@pytest.mark.parametrize(("text", "shown"), [
    (None, None),
    ("", ""),
    ("HTTP 500: upstream down", "HTTP 500: upstream down"),
    ("ConnectError: [Errno 111] Connection refused", "ConnectError: [Errno 111] Connection refused"),
    (f"HTTP 404: no hook at {SLACK}", "HTTP 404: no hook at ***"),
    ("HTTP 404: /services/T0AAAA/B0BBBB/abcdefghijklmnopqrstuvwx", "HTTP 404: ***"),
    ("HTTP 403: token abcdefghijklmnopqrstuvwx revoked", "HTTP 403: token *** revoked"),
    ("HTTP 401: bad api_key=0123456789abcdef", "HTTP 401: bad ***"),
    ("HTTP 401: see http://u:hunter2@10.0.0.1:8080/x?t=1 now", "HTTP 401: see http://10.0.0.1:8080/*** now"),
    ("HTTP 400: docs at https://developer.example/ and http://[::1]:9/a", "HTTP 400: docs at "
     "https://developer.example and http://[::1]:9/***"),
])
def test_scrub(text, shown):
    assert scrub(text, [SLACK, HOOK, "whsec_c2VjcmV0LXNpZ25pbmcta2V5"]) == shown


def test_short_secrets_parts_are_not_blanked_everywhere():
    # A secret URL's short path segments (T0AAAA) are ids, not secrets: hiding them would blank ordinary words.
    assert scrub("team T0AAAA", [SLACK]) == "team T0AAAA"
