"""The study's paired embedding comparisons (lmgrid.embed.paired): one common pair set, a paired bootstrap of the
difference in rho, a resample over words, and the spread over seeds.  Constructed vectors, no Snakemake.

Each test names the mutation it kills and runs that mutant too, asserting that the check catches it."""
from __future__ import annotations

import statistics

import numpy as np
import pandas as pd
from scipy import stats

from lmgrid.embed import evaluate, export, paired, ranks, study

RESAMPLES = 300  # enough for the properties checked (exact zeros, a width ratio); paired.PAIRED_RESAMPLES in the pipeline


def _wordsim():
    pairs = evaluate.read_pairs(evaluate.benchmark("wordsim353.tsv"))
    words = sorted({w for a, b, _ in pairs for w in (a, b)})
    return pairs, words


def _kv(words, seed):
    return export.keyed_vectors(list(words), np.random.default_rng(seed).standard_normal((len(words), 8))
                                .astype(np.float32))


def _rows(names, seeds=None):
    """Rows of a study's embeddings table for vector sets `names` (one cell's seeds when `seeds` is given)."""
    seeds = seeds or [1] * len(names)
    return pd.DataFrame([{"model": n, "run": f"runs/{n}", "arch": "lstm", "impl": "torch", "n_step": 0, "layers": 1,
                          "regime": "stream", "seed": s, "embedding": "input", "dim": 8}
                         for n, s in zip(names, seeds)])


def _common_set_is_the_intersection(tmp_path, label: str) -> bool:
    """Set A covers every WordSim-353 word, set B lacks 40 of them: both are scored on B's covered pairs (the
    intersection), A's rho there is spearman over those pairs by hand, and the table names that count."""
    pairs, words = _wordsim()
    a = _kv(words, 0)
    b = _kv(words[40:], 1)
    sims = {(n, "input"): paired.benchmark_similarities(kv) for n, kv in (("A", a), ("B", b))}
    got = paired.study_columns(_rows(["A", "B"]), sims, ("A", "input"), resamples=RESAMPLES)
    both = evaluate.covered_pairs(b, pairs)  # B's words are a subset of A's: B's pairs are the intersection
    by_hand = stats.spearmanr([s for *_, s in both], [a.similarity(x, y) for x, y, _ in both]).statistic
    own_a = len(evaluate.covered_pairs(a, pairs))
    stem = tmp_path / label / "embeddings"
    stem.parent.mkdir()
    study.write_table(got.assign(**{c: np.nan for c in _score_columns()}, **_coverage(own_a, len(both))), stem)
    md = stem.with_suffix(".md").read_text()
    return (own_a > len(both) >= evaluate.MIN_PAIRS
            and (got["wordsim353_common_pairs"] == len(both)).all()
            and np.isclose(got["wordsim353_common_rho"].iloc[0], by_hand, atol=1e-9)
            and f"WordSim-353 rho, {len(both)} common pairs" in md)


def _score_columns():
    return ["wordsim353_rho", "wordsim353_rho_low", "wordsim353_rho_high", "simlex999_rho", "simlex999_rho_low",
            "simlex999_rho_high", "analogy_accuracy"]


def _coverage(own: int, common: int) -> dict:
    """The per-set coverage columns evaluate.scores would give (the table needs them; their values do not matter
    here beyond WordSim-353 being covered)."""
    return {"wordsim353_pairs_covered": own, "wordsim353_pairs": 353, "simlex999_pairs_covered": common,
            "simlex999_pairs": 999, "analogy_questions_covered": 0, "analogy_questions": 19544}


def test_common_pair_set_is_the_pairs_every_vector_set_covers(tmp_path, monkeypatch):
    """Every vector set of a study is scored on the pairs all of them cover, and the table's header gives that
    count.  Kills: a set scored on its own covered pairs (the common mask taken as the first set's coverage)."""
    assert _common_set_is_the_intersection(tmp_path, "new")
    with monkeypatch.context() as m:
        m.setattr(paired, "common_mask", lambda sims: ~np.isnan(sims[0]))
        assert not _common_set_is_the_intersection(tmp_path, "mutant")


