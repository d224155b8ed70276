"""The per-corpus results table: corpus and vocabulary statistics, the oracle, and every model run.

`test_ppl_reset`: a stream-regime neural run's test PPL with its state reset at every sentence start (its
reset_scores.json, lmgrid.testtime.reset), beside its `test_ppl`, which carries the state across sentences.  Window
rows (n-grams, FFNN, window networks) and the oracle leave it empty: they are scored per sentence already, so their
`test_ppl` is the figure to read beside a stream row's `test_ppl_reset`.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write, read_json
from lmgrid.run import reset_scores
from lmgrid.run.record import KEY_FIELDS, RunRecord

PPL_COLUMNS = ["model", "arch", "impl", "n_step", "layers", "regime", "seed",
               "valid_ppl", "test_ppl", "test_ppl_reset", "valid_tokens", "test_tokens", "params"]
RESET_NOTE = ("Test PPL (reset): a stream model's test perplexity with its state reset at every sentence start, "
              "each sentence scored alone from a zero state after one `</s>` (the same counted tokens); its Test PPL "
              "carries the state across sentences. Window models (n-grams, FFNN, window networks) are scored per "
              "sentence already and leave it empty: their Test PPL is the one to compare.")


def _reset_by_run(reset_paths: list[str], metrics_paths: list[str]) -> dict[Path, float]:
    """Run folder -> test_ppl_reset, from reset_scores.json files that sit in the folders of the given runs."""
    runs = {Path(p).parent.resolve() for p in metrics_paths}
    out = {}
    for p in reset_paths:
        folder = Path(p).parent.resolve()
        if folder not in runs:
            raise LmgridError(f"{p}: a reset file of no run in --metrics")
        out[folder] = reset_scores.read(p)["test_ppl_reset"]
    return out


def ppl_table(oracle_path: str | None, metrics_paths: list[str], reset_paths: list[str] = ()) -> pd.DataFrame:
    reset = _reset_by_run(list(reset_paths), metrics_paths)
    rows = []
    if oracle_path:
        o = read_json(oracle_path)
        rows.append({"model": "oracle", "arch": "oracle", "valid_ppl": o["valid"]["ppl"], "test_ppl": o["test"]["ppl"],
                     "valid_tokens": o["valid"]["tokens"], "test_tokens": o["test"]["tokens"]})
    for p in metrics_paths:
        r = RunRecord.read(p)
        rows.append({"model": r.name, **{k: getattr(r, k) for k in KEY_FIELDS[1:]},
                     "valid_ppl": r.valid.ppl, "test_ppl": r.test.ppl,
                     "test_ppl_reset": reset.get(Path(p).parent.resolve(), math.nan),
                     "valid_tokens": r.valid.tokens, "test_tokens": r.test.tokens, "params": r.params})
    table = pd.DataFrame(rows, columns=PPL_COLUMNS)
    for col in ("n_step", "layers", "seed", "valid_tokens", "test_tokens", "params"):
        table[col] = table[col].astype("Int64")  # integers, with a blank where a row has none
    return table


def stats_table(corpus_stats_path: str, vocab_report_path: str) -> pd.DataFrame:
    cs = read_json(corpus_stats_path)
    vr = read_json(vocab_report_path)
    rows = []
    for split, s in cs["splits"].items():
        oov = vr["splits"].get(split, {})
        rows.append({"split": split, "sentences": s["sentences"], "tokens": s["tokens"],
                     "counted_tokens": s["tokens"] + s["sentences"], "types": s["types"],
                     "oov_tokens": oov.get("oov_tokens", 0), "oov_rate": oov.get("oov_rate", 0.0)})
    df = pd.DataFrame(rows)
    df.attrs["vocab_size"] = vr["vocab_size"]
    return df


STATS_HEADS = {"split": "Split", "sentences": "Sentences", "tokens": "Tokens", "counted_tokens": "Counted tokens",
               "types": "Types", "oov_tokens": "Unknown tokens", "oov_rate": "Unknown rate"}
PPL_HEADS = {"model": "Model", "n_step": "n", "layers": "Layers", "regime": "Regime", "seed": "Seed",
             "valid_ppl": "Valid PPL", "test_ppl": "Test PPL", "test_ppl_reset": "Test PPL (reset)",
             "valid_tokens": "Valid tokens",
             "test_tokens": "Test tokens", "params": "Parameters"}


def _model_id(row) -> str:
    """The model id of the display names (analysis.layout.model_id): 'lstm/cell', 'kn'; the oracle keeps its own
    (its row has no impl)."""
    from lmgrid.analysis.layout import model_id

    return "oracle" if row["arch"] == "oracle" else model_id(row["arch"], row["impl"])


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """Rows in the studies' fixed model order (n-gram models first, analysis.names), then n_step, layers, regime and
    seed; the oracle last, as in the study tables."""
    from lmgrid.analysis import names

    ids = table.apply(_model_id, axis=1) if len(table) else pd.Series(dtype=str)
    rank = [(1, 0, "") if m == "oracle" else (0, *names.rank(m)) for m in ids]
    out = table.assign(model_id=ids, _rank=rank).sort_values(
        ["_rank", "regime", "n_step", "layers", "seed"], kind="stable", na_position="first")
    return out.drop(columns="_rank").reset_index(drop=True)


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The perplexity table as people read it: display names, words for headers, thousands separators, blanks
    where a row has no value (the oracle has no n, layers or seed)."""
    from lmgrid.analysis import names

    t = _ordered(table)
    show = pd.DataFrame({"model": [("Oracle" if m == "oracle" else names.display(m)) for m in t["model_id"]]})
    ngram = [names.is_ngram(m) for m in t["model_id"]]
    blank = {"n_step": [r == "stream" for r in t["regime"]], "layers": ngram, "seed": ngram}  # no meaning there
    for col in ("n_step", "layers", "regime", "seed"):
        show[col] = ["" if pd.isna(v) or b else str(int(v) if col != "regime" else v)
                     for v, b in zip(t[col], blank.get(col, [False] * len(t)))]
    for col in ("valid_ppl", "test_ppl"):
        show[col] = t[col].map("{:,.2f}".format)
    show["test_ppl_reset"] = _ppl_or_blank(t["test_ppl_reset"])
    for col in ("valid_tokens", "test_tokens", "params"):
        show[col] = ["" if pd.isna(v) else f"{int(v):,}" for v in t[col]]
    return show.rename(columns=PPL_HEADS)


