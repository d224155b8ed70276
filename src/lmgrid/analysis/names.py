"""The one table of display names: how each model id (`layout.model_label`, e.g. 'lstm/cell') is written in every
figure legend and every table, and the fixed order in which models are listed (n-gram models above neural ones).

CSV files keep the raw ids (the `model` column) and add the display name beside them; Markdown, LaTeX, HTML and
the figures show only display names.  A model id missing here is shown as it is and listed after the known ones.
"""
from __future__ import annotations

from lmgrid.common import plugins

# Insertion order is the listing order: n-gram models by strength of smoothing, then the neural models.
DISPLAY = {
    "addk": "Add-k",
    "katz": "Katz",
    "kn": "Kneser-Ney",
    "mkn": "Modified Kneser-Ney",
    "ffnn": "Feed-forward",
    "rnn": "Elman RNN",
    "lstm": "LSTM",
    "lstm/cell": "LSTM (cell)",
    "lstm/concat": "LSTM (concat)",
    "lstm/cellonebias": "LSTM (cell, one bias)",
    "gru": "GRU",
    "gru/cell": "GRU (cell)",
    "transformer": "Transformer",
}
NGRAM = ("addk", "katz", "kn", "mkn")
_RANK = {m: i for i, m in enumerate(DISPLAY)}


def display(model: str) -> str:
    """'lstm/cell' -> 'LSTM (cell)'; a plug-in's id -> its lmgrid_display (lmgrid.common.plugins); an unknown id is
    returned unchanged."""
    return DISPLAY.get(model) or plugins.display(model) or model


def rank(model: str) -> tuple[int, str]:
    """Sort key of a model id: its place in DISPLAY (n-gram first), unknown ids after, alphabetically."""
    return (_RANK.get(model, len(_RANK)), model)


def is_ngram(model: str) -> bool:
    return model in NGRAM


def ordered(models) -> list[str]:
    """The distinct model ids of `models` in the fixed listing order."""
    return sorted(set(models), key=rank)
