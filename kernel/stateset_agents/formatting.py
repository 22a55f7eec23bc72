"""How numbers read in summaries, tables and reports: one rule everywhere."""
from __future__ import annotations

from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    """`n/a` for a missing value, floats to `digits` places, everything else as str()."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
