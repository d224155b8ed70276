"""One exception type for every user-facing failure (file output and JSON helpers: lmgrid.common.fileio)."""
from __future__ import annotations


class LmgridError(Exception):
    """A problem with the user's input or config. The CLI prints it as one line, without a traceback."""
