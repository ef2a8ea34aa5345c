"""`Problem`: one HTTPProxy status sub-condition, found while reading or compiling an object.

A module of its own so that the readers `spec.py` imports, and `status.py`, share it without
importing `spec.py`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One status sub-condition found while reading or compiling an object."""

    type: str
    reason: str
    message: str
    warning: bool = False
