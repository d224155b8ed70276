"""The reference table: each published perplexity beside ours, for the same model class.

A config's `reference:` list (a PTB preset's) names each published figure and which of our runs it is compared
with (`runs: {arch, impl, n_step, layers, regime}`, any subset).  For each row: our test PPL as mean ± std over the
matching runs' seeds, their valid PPL, seed count, parameters, epochs, how training ended, training wall time,
the hardware, and ours minus the published figure.  A row whose setting we did not run (no `runs`, or no run
matches) says "not run here" and shows no number of ours.
"""
from __future__ import annotations

import math

import pandas as pd

from .errors import LmgridError, atomic_write, read_json

MATCH_KEYS = ("arch", "impl", "n_step", "layers", "regime")
NOT_RUN = "not run here"
COLUMNS = ["model", "published_test_ppl", "source", "ours", "test_ppl_mean", "test_ppl_std", "valid_ppl_mean",
           "seeds", "params", "epochs", "stopped_because", "train_wall_s", "hardware", "difference"]


def _matches(metrics: dict, want: dict) -> bool:
    return all(metrics.get(k) == v for k, v in want.items())


def reference_table(rows: list[dict], metrics_paths: list[str]) -> pd.DataFrame:
    runs = [read_json(p) for p in metrics_paths]
    out = []
    for i, ref in enumerate(rows):
        want = ref.get("runs") or {}
        unknown = sorted(set(want) - set(MATCH_KEYS))
        if unknown:
            raise LmgridError(f"reference[{i}].runs: unknown key {unknown[0]!r} (known: {', '.join(MATCH_KEYS)})")
        hits = [m for m in runs if want and _matches(m, want)]
        row = {"model": ref["model"], "published_test_ppl": ref["published_test_ppl"], "source": ref["source"]}
        if not hits:
            out.append({**row, "ours": NOT_RUN})
            continue
        test = pd.Series([m["test"]["ppl"] for m in hits])
        first = hits[0]
        out.append({**row, "ours": " ".join(f"{k}={first[k]}" for k in MATCH_KEYS if k in first),
                    "test_ppl_mean": test.mean(), "test_ppl_std": test.std() if len(hits) > 1 else math.nan,
                    "valid_ppl_mean": sum(m["valid"]["ppl"] for m in hits) / len(hits), "seeds": len(hits),
                    "params": first.get("params"), "epochs": " ".join(str(m.get("epochs", "")) for m in hits),
                    "stopped_because": " ".join(sorted({str(m.get("stopped_because", "")) for m in hits})),
                    "train_wall_s": sum(m.get("wall_s", 0.0) for m in hits) / len(hits),
                    "hardware": ", ".join(str(first[k]) for k in ("device", "precision") if first.get(k)) or "cpu",
                    "difference": test.mean() - ref["published_test_ppl"]})
    return pd.DataFrame(out, columns=COLUMNS)


def _display(table: pd.DataFrame) -> pd.DataFrame:
    def ours(r):
        if r["ours"] == NOT_RUN:
            return NOT_RUN
        return f"{r['test_ppl_mean']:.1f}" + (f" ± {r['test_ppl_std']:.1f}" if not math.isnan(r["test_ppl_std"]) else "")

    def num(v, fmt):
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    return pd.DataFrame({
        "model": table["model"], "published": table["published_test_ppl"].map(lambda v: f"{v:.1f}"),
        "source": table["source"], "ours (test)": [ours(r) for _, r in table.iterrows()],
        "valid": table["valid_ppl_mean"].map(lambda v: num(v, ".1f")),
        "seeds": table["seeds"].map(lambda v: num(v, ".0f")), "params": table["params"].map(lambda v: num(v, ",.0f")),
        "epochs": table["epochs"].fillna(""), "wall (min)": table["train_wall_s"].map(lambda v: num(v / 60, ".1f")),
        "hardware": table["hardware"].fillna(""), "difference": table["difference"].map(lambda v: num(v, "+.1f"))})


CAPTION = ("Published test perplexities on the Penn Treebank beside ours (mean ± std over seeds; test split, one "
           "</s> per sentence counted, <s> never). Difference: ours minus published. Wall time: one training run, "
           "on the hardware named. Rows marked 'not run here' were not measured by this project.")


def write(rows: list[dict], metrics_paths: list[str], csv_out: str, md_out: str, tex_out: str, html_out: str) -> None:
    from .aggregate.tables import html_page

    table = reference_table(rows, metrics_paths)
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.4f")
    show = _display(table)
    with atomic_write(md_out) as fh:
        fh.write(f"{CAPTION}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    caption = CAPTION.replace("<", r"\textless{}").replace(">", r"\textgreater{}")
    tex = (show.drop(columns=["hardware"]).style.hide(axis="index").format(escape="latex")
           .format_index(escape="latex", axis=1)
           .to_latex(hrules=True, caption=caption, label="tab:ptb-reference", position="t",
                     environment="table*", position_float="centering", column_format="lrl" + "r" * 7))
    with atomic_write(tex_out) as fh:
        fh.write(tex.replace("±", r"$\pm$"))
    with atomic_write(html_out) as fh:
        fh.write(html_page("Published perplexities beside ours",
                           [f"<p>{CAPTION.replace('<', '&lt;').replace('>', '&gt;')}</p>",
                            show.style.set_uuid("reference").hide(axis="index").to_html()]))
