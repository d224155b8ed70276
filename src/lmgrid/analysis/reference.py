"""The reference table: each published perplexity beside ours, matched on the published setting.

A config's `reference:` list (a PTB preset's) names each published figure, which of our runs may stand beside it
(`runs: {arch, impl, n_step, layers, regime}`, any subset) and, as far as the source states it, the published
`setting`: hidden_dim, layers, dropout, tie_weights, bptt, epochs and output_layer (full, adaptive, class), or for
an n-gram its smoothing (our n-gram arch names: mkn, kn, katz, addk).  A row's `published_params`, where the
source states the published model's parameter count, is shown beside our `params` and never matched on.  Our
setting is read from each run's metrics.json (its hparams; `output_layer` is `full` where a run does not record one).

`comparable`:
* `yes`: the setting states the model's size, dropout, tying and output layer (an n-gram's: its smoothing), and
  some of our runs equal it on every key it states; the row holds only those runs;
* `no`: a stated key differs in every one of our runs (the row shows them, for what they are, with no verdict);
* `setting unknown`: no setting, or one without a key `yes` needs (the course slides state none).

Per row: our test PPL as mean and std over the runs' seeds (a combination row: over its runs, one per seed), the
95% t interval of the mean (df = seeds - 1; an n-gram is deterministic, so its interval is its value) and, for a
comparable row only, a verdict that needs the whole interval on one side.  The published figure is read at its printed precision (141.2 stands for
[141.15, 141.25]): `beats` (interval below it), `behind` (above), `no difference shown` (overlapping).  A row
with `tolerance` (a reproduction, e.g. 0.03) asks for the interval inside published x (1 +- tolerance):
`within +-3%`, `outside +-3%`, `undecided`.  One seed of a neural model gives no interval and no claim.

`test_ppl_reset_mean`: for a row of stream-regime runs, the mean over the same runs of their test PPL with the state
reset at every sentence start (reset_scores.json, lmgrid.testtime.reset); empty for window runs (scored per sentence
already) and combinations.  It is shown beside our test PPL, takes no part in the verdict.
"""
from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd

from lmgrid.analysis.effects import t_interval
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write, read_json
from lmgrid.run import reset_scores
from lmgrid.run.record import RunRecord
from lmgrid.run.key import NGRAM_ARCHS

MATCH_KEYS = ("arch", "impl", "n_step", "layers", "regime")
SETTING_KEYS = ("hidden_dim", "layers", "dropout", "tie_weights", "bptt", "epochs", "output")
# A config states the output as output_layer (neural) or smoothing (n-gram); one column holds either.
CONFIG_SETTING_KEYS = ("hidden_dim", "layers", "dropout", "tie_weights", "bptt", "epochs", "output_layer", "smoothing")
NEEDED = {"neural": ("hidden_dim", "layers", "dropout", "tie_weights", "output"), "ngram": ("output",)}
NOT_RUN = "not run here"
YES, NO, UNKNOWN = "yes", "no", "setting unknown"
COLUMNS = ["model", "published_test_ppl", "source", "comparable", "ours", "seeds", "test_ppl_mean", "test_ppl_std",
           "ci95_low", "ci95_high", "test_ppl_reset_mean", "verdict", "difference", "valid_ppl_mean", "params",
           "published_params", "stopped_because", "train_wall_s", "hardware", *(f"ours_{k}" for k in SETTING_KEYS), *(f"published_{k}" for k in SETTING_KEYS)]


def _matches(metrics: dict, want: dict) -> bool:
    return all(metrics.get(k) == v for k, v in want.items())


def published_setting(ref: dict, i: int) -> dict:
    setting = dict(ref.get("setting") or {})
    unknown = sorted(set(setting) - set(CONFIG_SETTING_KEYS))
    if unknown:
        raise LmgridError(f"reference[{i}].setting: unknown key {unknown[0]!r} (known: {', '.join(CONFIG_SETTING_KEYS)})")
    if "output_layer" in setting and "smoothing" in setting:
        raise LmgridError(f"reference[{i}].setting: give output_layer (neural) or smoothing (n-gram), not both")
    output = setting.pop("output_layer", None) or setting.pop("smoothing", None)
    return {**setting, **({"output": output} if output else {})}


def our_setting(m: dict) -> dict:
    """A run's values of SETTING_KEYS; None where a key does not apply (an n-gram's width, a window run's bptt)."""
    if m.get("arch") in NGRAM_ARCHS:
        return {**dict.fromkeys(SETTING_KEYS), "output": m["arch"]}
    hp = m.get("hparams") or {}
    return {"hidden_dim": hp.get("hidden_dim"), "layers": m.get("layers"), "dropout": hp.get("dropout"),
            "tie_weights": hp.get("tie_weights"), "bptt": hp.get("bptt") if m.get("regime") == "stream" else None,
            "epochs": m.get("epochs"), "output": hp.get("output_layer", "full")}


