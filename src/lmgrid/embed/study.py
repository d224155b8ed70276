"""A study's embeddings outputs: the benchmark table (cells and baselines, with intervals and coverage), the nearest
neighbours of the probe words, and a 2-D map (PCA) of the most frequent words.

Where the corpus's vocabulary barely meets the benchmarks, the table says so in its note, and the neighbours are what
there is to read; a benchmark the vocabulary does not meet at all (0 covered) is left out of the table, with one
line in the note naming it, and where it meets none (the synthetic corpus's made-up words) that line is all the
table says.
"""
from __future__ import annotations

import math
import textwrap
from html import escape

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lmgrid.analysis.plots import COLUMN_IN, PAPER_STYLE, figure, save  # noqa: E402
from lmgrid.analysis.tables import html_page  # noqa: E402
from lmgrid.common.fileio import atomic_write  # noqa: E402
from lmgrid.embed.evaluate import CONFIDENCE, DISPLAY, MIN_PAIRS  # noqa: E402
from lmgrid.embed.paired import spread_text  # noqa: E402

MAP_WORDS = 300  # the most frequent words on the map
MAP_LABELS = 30  # at most this many of them labelled, most frequent first, none overlapping another label
# A label's box in fractions of the axes (7-pt text on a COLUMN_IN-wide figure; 0.022 was measured at 3.3 in):
# characters wide, one line high.
CHAR_W, LINE_H = 0.022 * 3.3 / COLUMN_IN, 0.05


def _rho(row, bench: str) -> str:
    rho = row[f"{bench}_rho"]
    if math.isnan(rho):
        return "n/a"
    return f"{rho:.3f} [{row[f'{bench}_rho_low']:.3f}, {row[f'{bench}_rho_high']:.3f}]"


def _interval(row, value: str, low: str, high: str, signed: bool = False) -> str:
    if math.isnan(row[value]):
        return "n/a"
    f = "+.3f" if signed else ".3f"
    return f"{row[value]:{f}} [{row[low]:{f}}, {row[high]:{f}}]"


def _accuracy(row) -> str:
    acc = row["analogy_accuracy"]
    return "n/a" if math.isnan(acc) else f"{acc:.3f}"


# Each benchmark's coverage columns in embeddings.csv: (covered, of all, what is counted).
COVERAGE = {"wordsim353": ("wordsim353_pairs_covered", "wordsim353_pairs", "pairs"),
            "simlex999": ("simlex999_pairs_covered", "simlex999_pairs", "pairs"),
            "analogy": ("analogy_questions_covered", "analogy_questions", "questions")}


def empty_benchmarks(rows: pd.DataFrame) -> list[str]:
    """The benchmarks no row covers a pair or question of: nothing to show but n/a, so the table leaves them out."""
    return [bench for bench, (covered, _, _) in COVERAGE.items() if rows[covered].max() == 0]


def left_out(rows: pd.DataFrame, empty: list[str]) -> str:
    """'WordSim-353: 0 of 353 pairs in the vocabulary; ...' for the empty benchmarks."""
    parts = []
    for bench in empty:
        covered, total, what = COVERAGE[bench]
        parts.append(f"{DISPLAY[bench]}: {int(rows[covered].max())} of {int(rows[total].max()):,} {what} in the "
                     f"vocabulary")
    return "; ".join(parts)


