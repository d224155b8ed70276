"""Word vectors against the benchmarks shipped in gensim's wheel (gensim/test/test_data), scored by gensim itself.

* WordSim-353 and SimLex-999: Spearman rho between human ratings and cosine similarities over the pairs whose two
  words are in the vocabulary (KeyedVectors.evaluate_word_pairs), with a percentile bootstrap 95% interval over those
  pairs (scipy.stats.bootstrap, pairs resampled with their two scores; each resample's rho from how often it drew
  each pair, embed.ranks) and the coverage: covered pairs out of all.
* questions-words: 3CosAdd analogy accuracy over the questions whose four words are covered
  (KeyedVectors.evaluate_word_analogies), and that coverage.
Lookups are case-insensitive as gensim's are (a pair's word matches the most frequent case variant).  Below
MIN_PAIRS covered pairs a rho means nothing: it is reported as missing, with the coverage that explains why.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from lmgrid.embed.ranks import CHUNK, MIN_PAIRS, draw_counts, spearman, weighted_spearman

WORD_PAIRS = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}
ANALOGIES = "questions-words.txt"
DISPLAY = {"wordsim353": "WordSim-353", "simlex999": "SimLex-999", "analogy": "analogies"}
RESAMPLES = 9999  # scipy's default
CONFIDENCE = 0.95


def benchmark(name: str) -> Path:
    import gensim

    return Path(gensim.__file__).parent / "test" / "test_data" / name


def read_pairs(path) -> list[tuple[str, str, float]]:
    """(word, word, human score) of a word-pair file, read as evaluate_word_pairs reads it: '#' lines are comments,
    fields are tab-separated, lines that are not three fields with a number are skipped."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split("\t")
        try:
            a, b, score = parts
            out.append((a, b, float(score)))
        except ValueError:
            continue
    return out


def covered_pairs(kv, pairs: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    lookup = {k.upper(): k for k in reversed(kv.index_to_key)}  # the first (most frequent) case variant wins
    return [(lookup[a.upper()], lookup[b.upper()], s) for a, b, s in pairs
            if a.upper() in lookup and b.upper() in lookup]


def pair_scores(kv, path, seed: int = 0, resamples: int = RESAMPLES) -> dict:
    """rho, its interval (rho_low, rho_high), pairs, pairs_covered and coverage for one word-pair file."""
    pairs = read_pairs(path)
    covered = covered_pairs(kv, pairs)
    out = {"rho": math.nan, "rho_low": math.nan, "rho_high": math.nan, "pairs_covered": len(covered),
           "pairs": len(pairs), "coverage": len(covered) / len(pairs)}
    if len(covered) < MIN_PAIRS:
        return out
    _, (rho, _), oov_percent = kv.evaluate_word_pairs(str(path), restrict_vocab=len(kv.index_to_key))
    human = np.array([s for _, _, s in covered])
    model = np.array([kv.similarity(a, b) for a, b, _ in covered], dtype=np.float64)
    mine = float(spearman(human, model))
    if math.isnan(mine) and math.isnan(rho):  # every covered pair equally similar: no ranking, no rho
        return out
    # The interval resamples the very pairs gensim scored: their count and rho must agree with its.
    if round((1 - oov_percent / 100) * len(pairs)) != len(covered) or not math.isclose(mine, rho, abs_tol=1e-6):
        raise RuntimeError(f"{path}: the pairs resampled are not the {100 - oov_percent:.1f}% gensim scored")
    # scipy draws the pair indices, as bootstrap(paired=True) does (it resamples np.arange(n) then), and takes the
    # percentiles; each resample's rho comes from its pair counts (embed.ranks), the same rho as re-ranking it.
    ci = stats.bootstrap((np.arange(len(covered)),), lambda draws, axis=-1: resampled_rho(human, model, draws),
                         vectorized=True, batch=CHUNK, n_resamples=resamples, confidence_level=CONFIDENCE,
                         method="percentile", rng=np.random.default_rng(seed))
    out.update(rho=float(rho), rho_low=float(ci.confidence_interval.low), rho_high=float(ci.confidence_interval.high))
    return out


def resampled_rho(human: np.ndarray, model: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """[...] the rho of each resample of the pairs (draws [..., n], the indices drawn): the rho of (human[draws],
    model[draws]), computed from how often each pair was drawn."""
    counts = draw_counts(draws, len(human))
    rho = weighted_spearman(human, model[None, :], counts.reshape(-1, len(human)))[:, 0]
    return rho.reshape(draws.shape[:-1])


def analogy_scores(kv, path) -> dict:
    """accuracy over the covered questions (missing when none is), questions_covered, questions, coverage."""
    questions = sum(1 for line in Path(path).read_text(encoding="utf-8").splitlines()
                    if line.strip() and not line.startswith(":"))
    _, sections = kv.evaluate_word_analogies(str(path), restrict_vocab=len(kv.index_to_key))
    total = sections[-1]  # gensim's "Total accuracy" section
    correct, covered = len(total["correct"]), len(total["correct"]) + len(total["incorrect"])
    return {"accuracy": correct / covered if covered else math.nan, "questions_covered": covered,
            "questions": questions, "coverage": covered / questions}


def scores(kv, seed: int = 0) -> dict:
    """Every benchmark's figures as flat columns: wordsim353_rho, ..., analogy_accuracy, ..."""
    out = {}
    for name, file in WORD_PAIRS.items():
        out.update({f"{name}_{k}": v for k, v in pair_scores(kv, benchmark(file), seed).items()})
    out.update({f"analogy_{k}": v for k, v in analogy_scores(kv, benchmark(ANALOGIES)).items()})
    return out


def benchmark_words() -> set[str]:
    """Every word of the two word-pair benchmarks, lower-cased."""
    return {w.lower() for file in WORD_PAIRS.values() for a, b, _ in read_pairs(benchmark(file)) for w in (a, b)}


def probe_words(words_by_count: list[str], n: int, given: list[str] | None = None) -> list[str]:
    """The probes whose neighbours are listed: `given` if any; else the n most frequent words that occur in the
    word-pair benchmarks (content words, on an English corpus), topped up with the most frequent words."""
    if given:
        return list(given)
    bench = benchmark_words()
    probes = [w for w in words_by_count if w.lower() in bench][:n]
    return probes + [w for w in words_by_count if w not in probes][:n - len(probes)]


def neighbours(kv, probes: list[str], k: int) -> list[dict]:
    """Rows probe, rank, neighbour, cosine: the k nearest words of each probe the vectors hold."""
    rows = []
    for p in probes:
        if p in kv.key_to_index:
            for rank, (w, cos) in enumerate(kv.most_similar(p, topn=k), 1):
                rows.append({"probe": p, "rank": rank, "neighbour": w, "cosine": float(cos)})
    return rows
