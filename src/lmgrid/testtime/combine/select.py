"""The config's `combine:` section: each named combination's components, as (cell, mode) pairs, per seed.

A component is a selector over the cells of the config's studies (any of arch, impl, n_step, layers, regime, seed,
as the reference rows select runs) and a `mode` (default `base`: the cell as trained; lmgrid.testtime.combine.cells.MODES).
A selector may match several cells (`{arch: mkn}`: every modified-KN order); each becomes a component, once.
A test-time mode (cache, dynamic, dynamic+cache) on a cell that is not stream-regime is a config error (one line
naming the combination, the cell and the mode), not a note.

Seeds (issue 44): a neural selector that does not pin a `seed:` stands for the same model at every seed, so the
combination is run once per seed s, each such component taken from seed s (`runs`); n-grams are deterministic (seed
0) and shared by every seed's run, and a pinned selector gives the same cell in every run.  The seeds are those
every unpinned neural selector has cells of (the config's `seeds:`, which every study then has); a combination with
no unpinned neural selector is one run, as before.  Output folders (`folder`): results/<corpus>/combine/<name>/ for
a combination of one run, <name>/s<seed>/ for each seed of one that runs over several.
"""
from __future__ import annotations

from dataclasses import asdict

from lmgrid.common.errors import LmgridError
from lmgrid.run.key import RunKey, all_runs

from lmgrid.testtime.combine.scorefile import SCORE_DIR

SELECT_KEYS = ("arch", "impl", "n_step", "layers", "regime", "seed")

Components = list[tuple[RunKey, str]]


class NoCell(LmgridError):
    """A component that selects no cell: the studies decide which cells exist, the combination is left out."""


def _hits(name: str, spec: dict, runs: list[RunKey]) -> list[tuple[dict, list[RunKey], str]]:
    """(selector, the cells it matches, mode) for each component of a combination (checked)."""
    out = []
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
        out.append((sel, hits, mode))
    return out


def _add(out: Components, keys: list[RunKey], mode: str) -> None:
    out += [(k, mode) for k in keys if (k, mode) not in out]


def components(name: str, spec: dict, runs: list[RunKey]) -> Components:
    """Every cell each selector matches, whatever its seed (one run of the combination)."""
    out: Components = []
    for _, hits, mode in _hits(name, spec, runs):
        _add(out, hits, mode)
    return out


def per_seed(sel: dict, hits: list[RunKey]) -> bool:
    """A selector that varies with the run's seed: it pins no seed and matches neural cells."""
    return "seed" not in sel and any(not k.is_ngram for k in hits)


def cells_at(hits: list[RunKey], seed: int) -> list[RunKey]:
    """A selector's cells in the run of `seed`: its neural cells of that seed, and its n-grams (shared)."""
    return [k for k in hits if k.is_ngram or k.seed == seed]


def runs_of(name: str, spec: dict, runs: list[RunKey]) -> tuple[dict[int | None, Components], list[str]]:
    """({seed: components} for a combination run per seed, or {None: components} for one run; notes)."""
    hits = _hits(name, spec, runs)
    varying = [{k.seed for k in h if not k.is_ngram} for sel, h, _ in hits if per_seed(sel, h)]
    if not varying:
        return {None: components(name, spec, runs)}, []
    seeds = sorted(set.intersection(*varying))
    notes = []
    dropped = sorted(set.union(*varying) - set(seeds))
    if dropped:
        notes.append(f"combination {name}: seeds {dropped} left out (a component that pins no seed has no cell "
                     f"of them)")
    if not seeds:
        raise NoCell(f"combine.{name}: its components that pin no seed share no seed")
    out = {}
    for s in seeds:
        comps: Components = []
        for sel, h, mode in hits:
            _add(comps, cells_at(h, s) if per_seed(sel, h) else h, mode)
        out[s] = comps
    return out, notes


def resolve(config: dict) -> tuple[dict[str, dict[int | None, Components]], list[str]]:
    """({combination: {seed: [(cell, mode), ...]}}, notes) of config['combine'] over the cells of config['studies']
    (seed None: a combination of one run whose components pin their seeds, or have none).  A combination with a
    component that matches no cell is left out, with a note saying which: the studies decide which cells exist
    (`SET="studies={...}"` replaces them), and a combination follows them."""
    runs = all_runs(config["studies"])
    out, notes = {}, []
    for name, spec in (config.get("combine") or {}).items():
        try:
            out[name], more = runs_of(name, spec, runs)
            notes += more
        except NoCell as e:
            notes.append(f"combination {name} left out: {e}")
    return out, notes


def folder(name: str, seed: int | None, seeds: int) -> str:
    """A run's folder under results/<corpus>/combine/: <name> when the combination is one run, <name>/s<seed> for
    each of several seeds."""
    return name if seeds == 1 else f"{name}/s{seed}"


def run_folders(resolved: dict[str, dict[int | None, Components]]) -> dict[str, tuple[str, int | None, Components]]:
    """{folder: (name, seed, components)} of every run of every combination, in config order."""
    return {folder(name, s, len(by_seed)): (name, s, comps)
            for name, by_seed in resolved.items() for s, comps in by_seed.items()}


def compare_pairs(config: dict, resolved: dict, notes: list[str]) -> list[tuple[str, str]]:
    """[(name, compare_with)] of the combinations that name one (`combine.<name>.compare_with`), among those
    resolved; a pair with a member left out is left out too, with a note.  A name that is no combination of the
    config is an error (one line)."""
    combos = config.get("combine") or {}
    pairs = []
    for name, spec in combos.items():
        other = spec.get("compare_with")
        if other is None:
            continue
        if other not in combos:
            raise LmgridError(f"combine.{name}.compare_with: {other!r} is not a combination of the config "
                              f"(combine: has {', '.join(combos)})")
        missing = [n for n in (name, other) if n not in resolved]
        if missing:
            notes.append(f"comparison {name} against {other} left out: combination {missing[0]} is left out")
            continue
        pairs.append((name, other))
    return pairs


def score_dir(corpus: str, key: RunKey, mode: str) -> str:
    return SCORE_DIR.format(corpus=corpus, mode=mode, **asdict(key))


def label(key: RunKey, mode: str) -> str:
    return key.name if mode == "base" else f"{key.name} +{mode}"
