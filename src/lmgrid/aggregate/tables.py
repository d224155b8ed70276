"""Per-study perplexity tables: mean ± std over seeds and the number of seeds, as CSV, Markdown and LaTeX.

The CSV is long and machine-readable (one row per model configuration).  Markdown and LaTeX are
pivoted for a paper: rows are models, columns are the axis the study varies (n_step, else layers),
cells are test PPL mean ± sample std (ddof=1) over seeds; the lowest mean of each column is bold.
"""
from __future__ import annotations

import math

import pandas as pd

from ..errors import atomic_write
from ..runkey import ARCHS, IMPLS

GROUP = ["model", "arch", "impl", "n_step", "layers", "regime"]
AXIS_NAMES = {"n_step": "n_step", "layers": "layers"}


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: mean and std of valid and test PPL over seeds, and the seed count."""
    rows = []
    for cfg, g in runs.groupby(GROUP, sort=True):
        row = dict(zip(GROUP, cfg))
        row["seeds"] = len(g)
        for split in ("valid", "test"):
            v = g[f"{split}_ppl"].astype(float)
            row[f"{split}_ppl_mean"] = v.mean()
            row[f"{split}_ppl_std"] = v.std(ddof=1) if len(v) > 1 else math.nan
        row["params"] = g["params"].iloc[0] if "params" in g else None
        rows.append(row)
    order = {a: i for i, a in enumerate(ARCHS)}
    rows.sort(key=lambda r: (order.get(r["arch"], 99), IMPLS.get(r["arch"], ("torch",)).index(r["impl"])
                             if r["impl"] in IMPLS.get(r["arch"], ()) else 0, r["regime"], r["layers"], r["n_step"]))
    cols = GROUP + ["seeds", "valid_ppl_mean", "valid_ppl_std", "test_ppl_mean", "test_ppl_std", "params"]
    return pd.DataFrame(rows, columns=cols)


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


def pivot(summary: pd.DataFrame, split: str = "test", oracle_ppl: float | None = None) -> pd.DataFrame:
    """Rows: models (plus the oracle); columns: the study's axis; values: (mean, std, seeds) tuples."""
    axis = pivot_axis(summary)
    others = [c for c in ("layers", "n_step", "regime") if c != axis and summary[c].nunique() > 1]
    table: dict[str, dict[str, tuple]] = {}
    seeds: dict[str, set] = {}
    col_order = []
    for _, row in summary.iterrows():
        label = _row_label(row, others)
        col = _column_label(axis, row[axis] if axis else None)
        if col not in col_order:
            col_order.append(col)
        table.setdefault(label, {})[col] = (row[f"{split}_ppl_mean"], row[f"{split}_ppl_std"], row["seeds"])
        seeds.setdefault(label, set()).add(int(row["seeds"]))
    if axis:
        col_order.sort(key=lambda c: (c != "stream", int(c.split("=")[1]) if "=" in c else 0))
    df = pd.DataFrame.from_dict(table, orient="index").reindex(columns=col_order)
    df.insert(0, "seeds", [_seed_text(seeds[i]) for i in df.index])
    if oracle_ppl is not None:
        df.loc["oracle"] = ["–"] + [(oracle_ppl, math.nan, 0)] * len(col_order)
    df.index.name = "model"
    return df


def _seed_text(counts: set) -> str:
    return str(min(counts)) if len(counts) == 1 else f"{min(counts)}–{max(counts)}"


def best_per_column(table: pd.DataFrame) -> dict[str, str]:
    """Column -> index label of the lowest mean, the oracle excluded."""
    best = {}
    for col in table.columns[1:]:
        means = {i: v[0] for i, v in table[col].items() if i != "oracle" and isinstance(v, tuple) and not math.isnan(v[0])}
        if means:
            best[col] = min(means, key=means.get)
    return best


def _cell(v, bold: bool, fmt: str) -> str:
    if not isinstance(v, tuple) or math.isnan(v[0]):
        return "–"
    mean, std, _ = v
    pm = " ± " if fmt == "md" else r" $\pm$ "
    text = f"{mean:.2f}" if math.isnan(std) else f"{mean:.2f}{pm}{std:.2f}"
    if bold:
        text = f"**{text}**" if fmt == "md" else rf"\textbf{{{text}}}"
    return text


def _latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}"), ("–", "--")):
        text = text.replace(a, b)
    return text


def to_markdown(table: pd.DataFrame) -> str:
    best = best_per_column(table)
    head = ["model"] + list(table.columns)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for label, row in table.iterrows():
        cells = [str(label), str(row["seeds"])] + [_cell(row[c], best.get(c) == label, "md") for c in table.columns[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


HTML_STYLE = ("<style>body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse;margin:0.5em 0 1.5em}"
              "th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #ddd}th:first-child,td:first-child"
              "{text-align:left}thead th{border-bottom:2px solid #333}caption{text-align:left;padding:4px 0}</style>")


def to_html(table: pd.DataFrame, caption: str) -> str:
    from html import escape

    best = best_per_column(table)
    out = [f"<table><caption>{escape(caption)}</caption><thead><tr><th>model</th>"
           + "".join(f"<th>{escape(str(c))}</th>" for c in table.columns) + "</tr></thead><tbody>"]
    for label, row in table.iterrows():
        cells = [escape(str(label)), escape(str(row["seeds"]))]
        for c in table.columns[1:]:
            text = escape(_cell(row[c], False, "md"))
            cells.append(f"<b>{text}</b>" if best.get(c) == label else text)
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def html_page(title: str, body: list[str]) -> str:
    from html import escape

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>{HTML_STYLE}</head>"
            f"<body><h2>{escape(title)}</h2>{''.join(body)}</body></html>\n")


def to_latex(table: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs table; `caption` is LaTeX source (escape it yourself)."""
    best = best_per_column(table)
    cols = list(table.columns)
    out = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}", rf"\label{{{label}}}",
           r"\begin{tabular}{l" + "r" * len(cols) + "}", r"\toprule",
           " & ".join(["Model"] + [_latex_escape(c) for c in cols]) + r" \\", r"\midrule"]
    for label_, row in table.iterrows():
        if label_ == "oracle":
            out.append(r"\midrule")
        cells = [_latex_escape(str(label_)), _latex_escape(str(row["seeds"]))]
        cells += [_cell(row[c], best.get(c) == label_, "tex") for c in cols[1:]]
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out)


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
        caption = (f"{split.capitalize()} perplexity of study {_latex_escape(name)}: mean $\\pm$ std over seeds; "
                   "lowest mean per column in bold.")
        tex += [to_latex(pivot(summary, split, _oracle(oracle_ppl, split)), caption, f"tab:{name}-{split}"), ""]
    with atomic_write(tex_path) as fh:
        fh.write("\n".join(tex))
    from html import escape

    body = [f"<p>{escape(description)}</p>"] if description else []
    for split in ("test", "valid"):
        body.append(to_html(pivot(summary, split, _oracle(oracle_ppl, split)),
                            f"{split.capitalize()} perplexity, mean ± std over seeds (seeds = how many); "
                            "lowest mean per column in bold."))
    with atomic_write(html_path) as fh:
        fh.write(html_page(f"Study {name}", body))


def _oracle(oracle: dict | float | None, split: str) -> float | None:
    if oracle is None:
        return None
    if isinstance(oracle, dict):
        return oracle[split]["ppl"]
    return float(oracle)
