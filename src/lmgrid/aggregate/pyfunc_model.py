"""Where models logged before the move look for their pyfunc class (see the package's docstring)."""
from lmgrid.tracking.pyfunc_model import LmgridPyfunc

__all__ = ["LmgridPyfunc"]