def _same(m: dict, setting: dict) -> bool:
    ours = our_setting(m)
    return all(ours[k] == v for k, v in setting.items())


def _half_ulp(published: float) -> float:
    """Half a unit of the published figure's last printed digit: 141.2 stands for [141.15, 141.25]."""
    exponent = Decimal(repr(float(published))).normalize().as_tuple().exponent
    return 0.5 * 10.0 ** min(0, exponent)


def verdict(comparable: str, low: float, high: float, mean: float, published: float,
            tolerance: float | None = None) -> str:
    """What the interval [low, high] of our mean supports against the published figure (module docstring)."""
    if comparable != YES:
        return ""
    half = _half_ulp(published)
    if tolerance:
        band, pct = (published * (1 - tolerance) - half, published * (1 + tolerance) + half), f"±{tolerance * 100:g}%"
        if math.isnan(low):
            where = "within" if band[0] <= mean <= band[1] else "outside"
            return f"1 seed: no interval (the value is {where} {pct})"
        if band[0] <= low and high <= band[1]:
            return f"within {pct}"
        return f"outside {pct}" if high < band[0] or low > band[1] else "undecided"
    if math.isnan(low):
        return "1 seed: no interval"
    if high < published - half:
        return "beats"
    return "behind" if low > published + half else "no difference shown"


def _values(hits: list[dict], key: str):
    """Our value of a setting key over the runs: the one value, or the distinct ones joined by blanks."""
    vals = sorted({our_setting(m)[key] for m in hits} - {None}, key=str)
    if len(vals) > 1 and key == "tie_weights":  # several runs of a combination: "tied untied", as one run shows it
        return " ".join("tied" if v else "untied" for v in sorted(vals, reverse=True))
    return None if not vals else vals[0] if len(vals) == 1 else " ".join(map(str, vals))


def _combination_row(row: dict, ref: dict, setting: dict, results: list[dict], by_dir: dict) -> dict:
    """A `combine:` row: the combination's test PPL over its runs (one per seed, component i from seed s), as mean
    and std with the 95% t interval of the mean, and a verdict from that interval as for a model row (one run: no
    interval, no verdict); our setting that of its neural components, comparable as a run row is, on those."""
    if not results:
        return {**row, "ours": NOT_RUN, "comparable": ""}
    comps = [by_dir[c["run_dir"]] for r in results for c in r["components"] if c["run_dir"] in by_dir]
    neural = [m for m in comps if m["arch"] not in NGRAM_ARCHS] or comps
    same = [m for m in neural if _same(m, setting)] if setting else []
    comparable = NO if setting and not same else YES if all(k in setting for k in NEEDED["neural"]) else UNKNOWN
    first = neural[0] if neural else {}
    test = pd.Series([r["test_ppl"] for r in results], dtype=float)
    mean = test.mean()
    low, high = t_interval(test)
    # Size and training time of one run's models (each run holds the same models at another seed).
    run_models = [[by_dir[c["run_dir"]] for c in r["components"] if c["run_dir"] in by_dir] for r in results]
    return {**row, "comparable": comparable,
            "ours": f"combination {results[0]['name']} ({len(results[0]['labels'])} models)",
            "seeds": len(results), "test_ppl_mean": mean, "test_ppl_std": test.std() if len(results) > 1 else math.nan,
            "ci95_low": low, "ci95_high": high,
            "verdict": verdict(comparable, low, high, mean, ref["published_test_ppl"], ref.get("tolerance")),
            "difference": mean - ref["published_test_ppl"],
            "valid_ppl_mean": sum(r["valid_ppl"] for r in results) / len(results),
            "params": sum(m.get("params") or 0 for m in run_models[0]),
            "stopped_because": " ".join(sorted({str(m["stopped_because"]) for m in comps if m.get("stopped_because")})),
            "train_wall_s": sum(sum(m.get("wall_s", 0.0) for m in ms) for ms in run_models) / len(run_models),
            "hardware": ", ".join(str(first[k]) for k in ("device", "precision") if first.get(k)) or "cpu",
            **{f"ours_{k}": _values(neural, k) for k in SETTING_KEYS}}


def _reset_mean(hits: list[dict], reset: dict[int, float]) -> float:
    """The runs' mean reset test PPL, when every one of them has one (else NaN: never a mean over some seeds)."""
    values = [reset.get(id(m), math.nan) for m in hits]
    return sum(values) / len(values) if values and not any(math.isnan(v) for v in values) else math.nan


