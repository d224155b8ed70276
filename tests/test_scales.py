"""Scales (lmgrid.orchestration.scales): a config's `scales:` run by the same `make run`, and their gate answers side by side."""
from __future__ import annotations

import shutil
import sys

import pandas as pd
import pytest
import yaml

from lmgrid.orchestration.config import load_config
from lmgrid.common.errors import LmgridError
from lmgrid.orchestration.scales import compare, run_scales, scales_of, write_comparison


@pytest.fixture
def work(tmp_path, repo, monkeypatch):
    """A folder with config.yaml (the synthetic corpus), main.yaml naming scale `wide` (presets/wide.yaml, beside
    it), and later.yaml applied after main.yaml."""
    shutil.copy(repo / "config.yaml", tmp_path / "config.yaml")
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "main.yaml").write_text(yaml.safe_dump(
        {"scales": {"wide": "wide.yaml"}, "train": {"hidden_dim": 16}}))
    (tmp_path / "presets" / "wide.yaml").write_text(yaml.safe_dump({"train": {"hidden_dim": 32, "epochs": 3}}))
    (tmp_path / "later.yaml").write_text(yaml.safe_dump({"train": {"epochs": 1}}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_scale_is_the_config_with_its_file_swapped_then_the_later_files_and_set(work):
    """Kills "a scale's config is its file alone" (later.yaml and SET dropped: epochs 3, seeds [1]) and "the scale's
    file merged over the declaring file" (hidden_dim would still be the main file's where the scale says nothing;
    here it says 32, so the check is on the corpus name and on the main file's own key `scales` gone)."""
    (scale,) = scales_of(["presets/main.yaml", "later.yaml"], "seeds=[2]")
    assert scale.label == "wide" and scale.corpus == "synth-wide"
    assert scale.configfiles == ("presets/wide.yaml", "later.yaml")
    cfg = scale.config
    assert cfg["train"]["hidden_dim"] == 32 and cfg["train"]["epochs"] == 1
    assert all(study["seed"] == [2] for study in cfg["studies"].values())
    assert cfg["corpus"]["name"] == "synth-wide" and cfg["scales"] == {}
    # Negative control: the scale's file alone is another config (the mutant above), caught by these checks.
    alone = load_config(["presets/wide.yaml"])
    assert alone["train"]["epochs"] == 3 and alone["corpus"]["name"] == "synth"
    # The declaring config itself is unchanged.
    assert load_config(["presets/main.yaml"])["train"]["hidden_dim"] == 16


def test_no_scales_no_runs(work):
    assert scales_of(["later.yaml"]) == [] and scales_of([]) == []


@pytest.mark.parametrize("scales, says", [
    ({"wide": "missing.yaml"}, "scales.wide: missing.yaml: file not found"),
    ({"wide": "nested.yaml"}, "scales.wide: nested.yaml declares scales of its own"),
    ({"wide": "bad.yaml"}, "scales.wide (bad.yaml): "),
])
def test_a_bad_scale_is_one_line_naming_it(work, scales, says):
    (work / "presets" / "nested.yaml").write_text(yaml.safe_dump({"scales": {"x": "wide.yaml"}}))
    (work / "presets" / "bad.yaml").write_text(yaml.safe_dump({"train": {"hidden_dim": "wide"}}))
    (work / "presets" / "main.yaml").write_text(yaml.safe_dump({"scales": scales}))
    with pytest.raises(LmgridError) as err:
        scales_of(["presets/main.yaml"])
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_label_that_is_no_corpus_suffix_is_refused(work):
    (work / "presets" / "main.yaml").write_text(yaml.safe_dump({"scales": {"Wide/1": "wide.yaml"}}))
    with pytest.raises(LmgridError, match="scales"):
        scales_of(["presets/main.yaml"])


def test_scales_run_one_after_another_and_stop_at_the_first_failure(work):
    """Kills "a failed scale ignored" (the next scale would run, and the config's own run after it) and "the
    scale's config not passed" (the recorded arguments would lack the swapped files or the corpus name)."""
    (work / "presets" / "main.yaml").write_text(yaml.safe_dump({"scales": {"a": "wide.yaml", "b": "wide.yaml"}}))
    log = work / "calls.txt"
    record = [sys.executable, "-c", f"import sys; open({str(log)!r}, 'a').write(repr(sys.argv[1:]) + '\\n')"]
    assert run_scales(record, ["presets/main.yaml"], "") == 0
    calls = [eval(line) for line in log.read_text().splitlines()]
    assert calls == [["--configfile", "presets/wide.yaml", "--config", f"set=corpus.name=synth-{x} scales={{}}"]
                     for x in ("a", "b")]
    log.unlink()
    fail = [sys.executable, "-c", f"import sys; open({str(log)!r}, 'a').write('x\\n'); sys.exit(3)"]
    assert run_scales(fail, ["presets/main.yaml"], "") == 3
    assert log.read_text() == "x\n"  # scale b never started


def _effects(rows: list[tuple]) -> pd.DataFrame:
    cols = ["model", "layers", "layer", "gate", "seeds", "slope_per_nstep", "slope_ci_low", "slope_ci_high",
            "slope_df", "slope_p_holm", "direction", "matched_positions", "matched_slope", "matched_ci_low",
            "matched_ci_high", "matched_df", "matched_p_holm", "at_matched_positions"]
    return pd.DataFrame([(m, 1, 0, g, seeds, s, s - .01, s + .01, seeds - 1, .01, d, "0 1", s / 2, s / 2 - .01,
                          s / 2 + .01, seeds - 1, .02, md) for m, g, seeds, s, d, md in rows], columns=cols)


def test_the_comparison_sets_each_scales_answer_side_by_side(tmp_path):
    """Kills "the first study of a scale kept" (the 3-seed study, which says 'falls', would be compared, and the
    pooled answers would disagree) and "agreement from the slope's sign" (the matched verdicts 'no clear change'
    and 'rises' have slopes of one sign, yet disagree)."""
    small = tmp_path / "small.csv"
    _effects([("lstm", "f", 3, .03, "rises", "no clear change"), ("lstm", "i", 3, .02, "rises", "rises"),
              ("gru", "z", 3, .01, "rises", "rises")]).to_csv(small, index=False)
    small5 = tmp_path / "small5.csv"
    _effects([("lstm", "f", 3, -.02, "falls", "falls")]).to_csv(tmp_path / "small_first.csv", index=False)
    _effects([("lstm", "f", 5, .03, "rises", "no clear change")]).to_csv(small5, index=False)
    full = tmp_path / "full.csv"
    _effects([("lstm", "f", 3, .04, "rises", "rises"), ("lstm", "i", 3, .01, "rises", "rises")]).to_csv(
        full, index=False)
    rows = compare([("ptb", "first", str(tmp_path / "small_first.csv")), ("ptb", "gates", str(small)),
                    ("ptb", "five", str(small5)), ("ptb-full", "gates_full", str(full))])
    f = rows[(rows["model"] == "lstm") & (rows["gate"] == "f")].set_index("scale")
    assert f.loc["ptb", "study"] == "five" and f.loc["ptb", "seeds"] == 5
    assert set(f["agree_pooled"]) == {"yes"} and set(f["agree_matched"]) == {"no"}
    i = rows[(rows["model"] == "lstm") & (rows["gate"] == "i")]
    assert set(i["agree_pooled"]) == {"yes"} and set(i["agree_matched"]) == {"yes"}
    assert set(rows.loc[rows["model"] == "gru", "agree_pooled"]) == {"one scale"}  # one scale only
    # Negative control: with the 3-seed study kept for ptb the pooled answers differ.
    first = compare([("ptb", "first", str(tmp_path / "small_first.csv")), ("ptb-full", "gates_full", str(full))])
    assert set(first.loc[(first["model"] == "lstm") & (first["gate"] == "f"), "agree_pooled"]) == {"no"}
    stem = tmp_path / "gates"
    write_comparison(rows, [("ptb", "the prefix"), ("ptb-full", "the whole set")],
                     f"{stem}.csv", f"{stem}.md", f"{stem}.html")
    md = (tmp_path / "gates.md").read_text()
    assert "ptb-full: the whole set" in md and "(t, df 4)" in md and md.count("| lstm ") == 4
    assert len(pd.read_csv(f"{stem}.csv")) == len(rows) == 5


@pytest.mark.full
def test_status_and_plan_show_each_scale_before_the_config(work, repo, monkeypatch, capsys):
    """Kills "make status/plan show the config alone" (a scale's cells, which `make run` trains first, unlisted):
    the scale's table comes first, with its own files and SET."""
    from lmgrid.orchestration import progress

    calls = []
    monkeypatch.setattr(progress, "_one", lambda command, files, assignments, cores, snakefile=None: calls.append((files, assignments)))
    progress.main("status", ["presets/main.yaml"], "", 2, str(repo / "Snakefile"))
    assert calls == [(["presets/wide.yaml"], "corpus.name=synth-wide scales={}"), (["presets/main.yaml"], "")]
    out = capsys.readouterr().out
    assert out.index("## scale 'wide' (results/synth-wide/") < out.index("## this config (results/synth/)")
    calls.clear()
    progress.main("plan", ["later.yaml"], "", 2, str(repo / "Snakefile"))  # Negative control: no scales, one table, no headings.
    assert calls == [(["later.yaml"], "")] and "##" not in capsys.readouterr().out


def _trend_csv(path, slope: float, noise: float, offset: float = 0.0, rng_seed: int = 0) -> str:
    """gates_effect.csv of a planted LSTM input gate over 5 seeds at n 2, 5, 9: each run's pooled mean is
    0.3 + offset + slope * n + noise, through the real effects.gate_family."""
    import numpy as np

    from lmgrid.analysis import effects

    rng = np.random.default_rng(rng_seed)
    rows = [{"model": "lstm", "layers": 1, "regime": "window", "layer": 0, "gate": "i", "scope": "all", "index": -1,
             "seed": s, "n_step": n, "mean": 0.3 + offset + slope * n + noise * rng.standard_normal(), "count": 1000}
            for s in range(1, 6) for n in (2, 5, 9)]
    effects.gate_family(pd.DataFrame(rows))["trends"].to_csv(path, index=False)
    return str(path)


def test_the_scale_by_n_interaction_is_tested_not_read_from_verdicts(tmp_path, monkeypatch):
    """The scale x n interaction, tested directly (scales.interactions): a slope twice as steep at the second scale
    is an interaction although both scales say 'rises' (their verdict words agree); a parallel shift (the same slope,
    0.1 higher, and noisy enough that its own verdict is 'no clear trend') is none although the verdict words
    differ.  The Welch difference is checked by hand from the two scales' per-seed slope summaries.  Mutation killed,
    run here: an interaction read from the verdict words (interactions replaced by 'differs' where they differ)."""
    from scipy import stats

    from lmgrid.orchestration import scales

    base = _trend_csv(tmp_path / "a.csv", 0.010, 0.001, rng_seed=1)
    steeper = _trend_csv(tmp_path / "b.csv", 0.020, 0.001, rng_seed=2)
    shifted = _trend_csv(tmp_path / "c.csv", 0.010, 0.06, offset=0.1, rng_seed=3)

    def answer(second):
        rows = compare([("ptb", "gates", base), ("ptb-full", "gates", second)]).set_index("scale")
        return rows.loc["ptb-full"], rows

    inter, rows = answer(steeper)
    assert rows.loc["ptb", "direction"] == inter["direction"] == "rises" and inter["agree_pooled"] == "yes"
    assert inter["interaction_pooled"] == "slope on n higher at ptb-full than at ptb"
    a, b = rows.loc["ptb"], inter
    se = [(r["slope_ci_high"] - r["slope_per_nstep"]) / stats.t.ppf(0.975, r["slope_df"]) for r in (a, b)]
    t = stats.ttest_ind_from_stats(b["slope_per_nstep"], se[1] * 5 ** 0.5, 5, a["slope_per_nstep"], se[0] * 5 ** 0.5,
                                   5, equal_var=False)
    assert inter["pooled_diff"] == pytest.approx(b["slope_per_nstep"] - a["slope_per_nstep"])
    assert inter["pooled_diff_p"] == pytest.approx(t.pvalue, rel=1e-6)
    assert inter["pooled_diff_sim_low"] > 0  # the simultaneous interval beside the claim excludes 0
    parallel, _ = answer(shifted)
    assert parallel["direction"] == "no clear trend" and parallel["agree_pooled"] == "no"
    assert parallel["interaction_pooled"] == "no clear difference"
    assert parallel["pooled_diff_sim_low"] <= 0 <= parallel["pooled_diff_sim_high"]

    def by_words(rows, keys):  # the mutant: the verdict words compared
        rows = rows.copy()
        rows["interaction_pooled"] = rows.groupby(keys)["direction"].transform(
            lambda v: "no clear difference" if v.nunique() == 1 else "differs")
        return rows

    monkeypatch.setattr(scales, "interactions", by_words)
    assert answer(steeper)[0]["interaction_pooled"] == "no clear difference"  # the mutant misses the interaction
    assert answer(shifted)[0]["interaction_pooled"] == "differs"  # and sees one in a parallel shift
