"""One fixed colour and marker per model, the same in every figure whatever other models it shows.

Figures used to take colours in line order (or zip the 13 display names with 12 colours), so the GRU was grey in one
figure and brown in the next and the Transformer had no colour at all.  Here each model id of analysis.names.DISPLAY
owns a colour and a marker.  The colours are Paul Tol's colour-blind-safe sets ("muted", plus four of "vibrant");
13 hues cannot all stay apart for every reader, so each model also has its own marker, and the n-gram models their
own line styles (analysis.plots.NGRAM_STYLE).  Several lines of one model (e.g. 1 and 2 layers) share its hue in
darker and lighter shades (variant), so the hue still says which model a line is.

Kept free of matplotlib: hex strings only, so layout-level code and tests can read it cheaply.
"""
from __future__ import annotations

import zlib

from lmgrid.analysis import names

MODEL_COLOURS = {
    "addk": "#999933",  # olive
    "katz": "#AA4499",  # purple
    "kn": "#882255",  # wine
    "mkn": "#332288",  # indigo
    "ffnn": "#EE7733",  # orange
    "rnn": "#117733",  # green
    "lstm": "#0077BB",  # blue
    "lstm/cell": "#88CCEE",  # cyan
    "lstm/concat": "#44AA99",  # teal
    "lstm/cellonebias": "#DDCC77",  # sand
    "gru": "#CC3311",  # red
    "gru/cell": "#CC6677",  # rose
    "transformer": "#555555",  # dark grey (the oracle line is black and dotted)
}
MODEL_MARKERS = {"addk": "v", "katz": "^", "kn": "s", "mkn": "D", "ffnn": "o", "rnn": "p", "lstm": "P",
                 "lstm/cell": "X", "lstm/concat": "<", "lstm/cellonebias": ">", "gru": "h", "gru/cell": "d",
                 "transformer": "*"}
# A model id outside names.DISPLAY (a plug-in architecture: docs/models.md, "Your own model") still gets the same
# colour in every figure: one of these, picked by a hash of its id, not by its place among the lines.  Each is at
# least MIN_DISTANCE from every built-in's colour (tests/test_plugin.py), and none is black, the oracle's line.
FALLBACK = ("#BBBBBB", "#CCBB44", "#4477AA", "#EE3377", "#009988", "#33BBEE")
# Two colours closer than this (Euclidean distance in RGB, each channel 0-1) count as the same colour.
MIN_DISTANCE = 0.15
# Shades of a model's colour for its 2nd, 3rd, ... line: negative mixes toward black, positive toward white.
SHADES = (0.0, -0.4, 0.45, -0.6, 0.65, -0.75, 0.8)


def rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    return tuple(int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))


def _hex(rgb_: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(c * 255):02X}" for c in rgb_)


def colour(model: str) -> str:
    """The model's own colour; an unknown id gets a fallback fixed by its name."""
    if model in MODEL_COLOURS:
        return MODEL_COLOURS[model]
    return FALLBACK[zlib.crc32(model.encode()) % len(FALLBACK)]


def marker(model: str) -> str:
    return MODEL_MARKERS.get(model, "o")


def variant(model: str, k: int) -> str:
    """The k-th line of one model (k = 0: its own colour), a darker or lighter shade of the same hue."""
    f = SHADES[k % len(SHADES)]
    target = 0.0 if f < 0 else 1.0
    return _hex(tuple(c + abs(f) * (target - c) for c in rgb(colour(model))))


def problems(colours: dict | None = None, markers: dict | None = None) -> list[str]:
    """What breaks "one fixed colour per model": a model of names.DISPLAY without a colour or marker, or two models
    whose colours (or markers) are the same or too close to tell apart."""
    colours = MODEL_COLOURS if colours is None else colours
    markers = MODEL_MARKERS if markers is None else markers
    out = [f"{m}: no colour" for m in names.DISPLAY if m not in colours]
    out += [f"{m}: no marker" for m in names.DISPLAY if m not in markers]
    known = [m for m in names.DISPLAY if m in colours]
    for i, a in enumerate(known):
        for b in known[i + 1:]:
            d = sum((x - y) ** 2 for x, y in zip(rgb(colours[a]), rgb(colours[b]))) ** 0.5
            if d < MIN_DISTANCE:
                out.append(f"{a} and {b}: the same colour ({colours[a]}, {colours[b]})")
            if a in markers and b in markers and markers[a] == markers[b]:
                out.append(f"{a} and {b}: the same marker {markers[a]}")
    return out
