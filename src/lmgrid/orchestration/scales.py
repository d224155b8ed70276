"""Scales: one config asks its question again in a second setting, from the same `make run`.

A config's `scales: {<label>: <config file>}` names other settings of the same experiment, for example the whole
training set beside the student report's 120,000-token prefix (presets/course_report.yaml).  Training settings apply
to a whole config, and a run's folder is keyed by its grid cell only, so a scale is not a study: it is its own
Snakemake run under its own corpus name.  A scale's config is this config with the file that declares `scales:`
swapped for the scale's file (files applied after it, e.g. presets/smoke.yaml, still apply), the same SET, then
`corpus.name=<this config's corpus name>-<label>` and `scales={}`.  `make run` runs every scale first
(`lmgrid scales-run`), then this config, whose rule `scales` (workflow/rules/scales.smk) sets the gate studies'
answers of every scale side by side: results/<corpus>/scales/gates.{csv,md,html} (docs/contracts.md).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from lmgrid.orchestration.config import load_config, load_yaml
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write

SCALES_DIR = "results/{corpus}/scales"
OUTPUTS = ("csv", "md", "html")
# The two answers a gate study gives (analysis.effects._directions): over the whole window, and at the window
# positions every n_step shares.  Two scales agree on an answer when their verdicts are the same words (kept as a
# description only: a verdict word differs with power, so the scale x n interaction is tested, INTERACTIONS).
ANSWERS = {"pooled": "direction", "matched": "at_matched_positions"}


def mtime_stamp(entries) -> str:
    """A short hash of files' modification times, for a rule that reads another run's files without declaring them
    as inputs (declared, they would be this run's outputs too, and rebuilt under this run's settings: scales.smk,
    budget.smk): given as a param, it reruns the rule when one of them is rewritten.  Each entry is a tuple of
    strings ending with the file's path, all of them hashed with its mtime."""
    import hashlib

    state = "\n".join(f"{' '.join(e)} {os.stat(e[-1]).st_mtime_ns}" for e in entries)
    return hashlib.sha256(state.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Scale:
    label: str
    corpus: str
    configfiles: tuple[str, ...]
    assignments: str
    config: dict = field(compare=False, repr=False)


def _declaring_file(configfiles) -> str | None:
    """The last file that says `scales:` (the one a scale's file replaces), or None (config.yaml or SET said it)."""
    found = None
    for f in configfiles:
        if "scales" in (load_yaml(f) or {}):
            found = f
    return found


def scales_of(configfiles=(), assignments: str = "", base_dir: str | Path = ".") -> list[Scale]:
    """Every scale of the config that `--configfile configfiles --config set=assignments` gives, each with its own
    config loaded and checked (so a bad scale stops the run before anything trains)."""
    configfiles = [str(f) for f in configfiles]
    config = load_config(configfiles, assignments, base_dir)
    scales = config.get("scales") or {}
    if not scales:
        return []
    declared_in = _declaring_file(configfiles)
    # A scale's file is found beside the file that names it (presets/ names presets/), else from the working folder.
    home = Path(declared_in).parent if declared_in else Path(base_dir)
    out = []
    for label, name in scales.items():  # labels: the schema's pattern, checked by load_config
        path = str(home / name)
        if not Path(path).is_file():
            raise LmgridError(f"scales.{label}: {name}: file not found (looked for {path})")
        if "scales" in (load_yaml(path) or {}):
            raise LmgridError(f"scales.{label}: {name} declares scales of its own (a scale is one config)")
        files = [path if f == declared_in else f for f in configfiles] if declared_in else [path, *configfiles]
        corpus = f"{config['corpus']['name']}-{label}"
        scale_set = f"{assignments} corpus.name={corpus} scales={{}}".strip()
        try:
            scale_config = load_config(files, scale_set, base_dir)
        except LmgridError as e:
            raise LmgridError(f"scales.{label} ({name}): {e}") from None
        out.append(Scale(label, corpus, tuple(files), scale_set, scale_config))
    return out


def gate_studies(config: dict) -> list[str]:
    """The studies whose findings answer the gate question (they write gates_effect.csv)."""
    from lmgrid.analysis.layout import study_plan

    return [name for name, study in config["studies"].items() if "gates_effect" in study_plan(study)]


def gate_effect_file(corpus: str, study: str) -> str:
    from lmgrid.analysis.layout import STUDIES_DIR

    return f"{STUDIES_DIR.format(corpus=corpus)}/{study}/gates_effect.csv"


def run_scales(snakemake_cmd: list[str], configfiles=(), assignments: str = "") -> int:
    """Run each scale's Snakemake (the command given, plus its config), one after another; the first failure's
    exit code, else 0."""
    env = {**os.environ, "LMGRID_REPORT": "0"}
    for s in scales_of(configfiles, assignments):
        print(f"lmgrid: scale '{s.label}': {' '.join(s.configfiles)} -> results/{s.corpus}/", flush=True)
        rc = subprocess.run([*snakemake_cmd, "--configfile", *s.configfiles, "--config", f"set={s.assignments}"],
                            env=env).returncode
        if rc:
            print(f"lmgrid: error: scale '{s.label}' failed (exit {rc}); the config's own run was not started",
                  file=sys.stderr)
            return rc
    return 0


# ---- the comparison -----------------------------------------------------------------------------------------

def _fmt_diff(d: float, lo: float, hi: float, df, p: float, verdict: str) -> str:
    import pandas as pd

    if pd.isna(d):
        return verdict
    return f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}] (Welch, df {df:.1f}), p_H {p:.3g}: {verdict}"


