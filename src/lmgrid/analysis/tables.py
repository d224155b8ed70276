"""Per-study perplexity tables: mean ± std over seeds and the number of seeds, as CSV, Markdown, LaTeX and HTML.

The CSV is long and machine-readable (one row per model configuration; raw model ids plus their display names).
Markdown, LaTeX and HTML are pivoted for a paper: rows are models by display name (analysis.names), n-gram
models above neural ones, columns are the axis the study varies (n_step, else layers), cells are PPL mean ± sample
std (ddof=1) over seeds (no ± with one seed), with thousands separators.  A column's lowest mean is bold only when
it is better beyond the spread (BOLD_RULE); otherwise nothing in that column is bold.

Each .tex file holds one table, so that a paper can \\input it alone (table.tex: test PPL, table_valid.tex: valid
PPL), with a short caption; the method in full is in the Markdown and HTML files and the report's captions.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from lmgrid.common.fileio import atomic_write
from lmgrid.analysis import names

GROUP = ["model", "arch", "impl", "n_step", "layers", "regime"]
AXIS_NAMES = {"n_step": "n_step", "layers": "layers"}


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: mean and std (ddof=1; NaN for one seed) of valid and test PPL over seeds, the
    seed count and the parameter count."""
    runs = runs.assign(valid_ppl=runs["valid_ppl"].astype(float), test_ppl=runs["test_ppl"].astype(float))
    if "params" not in runs:
        runs = runs.assign(params=None)
    out = runs.groupby(GROUP, sort=False).agg(
        seeds=("test_ppl", "size"), valid_ppl_mean=("valid_ppl", "mean"), valid_ppl_std=("valid_ppl", "std"),
        test_ppl_mean=("test_ppl", "mean"), test_ppl_std=("test_ppl", "std"), params=("params", "first"),
    ).reset_index()
    out = out.assign(_m=[names.rank(m)[0] for m in out["model"]]).sort_values(
        ["_m", "model", "regime", "layers", "n_step"], kind="stable")  # the fixed order: n-gram, then neural
    return out.drop(columns=["_m"]).reset_index(drop=True)


def pivot_axis(summary: pd.DataFrame) -> str | None:
    """The grid axis that becomes the table's columns: n_step if it varies, else layers, else none."""
    for axis in ("n_step", "layers"):
        if summary[axis].nunique() > 1:
            return axis
    return None


def _row_label(row, varying: list[str]) -> str:
    parts = [names.display(row["model"])]
    for col in varying:
        if col == "regime":
            parts.append(row["regime"])
        elif col == "n_step":
            parts.append("stream" if row["regime"] == "stream" else f"n={row['n_step']}")
        else:
            parts.append(f"{row[col]} layer{'s' if row[col] != 1 else ''}")
    return ", ".join(parts)


def _column_label(axis: str | None, value) -> str:
    if axis is None:
        return "PPL"
    if axis == "n_step":
        return "stream" if value == 0 else f"n = {value}"
    return f"{value} layer{'s' if value != 1 else ''}"


ORACLE = "Oracle"
BOLD_RULE = ("bold: a column's lowest mean, only if its mean + std is below every other model's mean − std "
             "and all have ≥ 2 seeds")
# The same rule, short enough for a paper's caption.
BOLD_SHORT = "Bold: lowest mean, where its mean + std is below every other model's mean − std."
# One column of a two-column `article` page is 229 pt wide; at \small a digit is 4.5 pt (_text_pt) and each
# column adds 2 x \tabcolsep = 8 pt (checked by compiling the tables: the estimate is within a few pt).
COLUMN_PT, GAP_PT = 229.0, 8.0
FULL_PT = 2 * COLUMN_PT + 10.0  # both columns and the gap between them (\columnsep): a table*'s width