def reference_table(rows: list[dict], metrics_paths: list[str], combination_paths: list[str] = (),
                    reset_paths: list[str] = ()) -> pd.DataFrame:
    # Checked run records, matched on their fields by name (the rules above read the file's keys).
    runs = [RunRecord.read(p).results() for p in metrics_paths]
    reset_by_dir = {Path(p).parent.resolve(): reset_scores.read(p)["test_ppl_reset"] for p in reset_paths}
    reset = {id(m): reset_by_dir[Path(p).parent.resolve()] for p, m in zip(metrics_paths, runs)
             if Path(p).parent.resolve() in reset_by_dir}
    by_dir = {str(Path(p).parent): m for p, m in zip(metrics_paths, runs)}
    combos: dict[str, list[dict]] = {}  # a combination's runs, one per seed (lmgrid.testtime.combine.select)
    for r in (read_json(p) for p in combination_paths):
        combos.setdefault(r["name"], []).append(r)
    out = []
    for i, ref in enumerate(rows):
        if ref.get("combine") is not None:
            if ref.get("runs"):
                raise LmgridError(f"reference[{i}]: give runs or combine, not both")
            setting = published_setting(ref, i)
            row = {"model": ref["model"], "published_test_ppl": ref["published_test_ppl"], "source": ref["source"],
                   "published_params": ref.get("published_params"),
                   **{f"published_{k}": setting.get(k) for k in SETTING_KEYS}}
            out.append(_combination_row(row, ref, setting, combos.get(ref["combine"], []), by_dir))
            continue
        want = ref.get("runs") or {}
        unknown = sorted(set(want) - set(MATCH_KEYS))
        if unknown:
            raise LmgridError(f"reference[{i}].runs: unknown key {unknown[0]!r} (known: {', '.join(MATCH_KEYS)})")
        setting = published_setting(ref, i)
        candidates = [m for m in runs if want and _matches(m, want)]
        row = {"model": ref["model"], "published_test_ppl": ref["published_test_ppl"], "source": ref["source"],
               "published_params": ref.get("published_params"),
               **{f"published_{k}": setting.get(k) for k in SETTING_KEYS}}
        if not candidates:
            out.append({**row, "ours": NOT_RUN, "comparable": ""})
            continue
        same = [m for m in candidates if _same(m, setting)] if setting else []
        hits = same or candidates  # matched on the setting; without a match, the runs of that class, not comparable
        kind = "ngram" if all(m["arch"] in NGRAM_ARCHS for m in hits) else "neural"
        comparable = NO if setting and not same else YES if all(k in setting for k in NEEDED[kind]) else UNKNOWN
        test = pd.Series([m["test"]["ppl"] for m in hits], dtype=float)
        mean = test.mean()
        low, high = (mean, mean) if kind == "ngram" else t_interval(test)
        first = hits[0]
        out.append({**row, "comparable": comparable,
                    "ours": " ".join(f"{k}={first[k]}" for k in MATCH_KEYS if k in first),
                    "seeds": len(hits), "test_ppl_mean": mean, "test_ppl_std": test.std() if len(hits) > 1 else math.nan,
                    "ci95_low": low, "ci95_high": high, "test_ppl_reset_mean": _reset_mean(hits, reset),
                    "verdict": verdict(comparable, low, high, mean, ref["published_test_ppl"], ref.get("tolerance")),
                    "difference": mean - ref["published_test_ppl"],
                    "valid_ppl_mean": sum(m["valid"]["ppl"] for m in hits) / len(hits),
                    "params": first.get("params"),
                    "stopped_because": " ".join(sorted({str(m["stopped_because"]) for m in hits
                                                        if m.get("stopped_because")})),
                    "train_wall_s": sum(m.get("wall_s", 0.0) for m in hits) / len(hits),
                    "hardware": ", ".join(str(first[k]) for k in ("device", "precision") if first.get(k)) or "cpu",
                    **{f"ours_{k}": _values(hits, k) for k in SETTING_KEYS}})
    return pd.DataFrame(out, columns=COLUMNS)


def _num(v, fmt):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _setting_cell(ours, published) -> str:
    """'ours / published': '-' where ours does not apply, '?' where the source does not say."""
    def show(v):  # the frame holds numbers as floats (a column with gaps): 200.0 -> 200
        if isinstance(v, (bool, np.bool_)):
            return "tied" if v else "untied"
        return format(v, "g") if isinstance(v, float) else v

    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))  # noqa: E731
    if missing(ours) and missing(published):
        return ""
    return f"{'-' if missing(ours) else show(ours)} / {'?' if missing(published) else show(published)}"


def shown_difference(comparable: str, difference: float) -> float:
    """Ours minus published as the tables show it: for a comparable row only.  Beside a row whose setting differs
    or is unknown, a difference reads as the verdict the rule does not give (reference.csv keeps it as data)."""
    return difference if comparable == YES else math.nan


