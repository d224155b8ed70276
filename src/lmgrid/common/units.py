"""Figures in words a reader sees: one spelling of a duration for `lmgrid status`/`plan` and the rendered docs."""
from __future__ import annotations

import math


def duration_text(seconds: float | None) -> str:
    """3723 -> '1 h 02 min', 518 -> '8 min 38 s', 41.2 -> '41 s'; None or not finite -> '?' (not known)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
