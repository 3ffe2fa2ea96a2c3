"""CLOCK_MONOTONIC (BPF's ktime) ↔ wall clock (token events, NVML): a measured offset with a bounded error."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockOffset:
    """wall_ns = mono_ns + offset_ns, true within ±error_ns when it was measured (at mono_ns `at_ns`)."""

    offset_ns: int
    error_ns: int
    at_ns: int

    def to_wall(self, mono_ns: int) -> int:
        return mono_ns + self.offset_ns

    def to_mono(self, wall_ns: int) -> int:
        return wall_ns - self.offset_ns


def measure(tries: int = 64, mono: Callable[[], int] = time.monotonic_ns,
            wall: Callable[[], int] = time.time_ns) -> ClockOffset:
    """The tightest of `tries` brackets mono₁ ≤ wall ≤ mono₂: offset = wall − midpoint, error = half the bracket.
    The bound holds for any scheduling delay, since the wall read happened between the two monotonic reads."""
    best: ClockOffset | None = None
    for _ in range(tries):
        m1 = mono()
        w = wall()
        m2 = mono()
        half = (m2 - m1 + 1) // 2
        if best is None or half < best.error_ns:
            best = ClockOffset(w - (m1 + m2) // 2, half, m1)
    assert best is not None
    return best


@dataclass(frozen=True)
class Alignment:
    """The latest offset, the one before, and the drift between them (wall against monotonic, in ppm)."""

    current: ClockOffset
    drift_ppm: float = 0.0

    def error_ns(self, mono_ns: int) -> int:
        """The bound at mono_ns: the measurement's error plus the drift since it was taken."""
        return self.current.error_ns + int(abs(self.drift_ppm) * 1e-6 * abs(mono_ns - self.current.at_ns))


def remeasure(previous: Alignment | None, tries: int = 64) -> Alignment:
    """A fresh offset; the drift is the change of offset over the monotonic time between the two."""
    now = measure(tries)
    if previous is None or now.at_ns == previous.current.at_ns:
        return Alignment(now)
    elapsed = now.at_ns - previous.current.at_ns
    return Alignment(now, (now.offset_ns - previous.current.offset_ns) / elapsed * 1e6)