def compare(tables: list[tuple[str, str, str]]) -> "pd.DataFrame":
    """tables: (scale, study, gates_effect.csv path).  One row per model, depth, layer, gate and scale: that scale's
    answer from its gate study with the most seeds for the model (ties: the study named first), pooled and at
    matched positions, and whether every scale that has the gate gives the same verdict (`agree_pooled`,
    `agree_matched`; "one scale" when only one scale has it)."""
    import pandas as pd

    frames = []
    for order, (scale, study, path) in enumerate(tables):
        t = pd.read_csv(path)
        frames.append(t.assign(scale=scale, study=study, order=order))
    keys = ["model", "layers", "layer", "gate"]
    if not frames or all(f.empty for f in frames):
        return pd.DataFrame(columns=["scale", "study", *keys, "agree_pooled", "agree_matched"])
    rows = pd.concat(frames, ignore_index=True)
    rows = (rows.sort_values(["seeds", "order"], ascending=[False, True])
            .drop_duplicates([*keys, "scale"]).sort_values([*keys, "order"]))
    for answer, column in ANSWERS.items():
        verdicts = rows.groupby(keys)[column].transform(lambda v: "one scale" if len(v) < 2 else
                                                        ("yes" if v.nunique() == 1 else "no"))
        rows[f"agree_{answer}"] = verdicts
    return interactions(rows.drop(columns="order").reset_index(drop=True), keys)


def _slope_se(slope: float, hi: float, df: float) -> float:
    """The standard error of a mean over seeds read back from its marginal 95% t interval (effects.t_test)."""
    from scipy import stats

    return (hi - slope) / stats.t.ppf(1 - ALPHA / 2, df)


ALPHA = 0.05
DIFF_COLUMNS = ("", "_ci_low", "_ci_high", "_df", "_p", "_p_holm", "_sim_low", "_sim_high")


