"""Aggregation on fixture run folders (docs/contracts.md shapes, no training): tables, gate effects, figures."""
from __future__ import annotations

import json
import math
import re
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lmgrid.aggregate import build, collect, layout, tables
from lmgrid.aggregate.fixtures import write_fake_results
from lmgrid.errors import LmgridError
from lmgrid.runkey import expand_study

CORPUS = "fx"
STUDIES = {
    "context": {"arch": ["kn", "lstm", "ffnn"], "n_step": [2, 3, 5], "layers": [1], "seed": [1, 2, 3],
                "regime": ["window"], "impl": ["torch"], "description": "context & more"},
    "depth": {"arch": ["rnn"], "n_step": [3], "layers": [1, 2], "seed": [1, 2], "regime": ["window"],
              "impl": ["torch"]},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("agg")
    write_fake_results(root, CORPUS, STUDIES)
    files = build.build_all(CORPUS, STUDIES, str(root / f"results/{CORPUS}/oracle.json"), root)
    return root, files


def _metrics(root, study):
    """Every run's metrics.json of a study, read straight from the fixture files."""
    return [json.loads((root / k.run_dir(CORPUS) / "metrics.json").read_text()) for k in expand_study(study)]


def test_outputs_are_exactly_the_plan(built):
    root, files = built
    expected = {str(root / p.format(corpus=CORPUS)) for p in layout.all_outputs(CORPUS, STUDIES)}
    assert set(files) == expected
    assert all((root / p).stat().st_size > 0 for p in files)
    plan = layout.study_plan(STUDIES["context"])
    assert {"table", "ppl_vs_nstep", "curves", "gates_vs_nstep", "gates_effect", "saturation_lstm_torch"} <= set(plan)
    assert "ppl_vs_layers" in layout.study_plan(STUDIES["depth"])
    assert "gates_vs_nstep" not in layout.study_plan(STUDIES["depth"])


def test_table_csv_means_stds_and_seed_counts(built):
    root, _ = built
    table = pd.read_csv(root / f"results/{CORPUS}/studies/context/table.csv")
    runs = _metrics(root, STUDIES["context"])
    groups: dict[tuple, list] = {}
    for m in runs:
        groups.setdefault((m["arch"], m["n_step"]), []).append(m)
    assert len(table) == len(groups) == 9  # kn x3 (deterministic, one row each), lstm x3, ffnn x3
    for (arch, n), ms in groups.items():
        row = table[(table["arch"] == arch) & (table["n_step"] == n)].iloc[0]
        test = [m["test"]["ppl"] for m in ms]
        valid = [m["valid"]["ppl"] for m in ms]
        assert row["seeds"] == len(ms) == (1 if arch == "kn" else 3)
        assert row["test_ppl_mean"] == pytest.approx(statistics.fmean(test), abs=1e-4)
        assert row["valid_ppl_mean"] == pytest.approx(statistics.fmean(valid), abs=1e-4)
        if len(ms) > 1:
            assert row["test_ppl_std"] == pytest.approx(statistics.stdev(test), abs=1e-4)
        else:
            assert math.isnan(row["test_ppl_std"])


def test_markdown_and_latex_bold_the_lowest_mean_per_column(built):
    root, _ = built
    runs = _metrics(root, STUDIES["context"])
    md = (root / f"results/{CORPUS}/studies/context/table.md").read_text()
    tex = (root / f"results/{CORPUS}/studies/context/table.tex").read_text()
    test_md = md.split("**Valid perplexity**")[0]
    for n in (2, 3, 5):
        by_arch = {}
        for m in runs:
            if m["n_step"] == n:
                by_arch.setdefault(m["arch"], []).append(m["test"]["ppl"])
        means = {a: statistics.fmean(v) for a, v in by_arch.items()}
        best = min(means, key=means.get)
        sd = statistics.stdev(by_arch[best]) if len(by_arch[best]) > 1 else None
        text = f"{means[best]:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")
        assert f"**{text}**" in test_md
        for arch in means:
            if arch != best:
                assert f"**{means[arch]:.2f}" not in test_md
        pm = r" $\pm$ "
        tex_text = text.replace(" ± ", pm)
        assert "\\textbf{" + tex_text + "}" in tex
    assert re.search(r"^\|\s*oracle\s*\|\s*–\s*\|", md, re.M)
    for needed in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", "tab:context-test"):
        assert needed in tex
    html = (root / f"results/{CORPUS}/studies/context/table.html").read_text()
    # One bold cell per column (pandas Styler: a CSS rule listing the cells), test and valid tables.
    bold_rules = re.findall(r"((?:#T_\w+_row\d+_col\d+,?\s*)+)\{\s*font-weight: bold;", html)
    assert sum(len(re.findall(r"#T_\w+", rule)) for rule in bold_rules) == 6, bold_rules