def pivot(summary: pd.DataFrame, split: str = "test", oracle_ppl: float | None = None) -> PivotTable:
    """Rows: models (plus the oracle); columns: the study's axis; cells: mean, std and seed count of `split` PPL."""
    axis = pivot_axis(summary)
    others = [c for c in ("layers", "n_step", "regime") if c != axis and summary[c].nunique() > 1]
    long = summary.assign(label=[_row_label(r, others) for _, r in summary.iterrows()],
                          column=[_column_label(axis, r[axis] if axis else None) for _, r in summary.iterrows()])
    rows = list(dict.fromkeys(long["label"]))
    cols = list(dict.fromkeys(long["column"]))
    if axis:
        cols.sort(key=lambda c: (c != "stream", int(re.sub(r"\D", "", c) or 0)))
    wide = long.pivot(index="label", columns="column", values=[f"{split}_ppl_mean", f"{split}_ppl_std", "seeds"])
    means = wide[f"{split}_ppl_mean"].reindex(index=rows, columns=cols).astype(float)
    stds = wide[f"{split}_ppl_std"].reindex(index=rows, columns=cols).astype(float)
    counts = wide["seeds"].reindex(index=rows, columns=cols).astype(float)
    seeds = long.groupby("label", sort=False)["seeds"].agg(lambda s: _seed_text(set(s))).reindex(rows)
    ngram_rows = len(dict.fromkeys(long.loc[[names.is_ngram(m) for m in long["model"]], "label"]))
    if oracle_ppl is not None:
        means.loc[ORACLE], stds.loc[ORACLE], seeds.loc[ORACLE] = oracle_ppl, math.nan, "–"
        counts.loc[ORACLE] = math.nan
    for frame in (means, stds, counts):
        frame.index.name = "Model"
    return PivotTable(means, stds, seeds, counts, ngram_rows)


@dataclass
class PivotTable:
    means: pd.DataFrame
    stds: pd.DataFrame
    seeds: pd.Series
    counts: pd.DataFrame  # seeds per cell
    ngram_rows: int = 0  # the first rows are n-gram models

    def best(self) -> pd.DataFrame:
        """True where a column's lowest mean is better beyond the spread (BOLD_RULE), the oracle excluded: at most
        one True per column, none when any model of the column has fewer than 2 seeds or the spreads overlap."""
        out = pd.DataFrame(False, index=self.means.index, columns=self.means.columns)
        models = self.means.index[self.means.index != ORACLE]
        for col in self.means.columns:
            m = self.means.loc[models, col].dropna()
            if len(m) < 2 or (self.counts.loc[m.index, col] < 2).any():
                continue
            s = self.stds.loc[m.index, col]
            top = m.idxmin()
            others = m.index != top
            if (m[top] + s[top] < (m - s)[others]).all():
                out.loc[top, col] = True
        return out

    def one_seed(self) -> bool:
        return bool((self.counts.drop(index=ORACLE, errors="ignore").max() <= 1).all())

    def text(self, pm: str, bold: str = "{}") -> pd.DataFrame:
        """'mean<pm>std' cells ('mean' for one seed, '–' when missing), best cells as bold.format(text), and the
        seeds column first; the model is a column."""
        means = self.means.map("{:,.2f}".format)
        cells = means.where(self.stds.isna(), means + pm + self.stds.map("{:,.2f}".format))
        cells = cells.where(self.means.notna(), "–").mask(self.best(), cells.map(bold.format))
        cells.insert(0, "Seeds", self.seeds)
        return cells.reset_index()


def _seed_text(counts: set) -> str:
    return str(min(counts)) if len(counts) == 1 else f"{min(counts)}–{max(counts)}"


def caption(split: str, table: PivotTable, pm: str = "±") -> str:
    """The table's caption in plain text (LaTeX callers swap `pm` and escape): what the cells are and the bold rule."""
    if table.one_seed():
        return f"{split.capitalize()} perplexity, one seed per model (no spread, so nothing is bold)."
    return (f"{split.capitalize()} perplexity, mean {pm} std over seeds (seeds = how many; no {pm} with one seed); "
            f"{BOLD_RULE}.")


def short_caption(split: str, table: PivotTable, axis: str | None, pm: str = "±") -> str:
    """A paper's caption (LaTeX callers swap `pm` and escape): what the cells are, in two sentences at most."""
    what = {"n_step": " by context length n (tokens)", "layers": " by number of layers"}.get(axis, "")
    if table.one_seed():
        return f"{split.capitalize()} perplexity{what}, one seed per model."
    return f"{split.capitalize()} perplexity{what}, mean {pm} std over seeds. {BOLD_SHORT}"


def to_markdown(table: PivotTable) -> str:
    text = table.text(" ± ", "**{}**")
    return text.to_markdown(index=False, disable_numparse=True, colalign=["left"] + ["right"] * (text.shape[1] - 1))


