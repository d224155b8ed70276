"""A combination's outputs: result.json (what MLflow, the reference table and the report read) and its table."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from lmgrid.common.fileio import atomic_write, write_json

from lmgrid.testtime.combine.adapted import describe
from lmgrid.testtime.combine.mixture import Mixture

RESULT = "result.json"
TABLE_FILES = ("table.csv", "table.md", "table.html")


def chosen(component: dict) -> str:
    """A component's test-time settings chosen on valid ('' for a base component)."""
    return describe(component["adapt"]["settings"]) if component.get("adapt") else ""


def frame(m: Mixture, name: str, components: list[dict]) -> pd.DataFrame:
    """One row per component (its weight, own PPLs and test-time settings), then the mixture's row."""
    rows = [{"model": label, "weight": w, "valid_ppl": v, "test_ppl": t, "settings": chosen(c)}
            for label, w, v, t, c in zip(m.labels, m.weights, m.component_valid_ppl, m.component_test_ppl,
                                         components)]
    rows.append({"model": f"{name} (linear, EM on valid)", "weight": sum(m.weights), "valid_ppl": m.valid_ppl,
                 "test_ppl": m.test_ppl, "settings": ""})
    return pd.DataFrame(rows, columns=["model", "weight", "valid_ppl", "test_ppl", "settings"])


def grid_frame(component: dict) -> pd.DataFrame:
    """A test-time component's grid: every point with its valid PPL, the chosen one marked."""
    a = component["adapt"]
    rows = pd.DataFrame(a["grid"])
    pick = pd.Series(True, index=rows.index)
    for k, v in a["settings"].items():
        pick &= rows[k] == v
    return rows.assign(chosen=pick.map({True: "yes", False: ""}))


def write(out_dir: str | Path, name: str, m: Mixture, components: list[dict], description: str = "") -> None:
    from lmgrid.analysis.tables import html_page

    out_dir = Path(out_dir)
    table = frame(m, name, components)
    grids = [(c["label"], grid_frame(c)) for c in components if c.get("adapt")]
    caption = (f"Combination {name}: linear interpolation, weights fitted by EM on valid ({m.iterations} "
               f"iterations), applied once to test; {m.tokens.get('test', 0)} test tokens."
               + (f" {description}" if description else ""))
    with atomic_write(out_dir / "table.csv") as fh:
        table.to_csv(fh, index=False, float_format="%.6f")
    show = table.assign(weight=table["weight"].map(lambda v: f"{v:.4f}"),
                        valid_ppl=table["valid_ppl"].map(lambda v: f"{v:.2f}"),
                        test_ppl=table["test_ppl"].map(lambda v: f"{v:.2f}"))
    grid_captions = [f"{label}: the settings' grid, each point's valid PPL (one stream); the chosen point was "
                     f"applied once to test." for label, _ in grids]
    with atomic_write(out_dir / "table.md") as fh:
        fh.write(f"{caption}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
        for cap, (_, g) in zip(grid_captions, grids):
            fh.write(f"\n{cap}\n\n{g.to_markdown(index=False, floatfmt='.3f')}\n")
    # Fixed table ids (set_uuid; pandas draws random ones): the same result gives the same bytes, so the MLflow
    # sync, which compares the files' hash, keeps its run.
    with atomic_write(out_dir / "table.html") as fh:
        fh.write(html_page(f"Combination {name}", [f"<p>{caption.replace('<', '&lt;')}</p>",
                                                    show.style.set_uuid("combination").hide(axis="index").to_html()]
                           + [part for i, (cap, (_, g)) in enumerate(zip(grid_captions, grids))
                              for part in (f"<p>{cap.replace('<', '&lt;')}</p>",
                                           g.style.set_uuid(f"grid{i}").hide(axis="index").format(precision=3)
                                           .to_html())]))
    # Last: result.json is what the later stages read, so it exists only beside a complete table.
    write_json(out_dir / RESULT, {"name": name, "method": "linear", "description": description,
                                  "components": components, **m.to_dict()})


SUMMARY_CAPTION = ("Combinations: linear interpolation of cells' per-token probabilities, weights fitted by EM on valid "
                   "and applied once to test. Best component: chosen on valid, the component with the lowest valid PPL "
                   "(the first listed on a tie), shown with its valid and test PPL. "
                   "Test-time settings: those of the components scored with a cache or dynamic evaluation, chosen on "
                   "valid (docs/adapt.md).")


def best_component(result: dict) -> int:
    """The index of a combination's best component, chosen on valid: the lowest valid PPL, the first on a tie.  Test
    never takes part in the choice; the summary only reports the chosen component's test PPL."""
    valid = result["component_valid_ppl"]
    return min(range(len(valid)), key=lambda i: valid[i])


SUMMARY_HEADS = {"best_component": "best component (chosen on valid)"}


def summary(result_paths: list[str], csv_out: str, md_out: str, html_out: str) -> pd.DataFrame:
    """Every combination in one table: its components with their weights, valid and test PPL, and its best component
    (chosen on valid, best_component) with that component's valid and test PPL."""
    from lmgrid.analysis.tables import html_page
    from lmgrid.common.fileio import read_json

    rows = []
    for p in result_paths:
        r = read_json(p)
        b = best_component(r)
        rows.append({"combination": r["name"], "components": len(r["labels"]),
                     "weights": "; ".join(f"{label} {w:.3f}" for label, w in zip(r["labels"], r["weights"])),
                     "valid_ppl": r["valid_ppl"], "test_ppl": r["test_ppl"], "best_component": r["labels"][b],
                     "best_component_valid_ppl": r["component_valid_ppl"][b],
                     "best_component_test_ppl": r["component_test_ppl"][b], "em_iterations": r["iterations"],
                     "test_time_settings": "; ".join(f"{c['label']}: {chosen(c)}" for c in r["components"]
                                                     if c.get("adapt"))})
    table = pd.DataFrame(rows, columns=["combination", "components", "weights", "valid_ppl", "test_ppl",
                                        "best_component", "best_component_valid_ppl", "best_component_test_ppl",
                                        "em_iterations", "test_time_settings"])
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.6f")
    show = table.copy()
    for col in ("valid_ppl", "test_ppl", "best_component_valid_ppl", "best_component_test_ppl"):
        show[col] = show[col].map(lambda v: f"{v:.2f}")
    show = show.rename(columns=SUMMARY_HEADS)
    with atomic_write(md_out) as fh:
        fh.write(f"{SUMMARY_CAPTION}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    with atomic_write(html_out) as fh:
        fh.write(html_page("Combinations", [f"<p>{SUMMARY_CAPTION}</p>",
                                            show.style.set_uuid("combinations").hide(axis="index").to_html()]))
    return table
