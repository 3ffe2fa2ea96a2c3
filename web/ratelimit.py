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
