"""Error budget and burn-rate formulas (the SRE workbook's), on good/total counts."""

from __future__ import annotations

from dataclasses import dataclass


def burn_rate(good: int, total: int, target: float) -> float:
    """Bad ratio over the lookback / (1 − target); 0 without requests."""
    return (total - good) / total / (1 - target) if total else 0.0


def budget_remaining(good: int, total: int, target: float) -> float:
    """The share of the window's error budget, (1 − target) × total, not yet spent; below 0 when overspent."""
    if not total:
        return 1.0
    return 1 - (total - good) / ((1 - target) * total)


def exhaustion_s(remaining: float, window_s: float, burn: float) -> float | None:
    """Seconds until the remaining budget is gone at `burn` (a burn of 1 spends the whole budget in one window);
    None when nothing burns, 0 when it is already gone."""
    if remaining <= 0:
        return 0.0
    return remaining * window_s / burn if burn > 0 else None


@dataclass(frozen=True)
class Counts:
    good: int
    total: int

    @property
    def bad(self) -> int:
        return self.total - self.good