def _styler(table: PivotTable, pm: str, props: str, drop_seeds: bool = False):
    """A pandas Styler of the text cells with `props` on each column's best cell (PivotTable.best)."""
    text = table.text(pm)
    best = table.best().reset_index(drop=True)
    if drop_seeds:
        text = text.drop(columns="Seeds")
    else:
        best.insert(0, "Seeds", False)
    best.insert(0, "Model", False)
    return text.style.apply(lambda _: best.replace({True: props, False: ""}).to_numpy(), axis=None).hide(axis="index")


HTML_STYLE = ("<style>body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse;margin:0.5em 0 1.5em}"
              "th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #ddd}th:first-child,td:first-child"
              "{text-align:left}thead th{border-bottom:2px solid #333}caption{text-align:left;padding:4px 0}</style>")


def to_html(table: PivotTable, caption: str, table_id: str) -> str:
    # A fixed id (Styler draws a random one) keeps the file the same from run to run, and apart from the page's
    # other tables.
    return _styler(table, " ± ", "font-weight: bold").set_uuid(table_id).set_caption(caption).to_html()


def html_page(title: str, body: list[str]) -> str:
    from html import escape

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>{HTML_STYLE}</head>"
            f"<body><h2>{escape(title)}</h2>{''.join(body)}</body></html>\n")


def _text_pt(text: str) -> float:
    """Estimated width in pt of plain text at \\small (Computer Modern, 9 pt): by character class."""
    text = re.sub(r"-(?=\d)", "−", text)  # printed as a minus sign
    wide = {"±": 7.0, "−": 7.0, "+": 7.0, "→": 9.0, "Δ": 7.5, "τ": 4.5, " ": 3.0, ".": 2.5, ",": 2.5, ";": 2.5,
            ":": 2.5, "-": 3.0, "[": 2.5, "]": 2.5, "(": 3.5, ")": 3.5, "–": 4.5}
    return sum(wide.get(c, 6.5 if c.isupper() else 4.5) for c in text)


def plain_width(text: pd.DataFrame, gap_pt: float = GAP_PT) -> float:
    """The estimated printed width in pt at \\small of a table of plain strings (headers included): each column's
    widest entry plus the gaps between columns (gap_pt each); compared with COLUMN_PT."""
    return sum(max(_text_pt(str(v)) for v in [c, *text[c]]) + gap_pt for c in text.columns)


def fit_tex(tex: str, show: pd.DataFrame, first_rule_after: int = 0) -> str:
    """fit_latex for a table of the plain strings `show`."""
    return fit_latex(tex, plain_width(show, 0.0), len(show.columns), first_rule_after)


# Ways to set a table in one column, tried in order: (font size command, its size over \small's, column gap in pt).
FITS = (("\\small", 1.0, 4), ("\\small", 1.0, 3), ("\\footnotesize", 8 / 9, 3))


def fit_latex(tex: str, text_width: float, n_columns: int, first_rule_after: int = 0) -> str:
    """Set a Styler/booktabs table for a two-column page, in `table` at the first setting of FITS whose estimated
    width (text_width: the widest entries at \\small, gaps excluded) fits COLUMN_PT; only when none does, in `table*`
    across both columns (said in a comment), at the first setting that fits their width FULL_PT, else
    \\footnotesize.  With first_rule_after > 0, a \\midrule after that many
    body rows (n-gram models above neural)."""
    lines = tex.rstrip("\n").split("\n")
    if first_rule_after:
        head = lines.index("\\midrule")
        if head + 1 + first_rule_after < len(lines) and not lines[head + 1 + first_rule_after].startswith("\\"):
            lines.insert(head + 1 + first_rule_after, "\\midrule")
    fits = [(size, sep) for size, scale, sep in FITS if text_width * scale + 2 * sep * n_columns <= COLUMN_PT]
    # Across both columns: the first setting that fits the text width, else \footnotesize (the narrowest).
    wide = [(size, sep, scale) for size, scale, sep in FITS if text_width * scale + 2 * sep * n_columns <= FULL_PT]
    size, sep, scale = (*fits[0], 1.0) if fits else wide[0] if wide else (FITS[-1][0], FITS[-1][2], FITS[-1][1])
    at = lines.index("\\centering") + 1
    lines[at:at] = [size, f"\\setlength{{\\tabcolsep}}{{{sep}pt}}"]
    tex = "\n".join(lines)
    if not fits:
        width = text_width * scale + 2 * sep * n_columns
        tex = (f"% table*: about {width:.0f} pt wide at {size}, more than one column of a two-column page "
               f"({COLUMN_PT:.0f} pt) even at \\footnotesize; set across both columns on purpose\n"
               + tex.replace("\\begin{table}", "\\begin{table*}").replace("\\end{table}", "\\end{table*}"))
    return tex