SETTING_HEADERS = {"hidden_dim": "hidden", "layers": "layers", "dropout": "dropout", "tie_weights": "tied",
                   "bptt": "bptt", "epochs": "epochs", "output": "output"}


def _display(table: pd.DataFrame) -> pd.DataFrame:
    def ours(r):
        if r["ours"] == NOT_RUN:
            return NOT_RUN
        return f"{r['test_ppl_mean']:.1f}" + (f" ± {r['test_ppl_std']:.1f}" if not math.isnan(r["test_ppl_std"]) else "")

    def interval(r):
        return "" if r["ours"] == NOT_RUN or math.isnan(r["ci95_low"]) else f"[{r['ci95_low']:.1f}, {r['ci95_high']:.1f}]"

    rows = list(table.iterrows())
    return pd.DataFrame({
        "model": table["model"], "published": table["published_test_ppl"].map(lambda v: f"{v:g}"),
        "source": table["source"], "comparable": table["comparable"].fillna(""),
        "ours (test)": [ours(r) for _, r in rows], "95% CI": [interval(r) for _, r in rows],
        "ours (reset)": table["test_ppl_reset_mean"].map(lambda v: _num(v, ".1f")),
        "verdict": table["verdict"].fillna(""), "seeds": table["seeds"].map(lambda v: _num(v, ".0f")),
        **{h: [_setting_cell(r[f"ours_{k}"], r[f"published_{k}"]) for _, r in rows] for k, h in SETTING_HEADERS.items()},
        "stop": table["stopped_because"].fillna(""),
        "valid": table["valid_ppl_mean"].map(lambda v: _num(v, ".1f")),
        "wall (min)": table["train_wall_s"].map(lambda v: _num(v / 60, ".1f")),
        "hardware": table["hardware"].fillna(""),
        "difference": [_num(shown_difference(r["comparable"], r["difference"]), "+.1f") for _, r in rows]})


CAPTION = ("Published test perplexities on the Penn Treebank beside ours (mean ± std over seeds; test split, one "
           "</s> per sentence counted, <s> never) with the 95% t interval of our mean (n-grams are deterministic: "
           "their interval is their value). Setting columns: ours / published ('?': the source does not say; "
           "'-': does not apply). Comparable: yes only when the published setting states size, dropout, tying and "
           "output layer (n-grams: smoothing) and ours equals it; a verdict (beats, behind, no difference shown, or "
           "within a reproduction's tolerance) is given only for comparable rows and needs the whole interval on "
           "one side of the published figure, read at its printed precision. Difference: ours minus published, on "
           "comparable rows only. "
           "Wall time: one training run, on the hardware named. Rows marked 'not run here' were not measured here. "
           "Ours (reset): stream models' mean test perplexity with the state reset at every sentence start (each "
           "sentence scored alone, as window models are); no verdict is drawn on it. "
           "A combination row (lmgrid.testtime.combine) holds its mixture's runs, one per seed (component i from "
           "seed s), as mean ± std with the t interval and a verdict as for a model (one run: no interval, no "
           "verdict); its valid PPL is in-sample (settings and weights fitted on valid); its setting columns are its "
           "neural components', its wall time their training's sum for one seed.")


def write(rows: list[dict], metrics_paths: list[str], csv_out: str, md_out: str, tex_out: str, html_out: str,
          combination_paths: list[str] = (), reset_paths: list[str] = ()) -> None:
    from lmgrid.analysis.tables import html_page

    table = reference_table(rows, metrics_paths, combination_paths, reset_paths)
    with atomic_write(csv_out) as fh:
        table.to_csv(fh, index=False, float_format="%.4f")
    show = _display(table)
    with atomic_write(md_out) as fh:
        fh.write(f"{CAPTION}\n\n{show.to_markdown(index=False, disable_numparse=True)}\n")
    caption = CAPTION.replace("<", r"\textless{}").replace(">", r"\textgreater{}")
    tex_show = show.drop(columns=["hardware"])
    tex = (tex_show.style.hide(axis="index").format(escape="latex")
           .format_index(escape="latex", axis=1)
           .to_latex(hrules=True, caption=caption, label="tab:ptb-reference", position="t",
                     environment="table*", position_float="centering",
                     column_format="lrlll" + "l" * (tex_show.shape[1] - 5)))
    with atomic_write(tex_out) as fh:
        fh.write(tex.replace("±", r"$\pm$"))
    with atomic_write(html_out) as fh:
        fh.write(html_page("Published perplexities beside ours",
                           [f"<p>{CAPTION.replace('<', '&lt;').replace('>', '&gt;')}</p>",
                            show.style.set_uuid("reference").hide(axis="index").to_html()]))