def _tau_b(xs, ys):
    """Kendall's tau-b by its definition: (concordant - discordant) / sqrt((pairs - ties in x)(pairs - ties in y))."""
    pairs = [(a, b) for a in range(len(xs)) for b in range(a + 1, len(xs))]
    sign = [(xs[a] - xs[b]) * (ys[a] - ys[b]) for a, b in pairs]
    tx = sum(xs[a] == xs[b] for a, b in pairs)
    ty = sum(ys[a] == ys[b] for a, b in pairs)
    return (sum(s > 0 for s in sign) - sum(s < 0 for s in sign)) / math.sqrt((len(pairs) - tx) * (len(pairs) - ty))


def test_gate_trend_and_means_match_an_independent_computation(built):
    """The trend table's tau and direction, and the per-n_step means with t intervals, recomputed here from the
    runs' gates.csv by their definitions. Kills: means over seeds weighted wrongly, tau over per-step means
    instead of runs, a missing interval."""
    root, _ = built
    trends = pd.read_csv(root / f"results/{CORPUS}/studies/context/gates_effect.csv")
    means = pd.read_csv(root / f"results/{CORPUS}/studies/context/gate_means.csv")
    keys = [k for k in expand_study(STUDIES["context"]) if k.arch == "lstm"]
    for gate, direction in (("f", "rises"), ("i", "falls")):
        xs, ys = [], []
        for k in keys:
            g = pd.read_csv(root / k.run_dir(CORPUS) / "gates.csv")
            row = g[(g["scope"] == "all") & (g["gate"] == gate) & (g["layer"] == 0)]
            if gate == "f" and k.n_step == 2:
                assert row.empty  # no forget-gate value has an effect at n_step 2
                continue
            xs.append(k.n_step)
            ys.append(float(row["mean"].iloc[0]))
        row = trends[(trends["gate"] == gate) & (trends["model"] == "lstm")].iloc[0]
        assert row["kendall_tau"] == pytest.approx(_tau_b(xs, ys), abs=1e-6)  # the CSV holds 6 digits
        assert row["runs"] == len(xs) and row["seeds"] == 3 and row["direction"] == direction
        for n in sorted(set(xs)):
            vals = [y for x, y in zip(xs, ys) if x == n]
            half = stats.t.ppf(0.975, len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))
            m = means[(means["gate"] == gate) & (means["model"] == "lstm") & (means["n_step"] == n)].iloc[0]
            assert m["mean"] == pytest.approx(statistics.fmean(vals), rel=1e-6)
            assert m["ci_low"] == pytest.approx(statistics.fmean(vals) - half, rel=1e-4, abs=1e-6)
            assert m["ci_high"] == pytest.approx(statistics.fmean(vals) + half, rel=1e-4, abs=1e-6)


