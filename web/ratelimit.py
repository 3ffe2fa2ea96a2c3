"""A small in-memory token-bucket rate limiter, keyed by client address, user name or token.

Why not flask-limiter: gpuslo serves from one process, the need is two buckets (login failures, ingest), and a
library would bring storage backends and decorators we do not use. Buckets live in this process only: with
several server processes each enforces its own limit, which the documentation says.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """`burst` tokens per key, refilled at `rate` per second; the oldest keys are forgotten past `max_keys`."""

    def __init__(self, rate: float, burst: float, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be above 0 and burst at least 1")
        self.rate, self.burst, self.max_keys, self._clock = rate, float(burst), max_keys, clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def _bucket(self, key: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.burst, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            self._buckets.move_to_end(key)
        return bucket

    def allowed(self, key: str) -> bool:
        """Whether one more request would pass, without spending a token (login checks before it counts)."""
        with self._lock:
            return self._bucket(key).tokens >= 1.0

    def spend(self, key: str) -> bool:
        """Spend one token; False (nothing spent) when the bucket is empty."""
        with self._lock:
            bucket = self._bucket(key)
            if bucket.tokens < 1.0:
                return False
            bucket.tokens -= 1.0
            return True

    def retry_after(self, key: str) -> int:
        """Whole seconds until one token is back (for the Retry-After header)."""
        with self._lock:
            missing = 1.0 - self._bucket(key).tokens
        return max(1, int(missing / self.rate + 0.999))


@dataclass
class _Window:
    start: float
    written: int = 0
    pending: int = 0  # suppressed since the last row written for this key


class AuditThrottle:
    """Bounds the audit rows of refused requests: `per_minute` per key (client address) and `total_per_minute`
    over all keys; what is suppressed is counted, and the next row admitted for that key reports the count."""

    TOTAL = "*"

    def __init__(self, per_minute: int, *, total_per_minute: int | None = None, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.per_minute = max(1, per_minute)
        self.total_per_minute = total_per_minute or self.per_minute * 20
        self.max_keys, self._clock = max_keys, clock
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self._lock = threading.Lock()

    def _window(self, key: str, now: float) -> _Window:
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(now)
            while len(self._windows) > self.max_keys:
                self._windows.popitem(last=False)
        elif now - window.start >= 60.0:
            window.start, window.written = now, 0
        self._windows.move_to_end(key)
        return window

    def admit(self, key: str) -> tuple[bool, int]:
        """(write a row?, how many refusals of this key were suppressed since its last row)."""
        with self._lock:
            now = self._clock()
            window, total = self._window(key, now), self._window(self.TOTAL, now)
            if window.written >= self.per_minute or total.written >= self.total_per_minute:
                window.pending += 1
                return False, 0
            window.written += 1
            total.written += 1
            reported, window.pending = window.pending, 0
            return True, reported
