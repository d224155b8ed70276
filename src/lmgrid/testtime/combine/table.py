"""A combination's outputs: result.json (what MLflow, the reference table and the report read) and its table."""
from __future__ import annotations

import math
import re
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


def write(out_dir: str | Path, name: str, m: Mixture, components: list[dict], description: str = "",
          seed: int | None = None, run: str = "") -> None:
    """A run's table and result.json.  seed: the seed its components that pin none were taken from (None: one run
    whose components pin theirs); run: its folder under combine/ (<name>, or <name>/s<seed>), its MLflow run."""
    from lmgrid.analysis.tables import html_page

    out_dir = Path(out_dir)
    table = frame(m, name, components)
    grids = [(c["label"], grid_frame(c)) for c in components if c.get("adapt")]
    at_seed = f" (seed {seed})" if seed is not None else ""
    caption = (f"Combination {name}{at_seed}: linear interpolation, weights fitted by EM on valid ({m.iterations} "
               f"iterations), applied once to test; {m.tokens.get('test', 0)} test tokens. Its valid PPL is "
               f"in-sample: the weights (and any test-time settings) were fitted on valid."
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
    write_json(out_dir / RESULT, {"name": name, "run": run or name, "seed": seed, "method": "linear",
                                  "description": description, "components": components, **m.to_dict()})


SUMMARY_CAPTION = ("Combinations: linear interpolation of cells' per-token probabilities, weights fitted by EM on "
                   "valid "
                   "and applied once to test; a combination whose neural components pin no seed is run once per seed "
                   "(component i from seed s; the n-grams are shared). Test PPL: mean ± sample std over its seeds, "
                   "with the 95% t interval of the mean (none for one run). Valid PPL (in-sample): the mean over its "
                   "seeds of the mixture's valid PPL, which is not a held-out figure: the test-time settings were the "
                   "best of their grid on valid and the weights were then fitted by EM on valid. Best component: "
                   "chosen on valid in each run, the component with the lowest valid PPL (the first listed on a "
                   "tie), shown with its valid and test PPL (means over seeds). Test-time settings: those of the "
                   "components scored with a cache or dynamic evaluation, chosen on valid (docs/adapt.md).")
BY_SEED_CAPTION = ("Each run of each combination: its seed ('-': its components pin theirs), weights, in-sample valid "
                   "PPL and test PPL.")


def best_component(result: dict) -> int:
    """The index of a combination's best component, chosen on valid: the lowest valid PPL, the first on a tie.  Test
    never takes part in the choice; the summary only reports the chosen component's test PPL."""
    valid = result["component_valid_ppl"]
    return min(range(len(valid)), key=lambda i: valid[i])


SUMMARY_HEADS = {"best_component": "best component (chosen on valid)",
                 "valid_ppl_in_sample": "valid PPL (in-sample)"}
SEED_IN_LABEL = re.compile(r" s\d+(?= |$)")


def run_row(r: dict) -> dict:
    """One run of a combination (result.json) as a row."""
    b = best_component(r)
    return {"combination": r["name"], "seed": r.get("seed"), "components": len(r["labels"]),
            "weights": "; ".join(f"{label} {w:.3f}" for label, w in zip(r["labels"], r["weights"])),
            "valid_ppl_in_sample": r["valid_ppl"], "test_ppl": r["test_ppl"], "best_component": r["labels"][b],
            "best_component_valid_ppl": r["component_valid_ppl"][b],
            "best_component_test_ppl": r["component_test_ppl"][b], "em_iterations": r["iterations"],
            "test_time_settings": "; ".join(f"{c['label']}: {chosen(c)}" for c in r["components"] if c.get("adapt"))}


BY_SEED_COLUMNS = ["combination", "seed", "components", "weights", "valid_ppl_in_sample", "test_ppl", "best_component",
                   "best_component_valid_ppl", "best_component_test_ppl", "em_iterations", "test_time_settings"]
COLUMNS = ["combination", "components", "seeds", "seed_list", "test_ppl_mean", "test_ppl_std", "ci95_low",
           "ci95_high", "valid_ppl_in_sample", "best_component", "best_component_valid_ppl",
           "best_component_test_ppl", "weights", "test_time_settings"]


PER_SEED = "per seed (the runs' table)"


def aggregate(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per combination from its runs' rows: test PPL mean, sample std and 95% t interval over the seeds."""
    from lmgrid.analysis.effects import t_interval

    rows = []
    for name, g in runs.groupby("combination", sort=False):
        test = g["test_ppl"].astype(float)
        low, high = t_interval(test)
        one = len(g) == 1
        # Over seeds a component's label differs only by its seed: the best component is named without it.
        best = list(dict.fromkeys(g["best_component"] if one else g["best_component"].map(
            lambda v: SEED_IN_LABEL.sub("", v))))
        rows.append({"combination": name, "components": int(g["components"].iloc[0]), "seeds": len(g),
                     "seed_list": " ".join("-" if pd.isna(v) else str(int(v)) for v in g["seed"]),
                     "test_ppl_mean": test.mean(), "test_ppl_std": test.std() if len(g) > 1 else math.nan,
                     "ci95_low": low, "ci95_high": high, "valid_ppl_in_sample": g["valid_ppl_in_sample"].mean(),
                     "best_component": "; ".join(best),
                     "best_component_valid_ppl": g["best_component_valid_ppl"].mean(),
                     "best_component_test_ppl": g["best_component_test_ppl"].mean(),
                     # Weights and test-time settings are fitted in each run: the runs' table shows them.
                     "weights": g["weights"].iloc[0] if one else PER_SEED,
                     "test_time_settings": g["test_time_settings"].iloc[0] if one or not any(g["test_time_settings"])
                     else PER_SEED})
    return pd.DataFrame(rows, columns=COLUMNS)


def _fmt(v, spec=".2f") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def summary(result_paths: list[str], csv_out: str, md_out: str, html_out: str, by_seed_csv: str = "") -> pd.DataFrame:
    """Every combination in one table (aggregate: one row per combination, over its seeds), and every run of each
    in another (by_seed_csv, and below the first in the Markdown and HTML)."""
    from lmgrid.analysis.tables import html_page
    from lmgrid.common.fileio import read_json

    runs = pd.DataFrame([run_row(read_json(p)) for p in result_paths], columns=BY_SEED_COLUMNS)
    runs["seed"] = runs["seed"].astype("Int64")
    table = aggregate(runs)
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.6f")
    if by_seed_csv:
        with atomic_write(by_seed_csv) as fh:
            runs.to_csv(fh, index=False, float_format="%.6f")
    show = table.assign(**{"test PPL": [_fmt(m) + ("" if math.isnan(s) else f" ± {s:.2f}")
                                         for m, s in zip(table["test_ppl_mean"], table["test_ppl_std"])],
                           "95% CI": ["" if math.isnan(lo) else f"[{lo:.2f}, {hi:.2f}]"
                                      for lo, hi in zip(table["ci95_low"], table["ci95_high"])]})
    show = show.drop(columns=["test_ppl_mean", "test_ppl_std", "ci95_low", "ci95_high"])
    for col in ("valid_ppl_in_sample", "best_component_valid_ppl", "best_component_test_ppl"):
        show[col] = show[col].map(_fmt)
    show = show[["combination", "components", "seeds", "seed_list", "test PPL", "95% CI", "valid_ppl_in_sample",
                 "best_component", "best_component_valid_ppl", "best_component_test_ppl", "weights",
                 "test_time_settings"]].rename(columns=SUMMARY_HEADS)
    per = runs.assign(seed=runs["seed"].map(lambda v: "-" if pd.isna(v) else str(v)))
    for col in ("valid_ppl_in_sample", "test_ppl", "best_component_valid_ppl", "best_component_test_ppl"):
        per[col] = per[col].map(_fmt)
    per = per.rename(columns=SUMMARY_HEADS)
    with atomic_write(md_out) as fh:
        fh.write(f"{SUMMARY_CAPTION}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n\n"
                 f"{BY_SEED_CAPTION}\n\n{per.to_markdown(index=False, disable_numparse=True)}\n")
    with atomic_write(html_out) as fh:
        fh.write(html_page("Combinations", [f"<p>{SUMMARY_CAPTION}</p>",
                                            show.style.set_uuid("combinations").hide(axis="index").to_html(),
                                            f"<p>{BY_SEED_CAPTION}</p>",
                                            per.style.set_uuid("combination_runs").hide(axis="index").to_html()]))
    return table