def test_figures_are_pdf_and_png(built):
    root, _ = built
    d = root / f"results/{CORPUS}/studies/context"
    assert (d / "ppl_vs_nstep.pdf").read_bytes()[:5] == b"%PDF-"
    assert (d / "ppl_vs_nstep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_new_study_in_config_alone_expands_and_aggregates(tmp_path):
    studies = {"my_new_study": {"arch": ["gru", "mkn"], "n_step": [4, 6], "layers": [1], "seed": [7],
                                "regime": ["window"], "impl": ["cell"]}}
    assert len(expand_study(studies["my_new_study"])) == 4
    write_fake_results(tmp_path, CORPUS, studies, oracle=False)
    files = build.build_all(CORPUS, studies, None, tmp_path)
    assert {p.rsplit("/", 1)[1] for p in files} >= {"table.csv", "ppl_vs_nstep.png", "saturation_gru_cell.png",
                                                     "gates_effect.csv"}
    table = pd.read_csv(tmp_path / f"results/{CORPUS}/studies/my_new_study/table.csv")
    assert sorted(table["model"].unique()) == ["gru/cell", "mkn"]


def test_missing_run_output_is_a_one_line_error(tmp_path):
    studies = {"s": {"arch": ["lstm"], "n_step": [2, 3], "seed": [1]}}
    keys = write_fake_results(tmp_path, CORPUS, studies, oracle=False)
    (tmp_path / keys[0].run_dir(CORPUS) / "gates.csv").unlink()
    with pytest.raises(LmgridError, match=r"gates.csv: file not found"):
        build.build_all(CORPUS, studies, None, tmp_path)
    write_fake_results(tmp_path, CORPUS, studies, oracle=False)
    log = tmp_path / keys[1].run_dir(CORPUS) / "log.csv"
    log.write_text("epoch,step\n0,1\n")
    with pytest.raises(LmgridError, match=r"log.csv: missing column 'train_loss'"):
        build.build_all(CORPUS, studies, None, tmp_path)


def test_cli_aggregate_reports_bad_studies_json(capsys):
    from lmgrid.cli import main

    assert main(["aggregate", "--corpus", "x", "--studies", "{not json"]) == 2
    assert "--studies: not valid JSON" in capsys.readouterr().err


def test_mlflow_live_needs_a_server():
    layout.check_mlflow({"tracking_uri": "http://127.0.0.1:5000", "live": True})
    with pytest.raises(LmgridError, match="mlflow.live"):
        layout.check_mlflow({"tracking_uri": "sqlite:///results/mlflow.db", "live": True})
    with pytest.raises(LmgridError, match="mlflow.tracking_uri"):
        layout.check_mlflow({"tracking_uri": "./mlruns"})


def test_default_config_studies_cover_the_issue():
    from lmgrid.config import check, load_yaml
    from conftest import REPO

    config = load_yaml(REPO / "config.yaml")
    check(config, REPO / "workflow/schemas/config.schema.yaml")
    s = config["studies"]
    assert {"context", "depth", "gates", "lstm_impls", "stream"} <= set(s)
    assert len(s["gates"]["seed"]) >= 3 and {"lstm", "gru"} <= set(s["gates"]["arch"])
    assert np.all([a in s["context"]["arch"] for a in ("kn", "mkn", "ffnn", "rnn", "lstm", "gru", "transformer")])


def test_live_logger_settings_for_training_jobs():
    from lmgrid.runkey import RunKey

    key = RunKey("lstm", "cell", 5, 2, "window", 1)
    assert layout.live_logger_kwargs({"tracking_uri": "sqlite:///results/mlflow.db", "live": False}, "c", key) is None
    kw = layout.live_logger_kwargs({"tracking_uri": "http://127.0.0.1:5000", "live": True}, "c", key)
    assert kw["tracking_uri"] == "http://127.0.0.1:5000" and kw["experiment_name"] == "c-live"
    assert kw["tags"]["lmgrid.run_key"] == key.run_dir("c")


def test_a_study_name_must_be_a_folder_name():
    from lmgrid.config import check_schema, load_yaml
    from conftest import REPO

    config = load_yaml(REPO / "config.yaml")
    config["studies"] = {"my study/1": {"arch": ["kn"], "n_step": [2]}}
    with pytest.raises(LmgridError, match=r"studies: 'my study/1' does not match"):
        check_schema(config, REPO / "workflow/schemas/config.schema.yaml")


def test_html_tables_are_the_same_from_run_to_run(built):
    """pandas Styler draws a random table id unless given one: the pages must not change between identical runs."""
    root, _ = built
    page = root / f"results/{CORPUS}/studies/context/table.html"
    first = page.read_text()
    summary = tables.summarise(collect.load_study(expand_study(STUDIES["context"]), CORPUS, root)["runs"])
    assert tables.to_html(tables.pivot(summary), "c", "test_ppl") == tables.to_html(tables.pivot(summary), "c", "test_ppl")
    assert 'id="T_test_ppl"' in first and 'id="T_valid_ppl"' in first
