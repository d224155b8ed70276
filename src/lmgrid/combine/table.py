"""A combination's outputs: result.json (what MLflow, the reference table and the report read) and its table."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from lmgrid.errors import atomic_write, write_json

from .mixture import Mixture

RESULT = "result.json"
TABLE_FILES = ("table.csv", "table.md", "table.html")


def frame(m: Mixture, name: str) -> pd.DataFrame:
    """One row per component (its weight and own PPLs), then the mixture's row."""
    rows = [{"model": label, "weight": w, "valid_ppl": v, "test_ppl": t}
            for label, w, v, t in zip(m.labels, m.weights, m.component_valid_ppl, m.component_test_ppl)]
    rows.append({"model": f"{name} (linear, EM on valid)", "weight": sum(m.weights), "valid_ppl": m.valid_ppl,
                 "test_ppl": m.test_ppl})
    return pd.DataFrame(rows, columns=["model", "weight", "valid_ppl", "test_ppl"])


def write(out_dir: str | Path, name: str, m: Mixture, components: list[dict], description: str = "") -> None:
    from lmgrid.aggregate.tables import html_page

    out_dir = Path(out_dir)
    table = frame(m, name)
    caption = (f"Combination {name}: linear interpolation, weights fitted by EM on valid ({m.iterations} "
               f"iterations), applied once to test; {m.tokens.get('test', 0)} test tokens."
               + (f" {description}" if description else ""))
    with atomic_write(out_dir / "table.csv") as fh:
        table.to_csv(fh, index=False, float_format="%.6f")
    show = table.assign(weight=table["weight"].map(lambda v: f"{v:.4f}"),
                        valid_ppl=table["valid_ppl"].map(lambda v: f"{v:.2f}"),
                        test_ppl=table["test_ppl"].map(lambda v: f"{v:.2f}"))
    with atomic_write(out_dir / "table.md") as fh:
        fh.write(f"{caption}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    with atomic_write(out_dir / "table.html") as fh:
        fh.write(html_page(f"Combination {name}", [f"<p>{caption.replace('<', '&lt;')}</p>",
                                                    show.style.hide(axis="index").to_html()]))
    # Last: result.json is what the later stages read, so it exists only beside a complete table.
    write_json(out_dir / RESULT, {"name": name, "method": "linear", "description": description,
                                  "components": components, **m.to_dict()})


SUMMARY_CAPTION = ("Combinations: linear interpolation of cells' per-token probabilities, weights fitted by EM on valid "
                   "and applied once to test. Best component: the lowest test PPL among the combination's components.")


def summary(result_paths: list[str], csv_out: str, md_out: str, html_out: str) -> pd.DataFrame:
    """Every combination in one table: its components with their weights, valid and test PPL, the best component."""
    from lmgrid.aggregate.tables import html_page
    from lmgrid.errors import read_json

    rows = []
    for p in result_paths:
        r = read_json(p)
        rows.append({"combination": r["name"], "components": len(r["labels"]),
                     "weights": "; ".join(f"{label} {w:.3f}" for label, w in zip(r["labels"], r["weights"])),
                     "valid_ppl": r["valid_ppl"], "test_ppl": r["test_ppl"],
                     "best_component_test_ppl": min(r["component_test_ppl"]), "em_iterations": r["iterations"]})
    table = pd.DataFrame(rows, columns=["combination", "components", "weights", "valid_ppl", "test_ppl",
                                        "best_component_test_ppl", "em_iterations"])
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.6f")
    show = table.copy()
    for col in ("valid_ppl", "test_ppl", "best_component_test_ppl"):
        show[col] = show[col].map(lambda v: f"{v:.2f}")
    with atomic_write(md_out) as fh:
        fh.write(f"{SUMMARY_CAPTION}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    with atomic_write(html_out) as fh:
        fh.write(html_page("Combinations", [f"<p>{SUMMARY_CAPTION}</p>", show.style.hide(axis="index").to_html()]))
    return table