def shown(rows: pd.DataFrame) -> pd.DataFrame:
    """The table as shown, without the columns of the benchmarks no row covers (empty_benchmarks)."""
    pct = int(CONFIDENCE * 100)
    empty = empty_benchmarks(rows)
    out = pd.DataFrame({"model": rows["model"], "embedding": rows["embedding"], "d": rows["dim"].astype(int)})
    paired_cols = "reference" in rows.columns  # the study's paired comparisons (embed.paired) were computed
    for bench in ("wordsim353", "simlex999"):
        if bench in empty:
            continue
        name = DISPLAY[bench]
        if paired_cols:
            c = f"{bench}_common"
            n = int(rows[f"{c}_pairs"].iloc[0])
            out[f"{name} rho, {n} common pairs [{pct}% CI, words]"] = [
                _interval(r, f"{c}_rho", f"{c}_rho_low_word", f"{c}_rho_high_word") for _, r in rows.iterrows()]
            out[f"{name} rho - reference's [{pct}% CI, words, paired]"] = [
                _interval(r, f"{c}_diff", f"{c}_diff_low_word", f"{c}_diff_high_word", signed=True)
                for _, r in rows.iterrows()]
            out[f"{name} rho over seeds (mean ± std)"] = [
                spread_text(r[f"{bench}_seed_mean"], r[f"{bench}_seed_std"], r[f"{bench}_seeds"])
                for _, r in rows.iterrows()]
            own = f"{name} rho on its own pairs (secondary) [{pct}% CI, pairs]"
        else:
            own = f"{name} rho [{pct}% CI]"
        out[own] = [_rho(r, bench) for _, r in rows.iterrows()]
        out[f"{name} pairs"] = [f"{r[f'{bench}_pairs_covered']}/{r[f'{bench}_pairs']}" for _, r in rows.iterrows()]
    if "analogy" not in empty:
        out["analogy accuracy"] = [_accuracy(r) for _, r in rows.iterrows()]
        out["analogy questions"] = [f"{r['analogy_questions_covered']}/{r['analogy_questions']}"
                                    for _, r in rows.iterrows()]
    return out


def note(rows: pd.DataFrame) -> str:
    pct = int(CONFIDENCE * 100)
    empty = empty_benchmarks(rows)
    if len(empty) == len(COVERAGE):
        return (f"No benchmark table: the vocabulary covers none of the benchmarks ({left_out(rows, empty)}). The "
                f"nearest neighbours (embeddings_neighbours) show what the vectors learned.")
    text = (f"Spearman rho between human ratings and cosine similarity over the pairs whose two words are in the "
            f"vocabulary, with a {pct}% percentile bootstrap interval over those pairs; analogy accuracy (3CosAdd) "
            f"over the questions whose four words are in it. PPMI-SVD: the count-based baseline of the same "
            f"dimension; random: a control whose interval should contain 0.")
    too_few = (rows[["wordsim353_pairs_covered", "simlex999_pairs_covered"]].max(axis=None) < MIN_PAIRS
               and rows["analogy_questions_covered"].max() == 0)
    if too_few:
        r = rows.iloc[0]
        text = (f"This corpus's vocabulary covers {r['wordsim353_pairs_covered']} of {r['wordsim353_pairs']} "
                f"WordSim-353 pairs, {r['simlex999_pairs_covered']} of {r['simlex999_pairs']} SimLex-999 pairs and "
                f"{r['analogy_questions_covered']} of {r['analogy_questions']} analogy questions: too few for any "
                f"score (a rho needs {MIN_PAIRS} pairs), so the benchmarks say nothing here. The nearest neighbours "
                f"(embeddings_neighbours) show what the vectors learned. " + text)
    if "reference" in rows.columns:
        text += " " + paired_note(rows, empty)
    if empty:
        text = f"Left out of the table: {left_out(rows, empty)}. " + text
    return text


def paired_note(rows: pd.DataFrame, empty: list[str]) -> str:
    """What the paired columns (embed.paired) are: the common pair set and its size, the reference, which interval
    is shown."""
    pct = int(CONFIDENCE * 100)
    sizes = " and ".join(f"{int(rows[f'{b}_common_pairs'].iloc[0])} {DISPLAY[b]}" for b in ("wordsim353", "simlex999")
                         if b not in empty)
    return (f"Common pairs: the {sizes} pairs that every vector set of this table covers; the first rho and the "
            f"difference against the reference ({rows['reference'].iloc[0]}, the study's cell of lowest valid PPL) "
            f"are over them. Their intervals shown are {pct}% percentile bootstrap intervals that resample words "
            f"(the words drawn with replacement, the pairs among the drawn words kept), because pairs share words; "
            f"every vector set is scored on the same resample, so the difference's interval is paired (a vector set "
            f"against itself: exactly 0). The intervals that resample pairs are in the .csv (_pair columns). Over "
            f"seeds: mean ± sample std of the common-pair rho over a cell's seeds, where it has several. Own pairs "
            f"(secondary): each vector set's rho over the pairs it covers, with its pair-resampling interval; rows "
            f"with different coverage are not compared there.")


