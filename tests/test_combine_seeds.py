"""Combinations over seeds and their paired bootstraps (issue 44, item 4): lmgrid.testtime.combine.select runs a
combination once per seed (component i from seed s), combine.table reports mean ± std with a t interval and labels
the valid column in-sample, combine.compare bootstraps test sentences with one resample for both members, and the
reference table's combination rows use the runs over seeds.  Score files are constructed here (no training)."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lmgrid.cli import main
from lmgrid.common.fileio import read_json
from lmgrid.testtime.combine import compare, scorefile, select
from lmgrid.testtime.combine import table as combine_table

SEEDS = [4, 5, 6]
STUDIES = {"ngram": {"arch": ["mkn"], "n_step": [3]},
           "lstm": {"arch": ["lstm"], "n_step": [5], "regime": ["stream"], "seed": SEEDS}}
CONFIG = {"studies": STUDIES,
          "combine": {"duo": {"components": [{"arch": "mkn"}, {"arch": "lstm"}]},
                      "pinned": {"components": [{"arch": "mkn"}, {"arch": "lstm", "seed": 5}]}}}
# Four sentences of 3, 2, 4 and 1 targets (words and </s>): the test split's boundaries.
LENGTHS = np.array([3, 2, 4, 1])
IDS = np.arange(int(LENGTHS.sum())) % 7


def _write_cell(key, rng) -> None:
    """Valid and test score files of one cell, its log-probs drawn from its own generator."""
    folder = select.score_dir("c", key, "base")
    for split, n in (("valid", 40), ("test", IDS.size)):
        lp = np.log(rng.uniform(0.02, 0.6, n)).astype(np.float32)
        ppl = math.exp(-float(np.sum(lp, dtype=np.float64)) / n)
        scorefile.write(folder, split, lp, np.arange(n) % 7 if split == "valid" else IDS, ppl, key.run_dir("c"),
                        "base")


def _run_all(tmp_path) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Every run of CONFIG's combinations through `lmgrid combine` (as the combine rule calls it), then `lmgrid
    combinations`: (per combination, per run, result paths)."""
    resolved, _ = select.resolve(CONFIG)
    paths = []
    for run, (name, seed, comps) in select.run_folders(resolved).items():
        out = tmp_path / "combine" / run
        args = ["combine", "--name", name, "--run", run, "--out-dir", str(out)]
        args += [a for key, mode in comps for a in ("--component", f"{select.label(key, mode)}="
                                                                   f"{select.score_dir('c', key, mode)}")]
        args += ["--seed", str(seed)] if seed is not None else []
        assert main(args) in (0, None)
        paths.append(str(out / "result.json"))
    files = [str(tmp_path / f) for f in ("all.csv", "all.md", "all.html", "runs.csv")]
    assert main(["combinations", "--results", *paths, "--csv", files[0], "--md", files[1], "--html", files[2],
                 "--by-seed-csv", files[3]]) in (0, None)
    return pd.read_csv(files[0]), pd.read_csv(files[3]), paths