def _ppl_or_blank(values: pd.Series) -> list[str]:
    return ["" if pd.isna(v) else f"{v:,.2f}" for v in values]


# The column a best cell is chosen on: valid, never test (issue 44); test PPL is only reported for the chosen cell.
SELECT_ON = "valid_ppl"
BEST_CELL = "Best cell (chosen on valid)"
RESET_HEAD = PPL_HEADS["test_ppl_reset"]


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """Each model's best cell, chosen on valid: the configuration with the lowest valid PPL averaged over its seeds
    (the first in the table's order on a tie), shown with that cell's mean valid and test PPL; test never takes part
    in the choice.  In the fixed model order, the oracle last (display names, PPL to 2 decimals).  A best cell of the
    stream regime also shows its mean reset test PPL (RESET_HEAD, a mean only when every seed has one); the column is
    left out when no best cell has one."""
    from lmgrid.analysis import names

    t = _ordered(table)
    if "test_ppl_reset" not in t:  # a summary.csv written before the column existed
        t["test_ppl_reset"] = math.nan
    cells = (t.groupby(["model_id", "n_step", "layers", "regime"], sort=False, dropna=False)
             .agg(seeds=("test_ppl", "size"), valid_ppl=("valid_ppl", "mean"), test_ppl=("test_ppl", "mean"),
                  # a cell's mean only when every seed has one: never a mean over some of its seeds
                  test_ppl_reset=("test_ppl_reset", lambda v: v.mean(skipna=False)))
             .reset_index())
    best = cells.loc[cells.groupby("model_id", sort=False)[SELECT_ON].idxmin()]
    rows = []
    for r in best.itertuples(index=False):
        if r.model_id == "oracle":
            model, cell, seeds = "Oracle", "the true grammar", ""
        else:
            layers = f"{int(r.layers)} layer{'s' if r.layers != 1 else ''}"
            model = names.display(r.model_id)
            cell = ("stream, " + layers if r.regime == "stream" else f"n = {int(r.n_step)}"
                    + ("" if names.is_ngram(r.model_id) else f", {layers}"))
            seeds = str(int(r.seeds))
        rows.append({"Model": model, BEST_CELL: cell, "Seeds": seeds, "Valid PPL": f"{r.valid_ppl:,.2f}",
                     "Test PPL": f"{r.test_ppl:,.2f}", RESET_HEAD: _ppl_or_blank(pd.Series([r.test_ppl_reset]))[0]})
    top = pd.DataFrame(rows, columns=["Model", BEST_CELL, "Seeds", "Valid PPL", "Test PPL", RESET_HEAD])
    # Only where a best cell has a reset figure (a stream cell): a grid without one keeps the table it always had.
    return top if (top[RESET_HEAD] != "").any() else top.drop(columns=RESET_HEAD)