def interactions(rows: "pd.DataFrame", keys: list[str]) -> "pd.DataFrame":
    """The scale x n interaction of each answer (INTERACTIONS), tested directly: per model, depth, layer and gate,
    each scale's slope on n_step minus the reference scale's (the first scale in the rows' order: the config's own),
    with its Welch interval and test over the two scales' seeds (the per-seed slopes of the two scales are
    independent runs; scipy's ttest_ind_from_stats from each scale's mean slope, its standard error read back from
    the marginal t interval, and its df = seeds - 1).  Every such test of the comparison is one family, Holm-adjusted
    (`<answer>_diff_p_holm`); beside each Holm verdict the simultaneous interval (`<answer>_diff_sim_low/high`,
    Bonferroni over the family: analysis.effects.simultaneous, which says why).  `interaction_<answer>`: "n-effect
    larger at <scale>" / "smaller" / "no clear difference", `reference` on the reference scale's row, `one scale`
    or `n/a` (a slope without an interval)."""
    import math

    import numpy as np
    from scipy import stats

    from lmgrid.analysis.effects import INTERACTIONS, holm, simultaneous

    out = rows.copy()
    for answer in INTERACTIONS:
        out[f"interaction_{answer}"] = "n/a"
        for c in DIFF_COLUMNS:
            out[f"{answer}_diff{c}"] = math.nan
    family = []  # (row index, answer, diff, lo, hi, df, p)
    for _, g in out.groupby(keys, sort=False):
        ref = g.iloc[0]
        for answer, (m, lo, hi, df) in INTERACTIONS.items():
            out.loc[g.index[0], f"interaction_{answer}"] = "one scale" if len(g) < 2 else "reference"
            for i, r in g.iloc[1:].iterrows():
                vals = [float(x.get(c, math.nan)) for x in (ref, r) for c in (m, hi, df)]
                if any(math.isnan(v) for v in vals) or vals[2] < 1 or vals[5] < 1:
                    out.loc[i, f"interaction_{answer}"] = "n/a"
                    continue
                (ma, ha, da), (mb, hb, db) = vals[:3], vals[3:]
                sa, sb = _slope_se(ma, ha, da), _slope_se(mb, hb, db)
                res = stats.ttest_ind_from_stats(mb, sb * math.sqrt(db + 1), db + 1, ma, sa * math.sqrt(da + 1),
                                                 da + 1, equal_var=False)
                se = math.hypot(sa, sb)
                wdf = se ** 4 / (sa ** 4 / da + sb ** 4 / db) if se > 0 else da + db
                half = stats.t.ppf(1 - ALPHA / 2, wdf) * se
                diff = mb - ma
                p = float(res.pvalue) if se > 0 else float(diff == 0)
                family.append((i, answer, diff, diff - half, diff + half, wdf, p))
    if family:
        p_holm = holm([f[-1] for f in family])
        sim_lo, sim_hi = simultaneous([f[2] for f in family], [f[3] for f in family], [f[4] for f in family],
                                      [f[5] for f in family], int(np.count_nonzero(~np.isnan([f[-1] for f in family]))))
        for (i, answer, diff, lo, hi, wdf, p), ph, slo, shi in zip(family, p_holm, sim_lo, sim_hi):
            ref_scale = out.loc[out.index[(out[keys] == out.loc[i, keys]).all(axis=1)][0], "scale"]
            out.loc[i, [f"{answer}_diff{c}" for c in DIFF_COLUMNS]] = [diff, lo, hi, wdf, p, ph, slo, shi]
            out.loc[i, f"interaction_{answer}"] = (
                "no clear difference" if not ph < ALPHA else
                f"slope on n {'higher' if diff > 0 else 'lower'} at {out.loc[i, 'scale']} than at {ref_scale}")
    return out