def _constructed(n_words=40, n_pairs=120, seed=0):
    """Human scores and two vector sets' similarities over pairs of n_words words: a word-level effect (each word's
    own 'similarity level', shared by all its pairs) plus noise."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(n_words, size=(n_pairs, 2))
    idx = idx[idx[:, 0] != idx[:, 1]]
    level = rng.standard_normal(n_words)
    human = level[idx].sum(1) + 0.5 * rng.standard_normal(len(idx))
    good = level[idx].sum(1) + 1.0 * rng.standard_normal(len(idx))
    worse = level[idx].sum(1) + 3.0 * rng.standard_normal(len(idx))
    words = [(f"W{i}", f"W{j}") for i, j in idx]
    return human, np.array([good, good.copy(), worse]), words


def _self_difference_is_exact_zero() -> bool:
    human, sims, words = _constructed()
    got = paired.compare(human, sims, words, ref=0, resamples=RESAMPLES)
    copy_zero = all(got[k][1] == 0.0 for k in ("diff", "diff_low_pair", "diff_high_pair", "diff_low_word",
                                               "diff_high_word"))
    return copy_zero and got["diff_high_pair"][2] < 0  # the worse set: a real, negative difference


def test_paired_difference_of_a_set_against_itself_is_exactly_zero(monkeypatch):
    """A vector set compared with an identical copy of itself differs by exactly 0 with the interval [0, 0], for the
    pair and the word resample alike (the same resample for both sides); a noisier set's difference is negative.
    Kills: unpaired resamples (the reference's rho taken from another resample than the set's)."""
    assert _self_difference_is_exact_zero()
    with monkeypatch.context() as m:
        m.setattr(paired, "differences", lambda rhos, ref: rhos - np.roll(rhos[:, [ref]], 1, axis=0))
        assert not _self_difference_is_exact_zero()


def _seed_spread_is_the_sample_std() -> bool:
    _, words = _wordsim()
    names = ["LSTM s1", "LSTM s2", "LSTM s3", "PPMI-SVD d8"]
    rows = _rows(names, seeds=[1, 2, 3, 1])
    rows.loc[3, ["run", "arch", "impl", "n_step", "layers", "regime", "seed", "embedding"]] = \
        ["", "ppmi-svd", np.nan, np.nan, np.nan, np.nan, np.nan, "-"]  # a baseline's row, as the pipeline's
    rows.loc[3, "embedding"] = "-"
    sims = {(n, e): paired.benchmark_similarities(_kv(words, i))
            for i, (n, e) in enumerate(zip(rows["model"], rows["embedding"]))}
    got = paired.study_columns(rows, sims, ("LSTM s1", "input"), resamples=20)
    rho = list(got["wordsim353_common_rho"][:3])
    lstm, ppmi = got.iloc[0], got.iloc[3]
    return (lstm["wordsim353_seeds"] == 3 and np.isclose(lstm["wordsim353_seed_std"], statistics.stdev(rho))
            and np.isclose(lstm["wordsim353_seed_mean"], statistics.mean(rho))
            and paired.spread_text(ppmi["wordsim353_seed_mean"], ppmi["wordsim353_seed_std"],
                                   ppmi["wordsim353_seeds"]) == "-")


def test_seed_spread_is_the_sample_std_over_a_cells_seeds(monkeypatch):
    """A cell's seeds (same run key but the seed) get the mean and sample std (ddof 1) of their common-pair rho,
    equal to statistics.stdev by hand; a cell of one seed shows no spread.  Kills: one seed reported as the spread
    (the seed counted as part of the cell, so each seed is a cell of one)."""
    assert _seed_spread_is_the_sample_std()
    with monkeypatch.context() as m:
        m.setattr(paired, "CELL_COLUMNS", paired.CELL_COLUMNS + ["seed"])
        assert not _seed_spread_is_the_sample_std()


def _word_interval_wider() -> bool:
    human, sims, words = _constructed(n_words=25, n_pairs=200)  # each word in ~16 pairs
    got = paired.compare(human, sims, words, ref=0, resamples=RESAMPLES)
    pair_w = got["rho_high_pair"][0] - got["rho_low_pair"][0]
    word_w = got["rho_high_word"][0] - got["rho_low_word"][0]
    return word_w > 1.3 * pair_w


def test_word_resample_is_wider_where_pairs_share_words(monkeypatch):
    """Pairs built from 25 words with a word-level effect (each word in about 16 pairs): resampling words gives a
    rho interval clearly wider than resampling pairs, which takes the shared words for independent evidence.
    Kills: the word resample drawing pairs (paired.word_draws replaced by pair draws)."""
    assert _word_interval_wider()
    with monkeypatch.context() as m:
        m.setattr(paired, "word_draws", lambda words, rng, n: paired.pair_draws(len(words), rng, n))
        assert not _word_interval_wider()


def _weighted_rho_is_the_repeated_datas() -> bool:
    pairs, _ = _wordsim()
    rng = np.random.default_rng(1)
    human = np.array([s for *_, s in pairs])
    sims = np.round(human + rng.normal(0, 3, (3, len(human))))  # rounded: ties in both rankings
    weights = paired.word_draws([(a.upper(), b.upper()) for a, b, _ in pairs], rng, 4)
    got = ranks.weighted_spearman(human, sims, weights)
    for r, w in enumerate(weights):
        idx = np.repeat(np.arange(len(human)), w)
        if not np.allclose([stats.spearmanr(human[idx], s[idx]).statistic for s in sims], got[r], atol=1e-12):
            return False
    return True


def test_weighted_rho_is_the_rho_of_the_repeated_pairs(monkeypatch):
    """A resample is a weight per pair (how often it is in the resampled data); the rho computed from the weights
    equals scipy's spearmanr over the data with each pair repeated that often, ties included.  Kills: the distinct
    pairs ranked without their weights (ranks.weighted_ranks replaced by plain ranks)."""
    assert _weighted_rho_is_the_repeated_datas()
    with monkeypatch.context() as m:
        m.setattr(ranks, "weighted_ranks", lambda values, weights: np.broadcast_to(
            stats.rankdata(values, axis=-1)[:, None, :], (len(values),) + weights.shape))
        assert not _weighted_rho_is_the_repeated_datas()
