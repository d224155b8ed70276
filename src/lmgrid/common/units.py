"""Figures in words a reader sees: one spelling of a duration for `lmgrid status`/`plan` and the rendered docs, and
the Markdown table the rendered docs print their formatted cells in."""
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


def markdown_table(table) -> str:
    """A table (a DataFrame, or a list of row dicts) as Markdown, its cells printed as given: they are formatted
    already ('141.20' keeps its digits, '' stays blank), so the number parsing of `to_markdown` is off."""
    import pandas as pd  # here: `lmgrid status` reads durations without paying for pandas

    return pd.DataFrame(table).to_markdown(index=False, disable_numparse=True)
