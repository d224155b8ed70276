"""lmgrid: reproducible grid experiments over classical and neural language models."""
__version__ = "0.1.0"
