"""The config's `combine:` section: each named combination's components, as (cell, mode) pairs.

A component is a selector over the cells of the config's studies (any of arch, impl, n_step, layers, regime, seed,
as the reference rows select runs) and a `mode` (default `base`: the cell as trained; lmgrid.testtime.combine.cells.MODES).
A selector may match several cells (`{arch: mkn}`: every modified-KN order); each becomes a component, once.
A test-time mode (cache, dynamic, dynamic+cache) on a cell that is not stream-regime is a config error (one line
naming the combination, the cell and the mode), not a note.
"""
from __future__ import annotations

from dataclasses import asdict

from lmgrid.common.errors import LmgridError
from lmgrid.run.key import RunKey, all_runs

from lmgrid.testtime.combine.scorefile import SCORE_DIR

SELECT_KEYS = ("arch", "impl", "n_step", "layers", "regime", "seed")


class NoCell(LmgridError):
    """A component that selects no cell: the studies decide which cells exist, the combination is left out."""


def components(name: str, spec: dict, runs: list[RunKey]) -> list[tuple[RunKey, str]]:
    out: list[tuple[RunKey, str]] = []
    for i, sel in enumerate(spec["components"]):
        mode = sel.get("mode", "base")
        want = {k: v for k, v in sel.items() if k in SELECT_KEYS}
        hits = [k for k in runs if all(getattr(k, f) == v for f, v in want.items())]
        if not hits:
            raise NoCell(f"combine.{name}.components[{i}]: {want} matches no cell of the studies")
        if mode != "base":  # a test-time mode reads a stream: refused here, before any job is planned
            for k in hits:
                if k.regime != "stream" or k.is_ngram:
                    raise LmgridError(f"combine.{name}.components[{i}]: mode {mode} needs a stream-regime cell; "
                                      f"{k.name} is a {k.regime}-regime {k.arch} cell")
        out += [(k, mode) for k in hits if (k, mode) not in out]
    return out


def resolve(config: dict) -> tuple[dict[str, list[tuple[RunKey, str]]], list[str]]:
    """({combination: [(cell, mode), ...]}, notes) of config['combine'] over the cells of config['studies'].  A
    combination with a component that matches no cell is left out, with a note saying which: the studies decide
    which cells exist (`SET="studies={...}"` replaces them), and a combination follows them."""
    runs = all_runs(config["studies"])
    out, notes = {}, []
    for name, spec in (config.get("combine") or {}).items():
        try:
            out[name] = components(name, spec, runs)
        except NoCell as e:
            notes.append(f"combination {name} left out: {e}")
    return out, notes


def score_dir(corpus: str, key: RunKey, mode: str) -> str:
    return SCORE_DIR.format(corpus=corpus, mode=mode, **asdict(key))


def label(key: RunKey, mode: str) -> str:
    return key.name if mode == "base" else f"{key.name} +{mode}"
