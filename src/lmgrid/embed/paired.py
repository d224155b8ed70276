"""Comparisons between a study's vector sets on one footing: the same word pairs, the same resamples, and the spread
over seeds.

* Common pair set: per word-pair benchmark, the pairs every vector set of the study covers (PPMI-SVD drops words its
  counts never saw, so its own covered set can differ from the neural cells'); every rho compared is over it.
* Paired bootstrap: each resample draws one index set and every vector set's rho is computed on it, so the
  difference against the reference vector set uses the same resample on both sides (a set against itself: exactly 0).
* Two resampling units.  Pairs: the pairs drawn with replacement (the usual interval, which treats pairs as
  independent).  Words: pairs share words (SimLex-999 reuses each word in about three pairs), so pairs are not
  independent; following the vertex bootstrap for dyadic data (Snijders & Borgatti 1999, "Non-parametric standard
  errors and tests for network statistics", Connections 22(2)), the words are the units: a resample draws the words
  with replacement and keeps every pair among the drawn words, a pair (a, b) counted c_a * c_b times when a was
  drawn c_a times and b c_b times.  Its interval is the wider, honest one when the shared words matter.
* Seeds: the rho of every seed's vectors of one cell (the run key but its seed, and the embedding), mean and sample
  std (ddof 1) over the seeds, beside the bootstrap interval of each single seed.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from lmgrid.embed.evaluate import CONFIDENCE, WORD_PAIRS, benchmark, read_pairs
from lmgrid.embed.ranks import CHUNK, MIN_PAIRS, spearman, weighted_spearman

# Each vector set is re-ranked on every resample, twice (pairs, words), for every set of a study: 2,000 resamples (as
# the combinations' bootstrap) put a 95% percentile interval's ends within a small fraction of its width, at a fifth
# of scipy's default 9,999 (which made a PTB preset's embeddings job several minutes long).
PAIRED_RESAMPLES = 2000

# The run key's fields but the seed, and the vectors taken: the rows that are one cell's seeds.
CELL_COLUMNS = ["arch", "impl", "n_step", "layers", "regime", "embedding", "dim"]
UNITS = ("pair", "word")


def pair_similarities(kv, pairs: list[tuple[str, str, float]]) -> np.ndarray:
    """Cosine of each benchmark pair's two words (case-insensitive, as evaluate.covered_pairs), NaN where either word
    has no vector: a vector set's whole contribution to the comparisons, a few hundred floats."""
    lookup = {k.upper(): k for k in reversed(kv.index_to_key)}
    out = np.full(len(pairs), np.nan)
    for i, (a, b, _) in enumerate(pairs):
        if a.upper() in lookup and b.upper() in lookup:
            out[i] = kv.similarity(lookup[a.upper()], lookup[b.upper()])
    return out


def benchmark_similarities(kv) -> dict[str, np.ndarray]:
    return {name: pair_similarities(kv, read_pairs(benchmark(file))) for name, file in WORD_PAIRS.items()}


def common_mask(sims: np.ndarray) -> np.ndarray:
    """[pairs] bool: the pairs every vector set (row of sims [sets, pairs]) covers."""
    return ~np.isnan(sims).any(axis=0)


def pair_draws(n_pairs: int, rng, resamples: int) -> np.ndarray:
    """[resamples, pairs] how often each pair is drawn: the pairs drawn with replacement."""
    return rng.multinomial(n_pairs, np.full(n_pairs, 1.0 / n_pairs), size=resamples)


def word_draws(words: list[tuple[str, str]], rng, resamples: int) -> np.ndarray:
    """[resamples, pairs] multiplicities: the words drawn with replacement, pair (a, b) counted c_a * c_b times."""
    vocab = sorted({w for pair in words for w in pair})
    where = {w: i for i, w in enumerate(vocab)}
    a = np.array([where[x] for x, _ in words])
    b = np.array([where[y] for _, y in words])
    counts = rng.multinomial(len(vocab), np.full(len(vocab), 1.0 / len(vocab)), size=resamples)
    return counts[:, a] * counts[:, b]