@pytest.fixture
def cells(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for i, key in enumerate(select.all_runs(STUDIES)):
        _write_cell(key, np.random.default_rng(100 + i))
    return tmp_path


def _seed_rows_agree(tmp_path) -> bool:
    """Each seed's row of `duo` is the mixture of the 3-gram and *that seed's* LSTM (its own files, combined here
    directly), and the combination's row is the hand mean, sample std and t interval of those rows."""
    from lmgrid.testtime.combine.mixture import combine

    agg, runs, _ = _run_all(tmp_path)
    duo = runs[runs["combination"] == "duo"]
    if sorted(duo["seed"]) != SEEDS:
        return False
    keys = {k.seed: k for k in select.all_runs(STUDIES)}
    for seed, test_ppl in zip(duo["seed"], duo["test_ppl"]):
        dirs = [select.score_dir("c", keys[0], "base"), select.score_dir("c", keys[seed], "base")]
        m = combine(["kn", "lstm"], [scorefile.read(d, "valid") for d in dirs],
                    [scorefile.read(d, "test") for d in dirs])
        if test_ppl != pytest.approx(m.test_ppl, rel=1e-6):
            return False
    values = list(duo["test_ppl"])
    mean, sd = statistics.mean(values), statistics.stdev(values)
    half = stats.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
    row = agg[agg["combination"] == "duo"].iloc[0]
    return (row["seeds"] == 3 and row["test_ppl_mean"] == pytest.approx(mean, rel=1e-6)
            and row["test_ppl_std"] == pytest.approx(sd, rel=1e-5)
            and (row["ci95_low"], row["ci95_high"]) == pytest.approx((mean - half, mean + half), rel=1e-6))


def test_a_combination_runs_once_per_seed_with_that_seeds_components(cells, monkeypatch):
    """`duo` (no seed pinned) gives one row per seed 4, 5, 6, each the mixture of the shared 3-gram with that seed's
    LSTM, and a combination row whose mean, sample std and t interval equal a hand computation over those rows;
    `pinned` (seed: 5) stays one run, in combine/pinned/ as before.  Kills: seed 4's components used for every seed
    (negative control: select.cells_at patched to ignore the run's seed, then the per-seed rows are not their seeds'
    mixtures)."""
    assert _seed_rows_agree(cells)
    resolved, notes = select.resolve(CONFIG)
    assert sorted(resolved["duo"]) == SEEDS and list(resolved["pinned"]) == [None] and notes == []
    assert (cells / "combine" / "duo" / "s5" / "result.json").is_file()
    pinned = read_json(cells / "combine" / "pinned" / "result.json")
    assert pinned["seed"] is None and pinned["run"] == "pinned"
    assert read_json(cells / "combine" / "duo" / "s6" / "result.json")["run"] == "duo/s6"
    _, runs, _ = _run_all(cells)
    assert len(runs[runs["combination"] == "pinned"]) == 1

    real = select.cells_at
    monkeypatch.setattr(select, "cells_at", lambda hits, seed: real(hits, SEEDS[0]))
    assert not _seed_rows_agree(cells)


def test_the_valid_column_is_labelled_in_sample(cells, monkeypatch):
    """combinations.csv names the valid column valid_ppl_in_sample (no bare valid_ppl), the Markdown's header says
    'in-sample' and its caption says why (fitted on valid).  Kills: the old 'valid_ppl' label (negative control:
    SUMMARY_HEADS without the rename, then the Markdown header reads valid_ppl_in_sample, not 'valid PPL
    (in-sample)')."""
    agg, runs, _ = _run_all(cells)
    assert "valid_ppl_in_sample" in agg.columns and "valid_ppl" not in agg.columns
    assert "valid_ppl_in_sample" in runs.columns and "valid_ppl" not in runs.columns
    md = (cells / "all.md").read_text()
    assert "valid PPL (in-sample)" in md.splitlines()[2] and "fitted by EM on valid" in md.split("\n\n")[0]
    monkeypatch.setattr(combine_table, "SUMMARY_HEADS", {"best_component": "best component (chosen on valid)"})
    _run_all(cells)
    assert "valid PPL (in-sample)" not in (cells / "all.md").read_text()


def _member(lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return lp.astype(np.float64), lp.astype(np.float64)


def test_a_combination_against_itself_is_exactly_zero(monkeypatch):
    """The two members of a pair are scored on the same resampled sentences: a combination against itself gives
    the difference 0 and the interval exactly [0, 0].  Kills: independent resamples for the two members (negative
    control: compare.PAIRED False, then the interval has a width)."""
    lp = np.log(np.random.default_rng(3).uniform(0.01, 0.9, 200))
    lengths = np.array([5, 15, 30, 10, 40, 20, 25, 55])
    assert compare.paired_bootstrap([(lp, lp)], lengths, resamples=500) == (0.0, 0.0, 0.0)
    monkeypatch.setattr(compare, "PAIRED", False)
    _, low, high = compare.paired_bootstrap([(lp, lp)], lengths, resamples=500)
    assert high - low > 0.1


def _pair_results(tmp_path, delta: np.ndarray) -> list[str]:
    """Single-component combinations a (every seed) and b = a's log-probs + delta, as score files and result.json."""
    paths = []
    for seed in (1, 2):
        base = np.random.default_rng(seed).integers(-40, -2, IDS.size) / 8.0  # exact in float32 and float64
        for name, lp in (("a", base), ("b", base + delta)):
            folder = tmp_path / "scores" / f"{name}{seed}"
            lp32 = lp.astype(np.float32)
            ppl = math.exp(-float(np.sum(lp32, dtype=np.float64)) / lp32.size)
            scorefile.write(folder, "valid", lp32, IDS, ppl, f"run/{name}{seed}", "base")
            scorefile.write(folder, "test", lp32, IDS, ppl, f"run/{name}{seed}", "base")
            out = tmp_path / "combine" / name / f"s{seed}"
            assert main(["combine", "--name", name, "--run", f"{name}/s{seed}", "--seed", str(seed), "--component",
                         f"{name}={folder}", "--out-dir", str(out)]) in (0, None)
            paths.append(str(out / "result.json"))
    return paths


def test_the_bootstrap_resamples_sentences_not_tokens(tmp_path, monkeypatch):
    """Constructed score files: b differs from a token by token (+0.5 then -0.5 nats within each sentence) but not
    in any sentence's total, so every resample of whole sentences gives the same PPL to both: the difference and
    its interval are exactly [0, 0], per seed and pooled; shifting one sentence instead gives an interval of width
    > 0 around a non-zero difference, and the pooled difference is the mean of the per-seed ones.  Kills:
    token-level resampling (negative control: compare.sentence_units patched to make each token a unit, then the
    first interval has a width)."""
    sentences = [["w"] * (n - 1) for n in LENGTHS]
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    within = np.zeros(IDS.size)
    for s, n in zip(starts, LENGTHS):
        if n >= 2:
            within[s], within[s + 1] = 0.5, -0.5
    sha = scorefile.tokens_sha256(IDS)
    table = compare.compare([("b", "a")], _pair_results(tmp_path / "w", within), sentences, sha, resamples=400)
    assert list(table["seed"]) == ["1", "2", "pooled"]
    assert (table[["difference", "ci95_low", "ci95_high"]].to_numpy() == 0.0).all()

    one = np.zeros(IDS.size)
    one[starts[2]:starts[2] + LENGTHS[2]] = -0.25  # sentence 3 is worse under b
    shifted = compare.compare([("b", "a")], _pair_results(tmp_path / "s", one), sentences, sha, resamples=400)
    assert (shifted["ci95_high"] - shifted["ci95_low"] > 0).all() and (shifted["difference"] > 0).all()
    pooled = shifted.iloc[-1]
    assert pooled["difference"] == pytest.approx(shifted["difference"][:2].mean(), rel=1e-9)
    assert pooled["ci95_low"] <= pooled["difference"] <= pooled["ci95_high"]

    monkeypatch.setattr(compare, "sentence_units", lambda lp, lengths: (-lp.astype(np.float64), np.ones(lp.size)))
    mutant = compare.compare([("b", "a")], _pair_results(tmp_path / "m", within), sentences, sha, resamples=400)
    assert (mutant["ci95_high"] - mutant["ci95_low"] > 0).all()


def test_compare_with_naming_no_combination_is_one_line():
    """A compare_with that names no combination of the config is a one-line error naming the key and the value; one
    that names a combination gives the pair.  Kills: an unknown compare_with dropped quietly (select.compare_pairs
    without its `other not in combos` check: the pair is then left out with a note, as when a member is left out,
    and no error is raised; run by hand as a temporary edit), and an error that names neither key nor value."""
    cfg = {**CONFIG, "combine": {**CONFIG["combine"], "duo": {**CONFIG["combine"]["duo"], "compare_with": "nope"}}}
    resolved, notes = select.resolve(cfg)
    with pytest.raises(select.LmgridError, match=r"combine\.duo\.compare_with: 'nope'") as err:
        select.compare_pairs(cfg, resolved, notes)
    assert "\n" not in str(err.value)
    good = {**cfg, "combine": {**cfg["combine"], "duo": {**cfg["combine"]["duo"], "compare_with": "pinned"}}}
    assert select.compare_pairs(good, resolved, notes) == [("duo", "pinned")]


def test_a_reference_combination_row_is_the_mean_and_t_interval_over_seeds(cells, monkeypatch):
    """A reference row naming `duo` holds its 3 runs: seeds 3, the mean and sample std of their test PPLs and the
    t interval of the mean, computed by hand here.  Kills: one run standing for the combination (the old
    one-result-per-name reading; negative control: reference._combination_row given only the last run, then seeds
    is 1 and there is no interval)."""
    from lmgrid.analysis import reference

    _, runs, paths = _run_all(cells)
    duo = [p for p in paths if "/duo/" in p]
    values = list(runs[runs["combination"] == "duo"]["test_ppl"])
    mean, sd = statistics.mean(values), statistics.stdev(values)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    rows = [{"model": "KN + LSTM", "published_test_ppl": 9.9, "source": "s", "combine": "duo"}]

    def check() -> bool:
        row = reference.reference_table(rows, [], duo).iloc[0]
        return (row["seeds"] == 3 and row["test_ppl_mean"] == pytest.approx(mean, rel=1e-6)
                and row["test_ppl_std"] == pytest.approx(sd, rel=1e-5)
                and (row["ci95_low"], row["ci95_high"]) == pytest.approx((mean - half, mean + half), rel=1e-6))

    assert check()
    real = reference._combination_row
    monkeypatch.setattr(reference, "_combination_row",
                        lambda row, ref, setting, results, by_dir: real(row, ref, setting, results[-1:], by_dir))
    assert not check()


@pytest.mark.full  # starts Snakemake (a dry run of the tiny grid at two seeds; tests/tiers.py)
def test_the_workflow_plans_one_combine_job_per_seed(tmp_path, repo):
    """A dry run of tests/tinygrid.py's grid at seeds [1, 2]: kn_gru (no seed pinned) is two jobs, combine/kn_gru/s1
    and s2, the s2 job reading gru s2's scores only; `pinned` (gru seed 2) is one job in combine/pinned; the
    combinations job passes the compare_with pair.  Kills: combine.smk planning one run per combination (negative
    control: a copy of the workflow that keeps each combination's first seed only plans kn_gru once)."""
    import re
    import shutil

    from tinygrid import GRID, snakemake, write_config

    cfg = {**GRID, "seeds": [1, 2],
           "combine": {"kn_gru": {"components": [{"arch": "mkn", "n_step": 3}, {"arch": "gru"}]},
                       "pinned": {"components": [{"arch": "mkn", "n_step": 3}, {"arch": "gru", "seed": 2}],
                                  "compare_with": "kn_gru"}}}

    def plan(workflow) -> tuple[dict[str, str], str]:
        work = tmp_path / workflow.name / "work"
        work.mkdir(parents=True)
        write_config(work, cfg)
        r = snakemake(work, workflow, "-n", "-p")
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        out = r.stdout + r.stderr
        shells = re.findall(r"lmgrid combine (.*)$", out, re.M)
        return {re.search(r"--run (\S+)", s).group(1): s for s in shells}, out

    jobs, out = plan(repo)
    assert set(jobs) == {"kn_gru/s1", "kn_gru/s2", "pinned"}, out[-3000:]
    assert "gru/torch/n3_l1_window_s2/" in jobs["kn_gru/s2"] and "_s1/" not in jobs["kn_gru/s2"].replace(
        "mkn/ngram", "")
    assert "--seed 2" in jobs["kn_gru/s2"] and "--seed" not in jobs["pinned"]
    assert "--out-dir results/tiny/combine/kn_gru/s1" in jobs["kn_gru/s1"]
    assert "--pair pinned=kn_gru" in out

    mutant = tmp_path / "mutant"
    mutant.mkdir()
    shutil.copy(repo / "Snakefile", mutant / "Snakefile")
    shutil.copytree(repo / "workflow", mutant / "workflow")
    for extra in ("profiles",):
        if (repo / extra).exists():
            shutil.copytree(repo / extra, mutant / extra)
    rules = mutant / "workflow" / "rules" / "combine.smk"
    own = "    COMBINE_JOBS = CombineJobs(config)\n"
    assert rules.read_text().count(own) == 1
    first_seed_only = ("    import lmgrid.testtime.combine.jobs as _jobs\n"
                       "    _plan = _jobs.run_folders\n"
                       "    _jobs.run_folders = lambda r: _plan({n: dict(list(s.items())[:1])\n"
                       "                                         for n, s in r.items()})\n")
    rules.write_text(rules.read_text().replace(own, first_seed_only + own))
    assert set(plan(mutant)[0]) == {"kn_gru", "pinned"}


def test_eta_reads_a_per_seed_combine_benchmark(tmp_path, monkeypatch):
    """A combination run per seed benchmarks to benchmarks/combine_<name>/s<seed>.tsv: the ETA of another seed's
    job is estimated from it ('like jobs').  Kills: the like-jobs pattern of one file per combination (negative
    control: the old regex, then the estimate falls to the default)."""
    from lmgrid.orchestration import eta

    monkeypatch.chdir(tmp_path)
    bench = tmp_path / "results/c/benchmarks/combine_all/s4.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\tmax_rss\n7.0\t0:00:07\t1\n")
    w = {"corpus": "c", "combo": "all/s5"}
    assert eta.rule_estimate("combine", "c", None, w) == (7.0, "like jobs")
    own = eta._per_job_files
    monkeypatch.setattr(eta, "_per_job_files", lambda rule, wc: (own(rule, wc)[0], r"benchmarks/combine_[^/]+\.tsv$"))
    assert eta.rule_estimate("combine", "c", None, w)[1] != "like jobs"
