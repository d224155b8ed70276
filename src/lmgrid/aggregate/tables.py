"""Per-study perplexity tables: mean ± std over seeds and the number of seeds, as CSV, Markdown and LaTeX.

The CSV is long and machine-readable (one row per model configuration).  Markdown and LaTeX are
pivoted for a paper: rows are models, columns are the axis the study varies (n_step, else layers),
cells are test PPL mean ± sample std (ddof=1) over seeds; the lowest mean of each column is bold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ..errors import atomic_write
from ..runkey import ARCHS, IMPLS

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
    arch_order = out["arch"].map({a: i for i, a in enumerate(ARCHS)}).fillna(99)
    impl_order = [IMPLS.get(a, ("torch",)).index(i) if i in IMPLS.get(a, ()) else 0
                  for a, i in zip(out["arch"], out["impl"])]
    out = out.assign(_a=arch_order, _i=impl_order).sort_values(["_a", "_i", "regime", "layers", "n_step"],
                                                               kind="stable")
    return out.drop(columns=["_a", "_i"]).reset_index(drop=True)


def pivot_axis(summary: pd.DataFrame) -> str | None:
    """The grid axis that becomes the table's columns: n_step if it varies, else layers, else none."""
    for axis in ("n_step", "layers"):
        if summary[axis].nunique() > 1:
            return axis
    return None


def _row_label(row, varying: list[str]) -> str:
    parts = [row["model"]]
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
        return "stream" if value == 0 else f"n={value}"
    return f"L={value}"


def pivot(summary: pd.DataFrame, split: str = "test", oracle_ppl: float | None = None) -> PivotTable:
    """Rows: models (plus the oracle); columns: the study's axis; cells: mean and std of `split` PPL."""
    axis = pivot_axis(summary)
    others = [c for c in ("layers", "n_step", "regime") if c != axis and summary[c].nunique() > 1]
    long = summary.assign(label=[_row_label(r, others) for _, r in summary.iterrows()],
                          column=[_column_label(axis, r[axis] if axis else None) for _, r in summary.iterrows()])
    rows = list(dict.fromkeys(long["label"]))
    cols = list(dict.fromkeys(long["column"]))
    if axis:
        cols.sort(key=lambda c: (c != "stream", int(c.split("=")[1]) if "=" in c else 0))
    wide = long.pivot(index="label", columns="column", values=[f"{split}_ppl_mean", f"{split}_ppl_std"])
    means = wide[f"{split}_ppl_mean"].reindex(index=rows, columns=cols).astype(float)
    stds = wide[f"{split}_ppl_std"].reindex(index=rows, columns=cols).astype(float)
    seeds = long.groupby("label", sort=False)["seeds"].agg(lambda s: _seed_text(set(s))).reindex(rows)
    if oracle_ppl is not None:
        means.loc["oracle"], stds.loc["oracle"], seeds.loc["oracle"] = oracle_ppl, math.nan, "–"
    for frame in (means, stds):
        frame.index.name = "model"
    return PivotTable(means, stds, seeds)


@dataclass
class PivotTable:
    means: pd.DataFrame
    stds: pd.DataFrame
    seeds: pd.Series

    def best(self) -> pd.DataFrame:
        """True at the lowest mean of each column, the oracle excluded."""
        models = self.means.drop(index="oracle", errors="ignore")
        return self.means.eq(models.min()) & self.means.index.to_series().ne("oracle").to_numpy()[:, None]

    def text(self, pm: str, bold: str = "{}") -> pd.DataFrame:
        """'mean<pm>std' cells ('mean' for one seed, '–' when missing), best cells as bold.format(text), and the
        seeds column first; the model is a column."""
        means = self.means.map("{:.2f}".format)
        cells = means.where(self.stds.isna(), means + pm + self.stds.map("{:.2f}".format))
        cells = cells.where(self.means.notna(), "–").mask(self.best(), cells.map(bold.format))
        cells.insert(0, "seeds", self.seeds)
        return cells.reset_index()


def _seed_text(counts: set) -> str:
    return str(min(counts)) if len(counts) == 1 else f"{min(counts)}–{max(counts)}"


def to_markdown(table: PivotTable) -> str:
    text = table.text(" ± ", "**{}**")
    return text.to_markdown(index=False, disable_numparse=True, colalign=["left"] + ["right"] * (text.shape[1] - 1))


def _styler(table: PivotTable, pm: str, props: str):
    """A pandas Styler of the text cells with `props` on each column's lowest mean."""
    text = table.text(pm)
    best = table.best().reset_index(drop=True)
    best.insert(0, "seeds", False)
    best.insert(0, "model", False)
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


def to_latex(table: PivotTable, caption: str, label: str) -> str:
    """A booktabs table; `caption` is LaTeX source (escape it yourself).  Model names and column headers are
    escaped; the cells are numbers with $\\pm$, bold (\\textbf) at each column's lowest mean."""
    styler = _styler(table, r" $\pm$ ", "textbf:--rwrap;").format_index(escape="latex", axis=1)
    styler = styler.format(escape="latex", subset=["model", "seeds"])
    tex = styler.to_latex(hrules=True, caption=caption, label=label, position="t", position_float="centering",
                          column_format="l" + "r" * (len(table.means.columns) + 1))
    # A rule between the models and the oracle line, as in the published tables.
    return tex.replace("\noracle &", "\n\\midrule\noracle &").rstrip("\n")


def write_tables(name: str, description: str, summary: pd.DataFrame, oracle_ppl: float | None,
                 csv_path, md_path, tex_path, html_path) -> None:
    with atomic_write(csv_path) as fh:
        summary.to_csv(fh, index=False, float_format="%.4f")
    md = [f"## Study `{name}`", ""]
    if description:
        md += [description, ""]
    for split in ("test", "valid"):
        md += [f"**{split.capitalize()} perplexity**, mean ± std over seeds (seeds = how many); "
               "lowest mean per column in bold.", "", to_markdown(pivot(summary, split, _oracle(oracle_ppl, split))), ""]
    with atomic_write(md_path) as fh:
        fh.write("\n".join(md))
    tex = [f"% Study {name}: generated by lmgrid aggregate; needs \\usepackage{{booktabs}}"]
    for split in ("test", "valid"):
        caption = (f"{split.capitalize()} perplexity of study {latex_escape(name)}: mean $\\pm$ std over seeds; "
                   "lowest mean per column in bold.")
        tex += [to_latex(pivot(summary, split, _oracle(oracle_ppl, split)), caption, f"tab:{name}-{split}"), ""]
    with atomic_write(tex_path) as fh:
        fh.write("\n".join(tex))
    from html import escape

    body = [f"<p>{escape(description)}</p>"] if description else []
    for split in ("test", "valid"):
        body.append(to_html(pivot(summary, split, _oracle(oracle_ppl, split)),
                            f"{split.capitalize()} perplexity, mean ± std over seeds (seeds = how many); "
                            "lowest mean per column in bold.", f"{split}_ppl"))
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
