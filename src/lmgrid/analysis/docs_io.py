"""What every docs renderer (docs_tables, docs_gates, docs_embeddings) and the scales page share: a snapshot's file,
or a one-line error naming it; a blank cell; and the slope text (slope, interval, Holm p) the gate pages print."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd


def snapshot_file(snap: Path, name: str) -> Path:
    """snap/name, or an LmgridError naming the file the block needs."""
    from lmgrid.common.errors import LmgridError

    path = Path(snap) / name
    if not path.is_file():
        raise LmgridError(f"{path}: not in the snapshot (the run wrote no such table)")
    return path


def read_csv(snap: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(snapshot_file(snap, name))


def blank(v) -> bool:
    """None or NaN: a cell the run left empty (an older file, a slope that could not be fitted)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def slope_text(slope, low, high, p_holm, df=None) -> str:
    """'+0.0123 [+0.0050, +0.0196] (t, df 2), p_H 0.004' (the df part only where one is given); 'n/a' for a slope
    that could not be fitted, and no interval where either end is blank."""
    if blank(slope):
        return "n/a"
    ci = "" if blank(low) or blank(high) else f" [{low:+.4f}, {high:+.4f}]" + (
        "" if blank(df) else f" (t, df {int(df)})")
    return f"{slope:+.4f}{ci}, p_H " + ("n/a" if blank(p_holm) else f"{p_holm:.3g}")
