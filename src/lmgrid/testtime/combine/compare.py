"""Paired bootstrap of two combinations over test sentences (issue 44): config `combine.<name>.compare_with`.

For a pair (a combination, the one it is compared with) and each seed both were run at, the statistic is the
difference in test PPL, PPL(name) - PPL(compare_with) (negative: `name` is better), and its 95% interval comes from a
bootstrap that resamples **test sentences** (a sentence's targets: its words and its </s>), never tokens, since the
tokens of one sentence are not independent draws; a resample keeps every sentence's targets together and its PPL is
exp(resampled NLL sum / resampled target count).  The two members are scored on the **same** resample (scipy's
`paired=True`), so a combination against itself gives exactly [0, 0].  Pooled over seeds, the statistic is the mean
over seeds of the per-seed differences, with one sentence resample shared by every seed and both members: it
measures the test set's sampling only; the spread over seeds is the t interval of the per-seed differences
(lmgrid.analysis.effects.t_interval), shown beside it.  The resampler's seed is fixed (RESAMPLE_SEED): the same
files give the same interval.

A combination's per-token test log-probs are its mixture's, rebuilt from its components' score files and the weights
in its result.json (mixture.mixture_logprob) and checked against the test PPL result.json claims; the sentence
boundaries are those of the test split (test.txt), whose targets must be the score files' (tokens_sha256).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json

from lmgrid.testtime.combine import scorefile
from lmgrid.testtime.combine.mixture import mixture_logprob

RESAMPLES = 2000
RESAMPLE_SEED = 0
CONFIDENCE = 0.95
PAIRED = True      # the same resampled sentences for both members (a combination against itself: [0, 0])
BATCH = 200        # resamples drawn at once: bounds the memory (resamples x sentences x arrays)
COLUMNS = ["combination", "compare_with", "seed", "seeds", "test_ppl", "compare_with_test_ppl", "difference",
           "ci95_low", "ci95_high", "seed_t_low", "seed_t_high", "sentences", "tokens", "resamples"]


def mixture_test_logprob(result: dict, where: str = "") -> tuple[np.ndarray, str]:
    """(per-token test log-probs of a combination's mixture [N], the tokens' sha256), checked against its PPL."""
    tests = [scorefile.read(c["score_dir"], "test") for c in result["components"]]
    with np.errstate(divide="ignore"):
        lp = mixture_logprob(np.log(np.asarray(result["weights"], dtype=float)), scorefile.stack(tests))
    ppl = math.exp(-float(lp.mean()))
    scorefile.check_ppl(ppl, result["test_ppl"], f"{where or result['name']}: its mixture rebuilt")
    return lp, tests[0].tokens_sha256


def sentence_lengths(sentences: list[list[str]]) -> np.ndarray:
    """Targets per sentence: its words and one </s> (lmgrid.data.ppl's convention)."""
    return np.array([len(s) + 1 for s in sentences], dtype=np.int64)


def sentence_units(lp: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(NLL sum, targets) per sentence: the units the bootstrap resamples."""
    if int(lengths.sum()) != lp.size:
        raise LmgridError(f"{lp.size} test log-probs for {int(lengths.sum())} targets of the test sentences")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return -np.add.reduceat(lp.astype(np.float64), starts), lengths.astype(np.float64)


def _ppl_difference(*arrays, axis=-1):
    """mean over pairs of exp(NLL_a / n) - exp(NLL_b / n): arrays = (nll_a1, nll_b1, ..., nll_aK, nll_bK, targets),
    each summed over its last axis (the resampled sentences)."""
    n = arrays[-1].sum(axis=axis)
    diffs = [np.exp(a.sum(axis=axis) / n) - np.exp(b.sum(axis=axis) / n)
             for a, b in zip(arrays[:-1:2], arrays[1:-1:2])]
    return np.mean(diffs, axis=0)


def paired_bootstrap(pairs: list[tuple[np.ndarray, np.ndarray]], lengths: np.ndarray,
                     resamples: int = RESAMPLES, seed: int = RESAMPLE_SEED) -> tuple[float, float, float]:
    """(difference, low, high): the mean over `pairs` of PPL(a) - PPL(b) on the test set, and its percentile
    interval over `resamples` resamples of the sentences, the same resample for every array."""
    data: list[np.ndarray] = []
    targets = None
    for a, b in pairs:
        (nll_a, targets), (nll_b, _) = sentence_units(a, lengths), sentence_units(b, lengths)
        data += [nll_a, nll_b]
    data.append(targets)
    point = float(_ppl_difference(*data))
    res = stats.bootstrap(tuple(data), _ppl_difference, n_resamples=resamples, batch=BATCH, vectorized=True,
                          paired=PAIRED, axis=-1, confidence_level=CONFIDENCE, method="percentile",
                          rng=np.random.default_rng(seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


def _by_name(result_paths: list[str]) -> dict[str, dict]:
    """{name: {seed: (result, path)}} of the result.json files."""
    out: dict[str, dict] = {}
    for p in result_paths:
        r = read_json(p)
        out.setdefault(r["name"], {})[r.get("seed")] = (r, p)
    return out


def paired_seeds(a: dict, b: dict) -> list[tuple]:
    """(seed, seed of a, seed of b) to compare: the seeds both were run at; a one-run combination (seed None)
    stands beside every seed of the other."""
    if None in a or None in b:
        return [(sa if sa is not None else sb, sa, sb) for sa in a for sb in b]
    return [(s, s, s) for s in sorted(set(a) & set(b))]


def compare(pairs: list[tuple[str, str]], result_paths: list[str], sentences: list[list[str]], test_sha256: str,
            resamples: int = RESAMPLES) -> pd.DataFrame:
    """One row per pair and seed, then the pair's pooled row (seed 'pooled') when it has several seeds."""
    runs = _by_name(result_paths)
    lengths = sentence_lengths(sentences)
    rows = []
    for name, other in pairs:
        for n in (name, other):
            if n not in runs:
                raise LmgridError(f"combine.{name}.compare_with: no result of combination {n!r} was given")
        seeds = paired_seeds(runs[name], runs[other])
        if not seeds:
            raise LmgridError(f"combine.{name}.compare_with {other}: the two share no seed")
        members = []
        for s, sa, sb in seeds:
            (ra, pa), (rb, pb) = runs[name][sa], runs[other][sb]
            (lp_a, sha_a), (lp_b, sha_b) = mixture_test_logprob(ra, pa), mixture_test_logprob(rb, pb)
            for sha, p in ((sha_a, pa), (sha_b, pb)):
                if sha != test_sha256:
                    raise LmgridError(f"{p}: its test scores are not of the given test split's targets")
            diff, low, high = paired_bootstrap([(lp_a, lp_b)], lengths, resamples)
            rows.append({"combination": name, "compare_with": other, "seed": "-" if s is None else str(s), "seeds": 1,
                         "test_ppl": ra["test_ppl"], "compare_with_test_ppl": rb["test_ppl"], "difference": diff,
                         "ci95_low": low, "ci95_high": high})
            members.append((lp_a, lp_b))
        if len(members) > 1:
            from lmgrid.analysis.effects import t_interval

            diff, low, high = paired_bootstrap(members, lengths, resamples)
            per_seed = [r["difference"] for r in rows[-len(members):]]
            t_low, t_high = t_interval(per_seed)
            rows.append({"combination": name, "compare_with": other, "seed": "pooled", "seeds": len(members),
                         "test_ppl": float(np.mean([r["test_ppl"] for r in rows[-len(members):]])),
                         "compare_with_test_ppl": float(np.mean([r["compare_with_test_ppl"]
                                                                 for r in rows[-len(members):]])),
                         "difference": diff, "ci95_low": low, "ci95_high": high, "seed_t_low": t_low,
                         "seed_t_high": t_high})
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.assign(sentences=len(lengths), tokens=int(lengths.sum()), resamples=resamples)


CAPTION = ("Paired comparisons of combinations (config combine.<name>.compare_with): the difference in test PPL, "
           "combination minus compare_with (negative: the combination is better), with its 95% percentile "
           f"bootstrap interval over test sentences ({RESAMPLES} resamples, resampler seed {RESAMPLE_SEED}): each "
           "resample draws whole sentences with replacement, the same sentences for both members. A pooled row "
           "averages the per-seed differences on one shared resample (test-set sampling only); its seed t interval "
           "is the 95% t interval of the per-seed differences (the spread over seeds). Both members' weights and "
           "test-time settings were chosen on valid; test was read once.")


def write(table: pd.DataFrame, csv_out: str, md_out: str, html_out: str) -> None:
    from lmgrid.analysis.tables import html_page
    from lmgrid.common.fileio import atomic_write

    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.6f")
    show = table.drop(columns=["resamples"]).copy()
    for col in ("test_ppl", "compare_with_test_ppl"):
        show[col] = show[col].map(lambda v: f"{v:.2f}")
    show["difference"] = show["difference"].map(lambda v: f"{v:+.2f}")
    show["95% bootstrap CI"] = [f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in zip(table["ci95_low"], table["ci95_high"])]
    show["seed t CI"] = ["" if math.isnan(lo) else f"[{lo:+.2f}, {hi:+.2f}]"
                         for lo, hi in zip(table["seed_t_low"].astype(float), table["seed_t_high"].astype(float))]
    show = show.drop(columns=["ci95_low", "ci95_high", "seed_t_low", "seed_t_high"])
    with atomic_write(md_out) as fh:
        fh.write(f"{CAPTION}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    with atomic_write(html_out) as fh:
        fh.write(html_page("Paired comparisons of combinations",
                           [f"<p>{CAPTION}</p>", show.style.set_uuid("comparisons").hide(axis="index").to_html()]))


def run(pairs: list[tuple[str, str]], result_paths: list[str], test_path: str, vocab_path: str, csv_out: str,
        md_out: str, html_out: str, resamples: int = RESAMPLES) -> pd.DataFrame:
    """`lmgrid combinations --pair`: the test split's sentences and targets (checked against every score file's
    tokens_sha256), the comparisons, the tables."""
    from lmgrid.data.corpus import load_split
    from lmgrid.data.vocab import Vocab

    from lmgrid.testtime.combine.cells import target_ids

    sentences = load_split(test_path)
    sha = scorefile.tokens_sha256(target_ids(sentences, Vocab.load(vocab_path)))
    table = compare(pairs, result_paths, sentences, sha, resamples)
    write(table, csv_out, md_out, html_out)
    return table