def to_latex(table: PivotTable, caption: str, label: str) -> str:
    """A booktabs table; `caption` is LaTeX source (escape it yourself).  Model names and column headers are
    escaped; the cells are numbers with $\\pm$, bold (\\textbf) where PivotTable.best says.  When every model has the
    same number of seeds, that number moves from its column to the caption."""
    plain = table.text(" ± ")
    seeds = set(table.seeds.drop(index=ORACLE, errors="ignore"))
    drop_seeds = len(seeds) == 1  # the same for every model: said once, in the caption
    if drop_seeds:
        plain = plain.drop(columns="Seeds")
        n = seeds.pop()
        caption += "" if n == "1" else f" Every model has {n} seeds."  # one seed: the caption says so already
    styler = _styler(table, r" $\pm$ ", "textbf:--rwrap;", drop_seeds).format_index(escape="latex", axis=1)
    styler = styler.format(escape="latex", subset=[c for c in ("Model", "Seeds") if c in plain.columns])
    tex = styler.to_latex(hrules=True, caption=caption, label=label, position="t", position_float="centering",
                          column_format="l" + "r" * (len(plain.columns) - 1))
    # Rules between the n-gram and the neural models and before the oracle line, as in the published tables.
    neural_rows = len(table.means.index) - table.ngram_rows - (ORACLE in table.means.index)
    tex = tex.replace(f"\n{ORACLE} &", f"\n\\midrule\n{ORACLE} &")
    return fit_tex(tex, plain, table.ngram_rows if neural_rows else 0)


def write_tables(name: str, description: str, summary: pd.DataFrame, oracle_ppl: float | None,
                 csv_path, md_path, tex_path, html_path, valid_tex_path=None) -> None:
    """table.csv (long), table.md and table.html (test and valid), table.tex (test) and, when valid_tex_path is given,
    the valid table in a .tex file of its own."""
    csv = summary.copy()
    csv.insert(1, "model_name", csv["model"].map(names.display))  # `model` keeps the raw id
    with atomic_write(csv_path) as fh:
        csv.to_csv(fh, index=False, float_format="%.4f")
    pivots = {split: pivot(summary, split, _oracle(oracle_ppl, split)) for split in ("test", "valid")}
    md = [f"## Study `{name}`", ""]
    if description:
        md += [description, ""]
    for split, table in pivots.items():
        head = f"{split.capitalize()} perplexity"
        md += [caption(split, table).replace(head, f"**{head}**", 1), "", to_markdown(table), ""]
    with atomic_write(md_path) as fh:
        fh.write("\n".join(md))
    axis = pivot_axis(summary)
    for split, path in (("test", tex_path), ("valid", valid_tex_path)):
        if path is None:
            continue
        text = short_caption(split, pivots[split], axis, "$\\pm$").replace("−", "$-$")
        with atomic_write(path) as fh:
            fh.write(f"% Study {name}: generated by lmgrid aggregate; needs \\usepackage{{booktabs}}\n"
                     f"{to_latex(pivots[split], text, f'tab:{name}-{split}')}\n")
    from html import escape

    body = [f"<p>{escape(description)}</p>"] if description else []
    for split, table in pivots.items():
        body.append(to_html(table, escape(caption(split, table)), f"{split}_ppl"))
    with atomic_write(html_path) as fh:
        fh.write(html_page(f"Study {name}", body))


def latex_escape(name: str) -> str:
    """A study name in LaTeX: the schema allows only letters, digits and `_ . -`, so `_` is the one to escape."""
    return name.replace("_", r"\_")


def _oracle(oracle: dict | float | None, split: str) -> float | None:
    if oracle is None:
        return None
    if isinstance(oracle, dict):
        return oracle[split]["ppl"]
    return float(oracle)
