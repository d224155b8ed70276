"""argparse types shared by every `lmgrid` subcommand, so a bad number is the same one line everywhere."""
from __future__ import annotations

import argparse


def count(low: int):
    """An argparse type: a whole number of at least `low`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = f"count >= {low}"
    return parse