def write_comparison(rows: "pd.DataFrame", scales: list[tuple[str, str]], csv_path, md_path, html_path) -> None:
    """scales: (label, what it is) for the note.  CSV: every column; Markdown and HTML: the answers side by side."""
    import pandas as pd

    from lmgrid.analysis.docs_io import slope_text
    from lmgrid.analysis.effects import INTERACTIONS

    with atomic_write(csv_path) as fh:
        rows.to_csv(fh, index=False, float_format="%.6g")
    show = pd.DataFrame({
        "model": rows["model"], "layer": rows["layer"] + 1, "gate": rows["gate"],
        "scale": rows["scale"], "study": rows["study"], "seeds": rows["seeds"],
        "pooled slope per n, 95% CI": [slope_text(*v) for v in zip(
            rows.get("slope_per_nstep", []), rows.get("slope_ci_low", []), rows.get("slope_ci_high", []),
            rows.get("slope_p_holm", []), rows.get("slope_df", []))],
        "pooled": rows.get("direction", []),
        "matched at": rows.get("matched_positions", []),
        "matched slope per n, 95% CI": [slope_text(*v) for v in zip(
            rows.get("matched_slope", []), rows.get("matched_ci_low", []), rows.get("matched_ci_high", []),
            rows.get("matched_p_holm", []), rows.get("matched_df", []))],
        "at matched positions": rows.get("at_matched_positions", []),
        **{f"scale x n, {answer.replace('_', ' ')}: Δ slope, sim. 95% CI": [_fmt_diff(*v) for v in zip(
            rows[f"{answer}_diff"], rows[f"{answer}_diff_sim_low"], rows[f"{answer}_diff_sim_high"],
            rows[f"{answer}_diff_df"], rows[f"{answer}_diff_p_holm"], rows[f"interaction_{answer}"])]
           for answer in INTERACTIONS},
    })
    title = "The gate question at every scale"
    note = ("Each scale's answer from its own gate study (the one with the most seeds for the model): the slope of "
            "the gate's mean on n_step pooled over the window and at the window positions every n_step shares, "
            "mean over seeds with its 95% t interval (df = seeds - 1), p Holm-adjusted over that study's gate "
            "tests (p_H). Whether n acts differently at two scales is tested directly (scale x n): each scale's "
            "slope minus the reference scale's (the first listed), Welch over the two scales' seeds, Holm over "
            "every such test of this table, the interval the simultaneous 95% one (Bonferroni over those tests); "
            "the pooled slope, the matched start positions and end lags, and the padding-free pooled and "
            "end-aligned slopes. (The CSV's agree_* columns compare verdict words, which differ with power: not a "
            "test.) Scales: "
            + "; ".join(f"{label}: {what}" for label, what in scales) + ".")
    body = show.to_markdown(index=False, disable_numparse=True) if len(show) else "(no gate study in common)"
    with atomic_write(md_path) as fh:
        fh.write(f"## {title}\n\n{note}\n\n{body}\n")
    from lmgrid.analysis.tables import html_page

    with atomic_write(html_path) as fh:
        fh.write(html_page(title, [f"<p>{escape(note)}</p>", show.to_html(index=False, border=0)]))


def cmd_run(a) -> None:
    cmd = a.snakemake[1:] if a.snakemake[:1] == ["--"] else a.snakemake
    if not cmd:
        raise LmgridError("scales-run: give the Snakemake command after --")
    raise SystemExit(run_scales(cmd, a.configfile, os.environ.get("SET", "") if a.set is None else a.set))


def cmd_compare(a) -> None:
    tables = [tuple(t) for t in a.table]
    rows = compare(tables)
    stem = a.out_stem
    write_comparison(rows, [tuple(s.split("=", 1)) for s in a.scale], *(f"{stem}.{e}" for e in OUTPUTS))


def register(sub) -> None:
    s = sub.add_parser("scales-run", help="run each scale of the config (its `scales:`), one Snakemake run each")
    s.add_argument("--configfile", nargs="*", default=[], help="the config files of the run, as Snakemake takes them")
    s.add_argument("--set", default=None, help="overrides, as --config set=... takes (default: $SET)")
    s.add_argument("snakemake", nargs=argparse.REMAINDER, help="the Snakemake command, after --")
    s.set_defaults(func=cmd_run)
    s = sub.add_parser("scales-compare", help="the gate studies' answers of every scale side by side")
    s.add_argument("--table", nargs=3, action="append", default=[], metavar=("SCALE", "STUDY", "CSV"),
                   help="a gate study's gates_effect.csv at a scale (repeat)")
    s.add_argument("--scale", action="append", default=[], metavar="LABEL=WHAT", help="a scale, for the note")
    s.add_argument("--out-stem", required=True, help="writes STEM.csv, STEM.md, STEM.html")
    s.set_defaults(func=cmd_compare)
