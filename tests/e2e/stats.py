"""Statistics for tests that count how traffic was spread."""

from __future__ import annotations

import math


def within_sigmas(count: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    """Whether `count` successes in `n` draws is within `sigmas` standard deviations of n*p."""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))