def write_table(rows: pd.DataFrame, stem) -> list[str]:
    """stem.csv (every figure, all digits, every benchmark's coverage), stem.md and stem.html (the table as shown,
    with its note; the benchmarks no row covers left out, and named in the note; none covered: the note alone)."""
    title = "Word vectors against WordSim-353, SimLex-999 and the analogies"
    show, text = shown(rows), note(rows)
    table = len(empty_benchmarks(rows)) < len(COVERAGE)
    with atomic_write(f"{stem}.csv") as fh:
        rows.to_csv(fh, index=False, float_format="%.6g")
    with atomic_write(f"{stem}.md") as fh:
        body = f"\n\n{show.to_markdown(index=False, disable_numparse=True)}" if table else ""
        fh.write(f"## {title}\n\n{text}{body}\n")
    with atomic_write(f"{stem}.html") as fh:
        # Without a table the page is the one line saying why, marked as such (`no-data`) for the report's check.
        body = [f"<p>{escape(text)}</p>", show.to_html(index=False, border=0)] if table else \
            [f"<p class='no-data'>{escape(text)}</p>"]
        fh.write(html_page(title, body))
    return [f"{stem}.{e}" for e in ("csv", "md", "html")]


def write_neighbours(near: pd.DataFrame, stem) -> list[str]:
    """One row per model and embedding, one column per probe word: its nearest words, nearest first."""
    title = "Nearest neighbours (cosine) of the probe words"
    probes = list(dict.fromkeys(near["probe"]))
    models = list(dict.fromkeys(zip(near["model"], near["embedding"])))
    lists = near.sort_values("rank").groupby(["model", "embedding", "probe"], sort=False)["neighbour"].agg(" ".join)
    show = pd.DataFrame([{"model": m, "embedding": e, **{p: lists.get((m, e, p), "") for p in probes}}
                         for m, e in models], columns=["model", "embedding", *probes])
    text = ("The probe words are the most frequent words of the vocabulary that occur in WordSim-353 or SimLex-999, "
            "topped up with the most frequent words (or the config's embeddings.probes).")
    with atomic_write(f"{stem}.md") as fh:
        fh.write(f"## {title}\n\n{text}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    with atomic_write(f"{stem}.html") as fh:
        fh.write(html_page(title, [f"<p>{escape(text)}</p>", show.to_html(index=False, border=0)]))
    return [f"{stem}.md", f"{stem}.html"]


def labelled(points: np.ndarray, words: list[str], n: int = MAP_LABELS) -> list[int]:
    """Rows (most frequent first) to label: a label goes right of and above its point, and is placed only where its
    box overlaps no box placed before it, so no two labels sit on each other."""
    span = points.max(0) - points.min(0)
    unit = (points - points.min(0)) / np.where(span > 0, span, 1.0)
    chosen: list[int] = []

    def clear(i: int, j: int) -> bool:
        (xi, yi), (xj, yj) = unit[i], unit[j]
        return xi + CHAR_W * len(words[i]) < xj or xj + CHAR_W * len(words[j]) < xi or abs(yi - yj) > LINE_H

    for i in range(len(points)):
        if len(chosen) == n:
            break
        if all(clear(i, j) for j in chosen):
            chosen.append(i)
    return chosen


def write_map(kv, words_by_count: list[str], caption: str, stem) -> list[str]:
    """PCA of the MAP_WORDS most frequent words' vectors to 2-D; a readable subset labelled."""
    from sklearn.decomposition import PCA

    words = [w for w in words_by_count if w in kv.key_to_index][:MAP_WORDS]
    points = PCA(n_components=2, random_state=0).fit_transform(kv[words])
    fig, (ax,) = figure(COLUMN_IN, COLUMN_IN)
    with plt.rc_context(PAPER_STYLE):
        ax.scatter(points[:, 0], points[:, 1], s=4, color="#4c72b0", alpha=0.5, linewidths=0)
        for i in labelled(points, words):
            ax.annotate(words[i], points[i], fontsize=7, xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel("principal component 1")
        ax.set_ylabel("principal component 2")
        # A panel label above the axes, not inside them, where it sat on the labels of the points at the top left;
        # it says which vectors these are (the report's caption says how they were chosen).
        # wrapped: "LSTM (cell, one bias) n5 l2 window s1, input embedding" is wider than a column
        ax.set_title(textwrap.fill(caption, 48), loc="left", fontsize=7)
    return save(fig, str(stem))
