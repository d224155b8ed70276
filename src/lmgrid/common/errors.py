"""One exception type for every user-facing failure (file output and JSON helpers: lmgrid.common.fileio)."""
from __future__ import annotations


class LmgridError(Exception):
    """A problem with the user's input or config. The CLI prints it as one line, without a traceback."""


def key_path(parts) -> str:
    """A config key as an error names it: ("studies", "ctx", "arch", 1) -> studies.ctx.arch[1]."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"