def resampled_rhos(human: np.ndarray, sims: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """[resamples, sets]: every set's rho on each draw (one weight row for all sets: paired by construction)."""
    return np.concatenate([weighted_spearman(human, sims, draws[i:i + CHUNK])
                           for i in range(0, len(draws), CHUNK)]) if len(draws) else np.zeros((0, len(sims)))


def differences(rhos: np.ndarray, ref: int) -> np.ndarray:
    """[resamples, sets]: each set's rho minus the reference set's, within each resample."""
    return rhos - rhos[:, [ref]]


def interval(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval at CONFIDENCE per column, over the resamples that gave a rho."""
    tail = (1 - CONFIDENCE) / 2 * 100
    with warnings.catch_warnings():  # a set with no rho on any resample: NaN, no interval (not a warning)
        warnings.filterwarnings("ignore", "All-NaN slice", RuntimeWarning)
        low, high = np.nanpercentile(values, [tail, 100 - tail], axis=0)
    return low, high


def compare(human: np.ndarray, sims: np.ndarray, words: list[tuple[str, str]], ref: int, seed: int = 0,
            resamples: int = PAIRED_RESAMPLES) -> dict[str, np.ndarray]:
    """On the common pair set of sims [sets, pairs]: rho, and per unit (pair, word) the rho's interval and the
    difference against set `ref` with its paired interval.  Arrays over sets, plus common_pairs (a count)."""
    keep = common_mask(sims)
    h, s = human[keep], sims[:, keep]
    w = [p for p, k in zip(words, keep) if k]
    n = int(keep.sum())
    out = {"common_pairs": n}
    nan = np.full(len(sims), np.nan)
    if n < MIN_PAIRS:
        out.update(rho=nan, diff=nan, **{f"{k}_{u}": nan for u in UNITS
                                         for k in ("rho_low", "rho_high", "diff_low", "diff_high")})
        return out
    rho = spearman(np.broadcast_to(h, s.shape), s, axis=-1)
    out.update(rho=rho, diff=rho - rho[ref])
    for unit in UNITS:
        rng = np.random.default_rng(seed)
        draws = pair_draws(n, rng, resamples) if unit == "pair" else word_draws(w, rng, resamples)
        rhos = resampled_rhos(h, s, draws)
        out[f"rho_low_{unit}"], out[f"rho_high_{unit}"] = interval(rhos)
        out[f"diff_low_{unit}"], out[f"diff_high_{unit}"] = interval(differences(rhos, ref))
    return out


def seed_spread(rows: pd.DataFrame, values: pd.Series) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(mean, sample std, seeds) of `values` over the rows of one cell (CELL_COLUMNS equal, seeds differing), each
    row given its cell's figures; std NaN for a cell of one seed."""
    # A baseline's arch is its kind ("ppmi-svd") and its embedding "-": one per dimension, a cell of its own.
    ids = rows[[c for c in CELL_COLUMNS if c in rows.columns]]
    keys = pd.Series(["|".join(map(str, r)) for r in ids.itertuples(index=False)], index=rows.index)
    grouped = values.groupby(keys)
    return grouped.transform("mean"), grouped.transform(lambda v: v.std(ddof=1)), grouped.transform("count")


def study_columns(rows: pd.DataFrame, sims: dict[tuple[str, str], dict[str, np.ndarray]], ref: tuple[str, str],
                  seed: int = 0, resamples: int = PAIRED_RESAMPLES) -> pd.DataFrame:
    """rows (a study's embeddings rows, ids model and embedding) with, per word-pair benchmark: common_pairs, rho on
    them with pair- and word-level intervals, the paired difference against `ref` (model, embedding) with both
    intervals, and the seed spread (mean, std, seeds) of the common-set rho."""
    ids = list(zip(rows["model"], rows["embedding"]))
    if ref not in ids:
        raise RuntimeError(f"the reference vectors {ref} are not among the study's rows")
    out = rows.copy()
    out["reference"] = f"{ref[0]} ({ref[1]})" if ref[1] != "-" else ref[0]
    for name, file in WORD_PAIRS.items():
        pairs = read_pairs(benchmark(file))
        human = np.array([s for _, _, s in pairs])
        words = [(a.upper(), b.upper()) for a, b, _ in pairs]
        matrix = np.array([sims[i][name] for i in ids])
        got = compare(human, matrix, words, ids.index(ref), seed, resamples)
        out[f"{name}_common_pairs"] = got.pop("common_pairs")
        for k, v in got.items():
            out[f"{name}_common_{k}"] = v
        mean, std, count = seed_spread(out, out[f"{name}_common_rho"])
        out[f"{name}_seed_mean"], out[f"{name}_seed_std"], out[f"{name}_seeds"] = mean, std, count
    return out


def spread_text(mean: float, std: float, seeds: int) -> str:
    """'0.412 ± 0.013 (3 seeds)'; '-' for a cell of one seed (no spread to show)."""
    if seeds < 2 or math.isnan(std):
        return "-"
    return f"{mean:.3f} ± {std:.3f} ({int(seeds)} seeds)"