def headline_text(csv_path: str) -> str:
    """The headline table of a summary.csv as plain text for the terminal (the end of `make run`).

    Columns separated by blanks, no pipes: the pipe table with the reset column was 121 characters wide and wrapped
    every row in a 110-column terminal (docs/img/terminal_done.png); this one stays under TERMINAL_WIDTH."""
    top = headline(pd.read_csv(csv_path)).astype(str)
    cells = [list(top.columns)] + top.values.tolist()
    widths = [max(len(row[k]) for row in cells) for k in range(top.shape[1])]
    # the model and its cell left-aligned, the numbers right-aligned, two blanks between columns
    lines = ["  ".join(v.ljust(w) if k < 2 else v.rjust(w) for k, (v, w) in enumerate(zip(row, widths))).rstrip()
             for row in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


# The widest the end-of-run table may be: what a terminal of 100 columns shows without wrapping.
TERMINAL_WIDTH = 100


def write(corpus: str, corpus_stats_path: str, vocab_report_path: str, oracle_path: str | None,
          metrics_paths: list[str], csv_out: str, md_out: str, html_out: str | None = None,
          reset_paths: list[str] = ()) -> pd.DataFrame:
    """summary.csv (raw ids, one row per run), and summary.md / summary.html: the headline (each model's best cell),
    the corpus statistics and every run, with display names in the studies' model order."""
    stats = stats_table(corpus_stats_path, vocab_report_path)
    table = ppl_table(oracle_path, metrics_paths, reset_paths)
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.4f")
    show, top = display_table(table), headline(table)
    stats_show = stats.assign(oov_rate=stats["oov_rate"].map("{:.4f}".format)).rename(columns=STATS_HEADS)
    for col in ("Sentences", "Tokens", "Counted tokens", "Types", "Unknown tokens"):
        stats_show[col] = stats_show[col].map("{:,}".format)
    ppl_note = "Perplexity counts every word and one `</s>` per sentence; `<s>` is never counted."
    md = [f"# Results: {corpus}", "",
          "Each model's best cell, chosen on valid (lowest valid PPL, mean over seeds), with that cell's test PPL; the "
          "oracle is the true grammar's:", "",
          top.to_markdown(index=False, disable_numparse=True) if len(top) else "(no models)", "",
          f"Vocabulary: {stats.attrs['vocab_size']:,} entries (4 specials included).", "",
          stats_show.to_markdown(index=False, disable_numparse=True), "",
          ppl_note, RESET_NOTE, "",
          show.to_markdown(index=False, disable_numparse=True) if len(show) else "(no models)",
          ""]
    with atomic_write(md_out) as fh:
        fh.write("\n".join(md))
    if html_out:
        from lmgrid.analysis.tables import html_page

        # Fixed table ids (Styler draws random ones): the page is the same from run to run.
        def styled(df, uuid, caption):
            return df.style.set_uuid(uuid).hide(axis="index").set_caption(caption).to_html()

        body = [styled(top, "headline", "Each model's best cell, chosen on valid (lowest valid perplexity, mean "
                                         "over seeds), with that cell's test perplexity"),
                f"<p>Vocabulary: {stats.attrs['vocab_size']:,} entries (4 specials included).</p>",
                styled(stats_show, "corpus", "Corpus"),
                styled(show, "ppl", "Perplexity of every run (every word and one &lt;/s&gt; per sentence; never "
                                    "&lt;s&gt;)"),
                f"<p>{RESET_NOTE.replace('`</s>`', '&lt;/s&gt;')}</p>"]
        with atomic_write(html_out) as fh:
            fh.write(html_page(f"Results: {corpus}", body))
    return table
