"""How the mean gate activation changes with the context window, with a 95% confidence interval.

The course report claims that as n_step grows the LSTM forget gate mean rises and the input gate
mean falls.  We estimate, per model, layer and gate, the slope of the gate mean (scope `all` of
gates.csv, window regime) against n_step.  Seeds are the independent replicates: each seed gives one
least-squares slope over its n_step values, and the interval is the t interval of the mean slope
(df = seeds - 1).  With a single seed the interval falls back to the ordinary least-squares standard
error of the slope over the n_step points (df = points - 2), which ignores seed-to-seed variation.

Points where the gate never receives a gradient (the LSTM forget gate at n_step 2, lmgrid.gate_facts) are left
out of the fit: their mean is the gate's initial value, not an effect of the window.  The table lists them in
`untrained_n_steps`, and the plot draws them hollow.
"""
from __future__ import annotations

import math
from html import escape

import numpy as np
import pandas as pd
from scipy import stats

from ..errors import atomic_write
from ..gate_facts import gate_gets_gradient
from .tables import html_page, latex_escape

CONFIDENCE = 0.95
COLUMNS = ["model", "layers", "layer", "gate", "seeds", "n_steps", "untrained_n_steps", "gate_mean_first",
           "gate_mean_last", "slope_per_token", "ci_low", "ci_high", "method", "direction"]


def gate_slopes(gates: pd.DataFrame, confidence: float = CONFIDENCE) -> pd.DataFrame:
    df = gates[(gates["scope"] == "all") & (gates["regime"] == "window")]
    rows = []
    for (model, layers, layer, gate), g in df.groupby(["model", "layers", "layer", "gate"], sort=True):
        trained = np.array([gate_gets_gradient(gate, "window", int(n)) for n in g["n_step"]], dtype=bool)
        untrained = " ".join(str(int(s)) for s in sorted(g.loc[~trained, "n_step"].unique()))
        g = g[trained]
        steps = sorted(g["n_step"].unique())
        if len(steps) < 2:
            continue
        per_seed = [stats.linregress(s["n_step"].to_numpy(float), s["mean"].to_numpy(float)).slope
                    for _, s in g.groupby("seed") if s["n_step"].nunique() >= 2]
        if len(per_seed) >= 2:
            slope = float(np.mean(per_seed))
            lo, hi = stats.t.interval(confidence, len(per_seed) - 1, loc=slope, scale=stats.sem(per_seed))
            method = f"t over {len(per_seed)} seed slopes"
        else:
            x, y = g["n_step"].to_numpy(float), g["mean"].to_numpy(float)
            fit = stats.linregress(x, y)
            slope = float(fit.slope)
            lo, hi = (stats.t.interval(confidence, len(x) - 2, loc=slope, scale=fit.stderr) if len(x) > 2
                      else (math.nan, math.nan))
            method = "OLS standard error (one seed)"
        lo, hi = float(lo), float(hi)
        direction = "rises" if lo > 0 else "falls" if hi < 0 else "no clear change"
        by_step = g.groupby("n_step")["mean"].mean()
        rows.append({"model": model, "layers": layers, "layer": int(layer), "gate": gate,
                     "seeds": int(g["seed"].nunique()), "n_steps": " ".join(str(int(s)) for s in steps),
                     "untrained_n_steps": untrained,
                     "gate_mean_first": by_step.iloc[0], "gate_mean_last": by_step.iloc[-1],
                     "slope_per_token": slope, "ci_low": lo, "ci_high": hi, "method": method,
                     "direction": direction})
    order = "ifogzr"  # LSTM i f o g, then GRU z r
    rows.sort(key=lambda r: (r["model"], r["layers"], r["layer"], order.find(r["gate"]) % 99))
    return pd.DataFrame(rows, columns=COLUMNS)


def write_effects(name: str, effects: pd.DataFrame, csv_path, md_path, tex_path, html_path) -> None:
    with atomic_write(csv_path) as fh:
        effects.to_csv(fh, index=False, float_format="%.6g")
    pct = int(CONFIDENCE * 100)
    show = effects.assign(**{
        "slope (per token)": effects["slope_per_token"].map(lambda v: f"{v:+.4f}"),
        f"{pct}% CI": [f"[{a:+.4f}, {b:+.4f}]" if not math.isnan(a) else "–"
                       for a, b in zip(effects["ci_low"], effects["ci_high"])],
        "mean at first/last n": [f"{a:.3f} → {b:.3f}" for a, b in zip(effects["gate_mean_first"],
                                                                        effects["gate_mean_last"])],
        "fitted n_step": effects["n_steps"],
        "left out (no gradient)": effects["untrained_n_steps"].replace("", "–"),
    })[["model", "layers", "layer", "gate", "seeds", "fitted n_step", "left out (no gradient)", "mean at first/last n",
        "slope (per token)", f"{pct}% CI", "direction"]]
    md = [f"## Gate means against n_step, study `{name}`", "",
          f"Slope of the mean gate activation per extra context token, {pct}% CI "
          f"({effects['method'].iloc[0] if len(effects) else 'no data'}). "
          "`direction` is `rises`/`falls` only when the interval excludes 0. Layers count from 0. "
          "n_step values where the gate gets no gradient (the LSTM forget gate at n_step 2 only ever multiplies a "
          "zero cell state) are left out of the fit and listed.", "",
          show.to_markdown(index=False, disable_numparse=True) if len(show) else "(no gate statistics)", ""]
    with atomic_write(md_path) as fh:
        fh.write("\n".join(md))
    caption = (f"Slope of the mean gate activation against n\\_step (per token) with {pct}\\% CI, "
               f"study {latex_escape(name)}.")
    tex = (show.style.hide(axis="index").format(escape="latex").format_index(escape="latex", axis=1)
           .to_latex(hrules=True, caption=caption, label=f"tab:{name}-gates", position="t",
                     position_float="centering", column_format="l" + "r" * (len(show.columns) - 1)))
    with atomic_write(tex_path) as fh:
        fh.write(tex.replace("→", r"$\to$"))
    note = (f"<p>Slope of the mean gate activation per extra context token with its {pct}% confidence interval "
            f"({escape(effects['method'].iloc[0]) if len(effects) else 'no data'}); <i>direction</i> is rises/falls "
            "only when the interval excludes 0. Layers count from 0. n_step values where the gate gets no gradient "
            "(the LSTM forget gate at n_step 2) are left out of the fit and listed.</p>")
    with atomic_write(html_path) as fh:
        fh.write(html_page(f"Gate means against n_step, study {name}", [note, show.to_html(index=False, border=0)]))
