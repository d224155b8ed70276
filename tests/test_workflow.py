"""End to end: the Snakemake DAG on a tiny config in a temporary directory."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# The shared grid and its helpers (tests/tinygrid.py)
from tinygrid import GRID, TINY, planned_jobs, snakemake, write_config

pytestmark = pytest.mark.full  # every test here runs Snakemake (tests/tiers.py)


@pytest.fixture
def finished(tiny_pipeline):
    """The session's finished tiny grid (conftest.py): read it, or change only a copy."""
    return tiny_pipeline


def test_run_produces_the_summary(finished):
    res = finished / "results" / "tiny"
    for f in ("corpus/train.txt", "corpus/corpus_stats.json", "vocab.json", "vocab_report.json", "oracle.json",
              "summary.csv", "summary.md"):
        assert (res / f).is_file(), f
    import pandas as pd

    table = pd.read_csv(res / "summary.csv")
    oracle = json.loads((res / "oracle.json").read_text())
    row = table[table.model == "oracle"].iloc[0]
    assert row.test_ppl == pytest.approx(oracle["test"]["ppl"], rel=1e-4)
    stats = json.loads((res / "corpus" / "corpus_stats.json").read_text())["splits"]
    assert row.test_tokens == stats["test"]["tokens"] + stats["test"]["sentences"]
    assert stats["train"]["sentences"] == 400
    assert "oracle" in (res / "summary.md").read_text()
    assert all((res / "logs" / f"{r}.log").exists() for r in ("synth", "corpus", "vocab", "oracle", "summary"))


def test_second_run_does_nothing(finished, repo):
    assert planned_jobs(snakemake(finished, repo, "-n")) == {}


def test_changing_a_value_reruns_only_its_dependents(finished, repo):
    jobs = planned_jobs(snakemake(finished, repo, "-n", "--config", "set=vocab.min_count=2"))
    assert "vocab" in jobs and "summary" in jobs
    assert "synth" not in jobs and "corpus" not in jobs  # upstream of the vocabulary: untouched


def test_a_cut_at_its_neutral_value_reruns_nothing(finished, repo):
    """corpus.max_sentences stated at its neutral value over a finished grid: nothing to do (lmgrid.orchestration.config drops it,
    and the corpus rule's options name only the splits a cut applies to).  Kills `--max-sentences SPLIT=0` for every
    split in the corpus options, and a neutral value kept in the config (mlflow_sync's data settings would change).
    Control, run here: a corpus setting that does change (lowercase) plans the corpus stage again, so "nothing to
    do" is not a dry run blind to changed params."""
    for neutral in ("{}", "{train: 0, valid: 0, test: 0}"):
        r = snakemake(finished, repo, "-n", "--config", f"set=corpus.max_sentences={neutral}")
        assert r.returncode == 0, r.stderr[-2000:]
        assert planned_jobs(r) == {}, (neutral, planned_jobs(r))
    assert "corpus" in planned_jobs(snakemake(finished, repo, "-n", "--config", "set=corpus.lowercase=true"))


def test_the_corpus_command_without_a_cut_is_the_one_it_always_was(tmp_path, repo):
    """The corpus job's command (its params.options inside) for a text corpus, as a dry run prints it: without
    corpus.max_sentences, and with it at 0, exactly the command of the code before the key existed (its params are
    what a grid finished then recorded: any change would rerun the corpus stage and everything after it); with a cut,
    that command plus the splits cut.  Kills `--max-sentences SPLIT=0` emitted for every split, and a neutral value
    kept (lmgrid.orchestration.config.drop_neutral_cut).  Control, run here: a real cut changes the command."""
    (tmp_path / "all.txt").write_text("w1 x\nw2 y\n" * 30)
    write_config(tmp_path, {"corpus": {"name": "t", "kind": "text", "text": {"path": "all.txt"}},
                            "studies": {"s": {"arch": ["kn"], "n_step": [2]}}})

    def command(*config):
        r = snakemake(tmp_path, repo, "-n", "-p", "results/t/corpus/corpus_stats.json", *config)
        assert r.returncode == 0, r.stderr[-2000:]
        return re.findall(r"^Shell command: (lmgrid corpus .*)$", r.stdout + r.stderr, re.M)

    before = ("lmgrid corpus --kind text --input text=all.txt --out-dir results/t/corpus --max-len 0 --ratios 0.8 0.1 "
              "0.1 --seed 1 > results/t/logs/corpus.log 2>&1")
    assert command() == [before]
    assert command("--config", "set=corpus.max_sentences={train: 0, valid: 0, test: 0}") == [before]
    assert command("--config", "set=corpus.max_sentences={train: 5, test: 0}") == [
        before.replace(" > ", " --max-sentences train=5 > ")]


def test_bad_config_stops_before_any_job(tmp_path, repo):
    cfg = json.loads(json.dumps(TINY))
    cfg["studies"]["context"]["n_step"] = [0]
    write_config(tmp_path, cfg)
    r = snakemake(tmp_path, repo)
    assert r.returncode != 0
    errors = [l for l in r.stderr.splitlines() if l.startswith("lmgrid: error:")]
    assert errors == [f"lmgrid: error: config.yaml: studies.context.n_step[0]: 0 is less than the minimum of 1"]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "results").exists()


def test_dry_run_lists_the_default_dag(repo):
    r = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-n", "--cores", "1"],
                       cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "summary" in planned_jobs(r) or planned_jobs(r) == {}


def test_the_terminal_shows_a_line_per_job_the_results_and_the_headline(finished, repo):
    """The run's terminal (profiles/default): each job's one-line message, each n-gram run's result line, the
    progress, no `reason:` lines and no job blocks; it ends with each model's best cell.  Control, run here: the
    same jobs with VERBOSE=1 (LMGRID_VERBOSE=1, --quiet host), as a dry run, show Snakemake's full blocks with their
    reasons, which the default must not; the job-count bound holds by construction of the compact lines and fails
    as soon as a job prints a block (input, output, reason, resources: 4 lines or more a job)."""
    out = (finished / "terminal.txt").read_text()
    lines = out.splitlines()
    assert re.search(r"^Job \d+: tiny: vocabulary$", out, re.M), out[-3000:]
    assert re.search(r"mkn n3 l1 window s0: valid PPL [\d.]+, test PPL [\d.]+", out)
    assert re.search(r"^(\d+) of \1 steps \(100%\) done$", out, re.M)
    headline = out[out.index("lmgrid: each model's best cell"):]
    assert re.search(r"^Modified Kneser-Ney +n = [23] ", headline, re.M) and re.search(r"^Oracle ", headline, re.M)
    blocks = [line for line in lines if re.match(r"\s+(reason|input|output|wildcards): ", line)]
    assert blocks == [], blocks[:5]
    # A line per job, bounded by the job count (not by a fixed total, which grew with every rule the default DAG
    # gained): a job shows two timestamps, its message, its finish and the progress; each scheduling batch (one job
    # or more) adds a blank line, "Select jobs to execute..." and "Execute n jobs...", so at most 8 lines a job.
    jobs = int(re.search(r"^total\s+(\d+)$", out, re.M).group(1))
    body = lines[lines.index("Select jobs to execute..."):lines.index(f"{jobs} of {jobs} steps (100%) done") + 1]
    assert len(body) <= 8 * jobs, (len(body), jobs)
    verbose = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d",
                              str(finished), "-n", "--forceall", "--quiet", "host"], capture_output=True, text=True,
                             env={**os.environ, "LMGRID_VERBOSE": "1"}, timeout=300)
    assert re.search(r"^\s+reason: ", verbose.stdout + verbose.stderr, re.M), verbose.stderr[-2000:]


def test_make_dry_fits_a_screenful(repo):
    """`make dry` on the default config (every job to run, forced so that results/ left by a `make run` here do
    not matter) says what would run and why in under 60 lines: jobs per
    rule and the reasons by rule.  Control, run here: the same dry run without `--quiet rules` prints a block per
    job, hundreds of lines."""
    venv = Path(sys.executable).parent.parent
    shown = subprocess.run(["make", "-n", "dry", f"VENV={venv}"], cwd=repo, capture_output=True, text=True)
    # make dry runs the config's scales first (lmgrid scales-run: none in config.yaml, so it prints nothing), then the
    # config's own dry run: the line measured here.
    scales, command = [line for line in shown.stdout.splitlines() if "--dry-run" in line]
    assert "scales-run" in scales and "scales-run" not in command
    # --forceall: every job to run, as on a fresh clone, even where `make run` has already filled results/ here
    # (then a plain dry run has nothing to do and prints no job stats).
    command += " --forceall"
    quiet = subprocess.run(scales, shell=True, cwd=repo, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and quiet.stdout + quiet.stderr == "", quiet.stderr
    r = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True, timeout=300)
    out = (r.stdout + r.stderr).splitlines()
    assert r.returncode == 0 and len(out) < 60, "\n".join(out[-40:])
    assert "Job stats:" in out and "Reasons:" in out
    full = subprocess.run(command.replace("--quiet rules host", "--quiet host"), shell=True, cwd=repo,
                          capture_output=True, text=True, timeout=300)
    assert len((full.stdout + full.stderr).splitlines()) > 200


def test_building_the_dag_does_not_import_torch():
    """What the Snakefile imports must stay light, so that `snakemake -n` answers in seconds."""
    code = "import sys, lmgrid.orchestration.config, lmgrid.run.key, lmgrid.common.errors; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


def test_a_failed_job_shows_its_error_line_in_the_terminal(tmp_path, repo):
    """The profile next to the Snakefile (profiles/default) is loaded and shows a failed job's log, so the one
    `lmgrid: error:` line reaches the terminal, not only the log file."""
    text = tmp_path / "bad.txt"
    text.write_bytes(b"a good line\nanother good line\ncaf\xe9 au lait\n" * 5)
    cfg = {"corpus": {"name": "bad", "kind": "text", "text": {"path": str(text)}}, "vocab": {},
           "studies": {"s": {"arch": ["kn"], "n_step": [2]}}}
    write_config(tmp_path, cfg)
    r = snakemake(tmp_path, repo)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    errors = [line.strip() for line in out.splitlines() if "lmgrid: error:" in line]
    assert errors and "bad.txt" in errors[0] and "not valid UTF-8 (byte 0xe9" in errors[0], out[-3000:]


def test_malformed_config_yaml_is_one_line(tmp_path, repo):
    (tmp_path / "config.yaml").write_text("corpus: {name: x\n")
    r = snakemake(tmp_path, repo, "-n")
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("lmgrid: error:")]
    assert errors == ["lmgrid: error: config.yaml: not valid YAML (while parsing a flow mapping)"], r.stderr[-2000:]


def test_typed_overrides_through_snakemake(tmp_path, repo):
    """--config train='{...}' arrives typed; --config set=... takes dotted keys; a bad one is one line naming --config."""
    write_config(tmp_path, TINY)
    r = snakemake(tmp_path, repo, "-n", "--config", "train={epochs: 5, lr: 0.02}", "set=train.per_arch.gru.lr=0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    r = snakemake(tmp_path, repo, "-n", "--config", "train={per_arch: {transformer: {lrr: 0.1}}}")
    errors = [line for line in r.stderr.splitlines() if line.startswith("lmgrid: error:")]
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert errors == ["lmgrid: error: --config: train.per_arch.transformer.lrr: unknown key (did you mean 'lr'?)"]


# ---- the HTML report: rebuilt by every successful run, never older than the results, sound in a browser --------

def test_a_run_rebuilds_the_report_after_its_results(finished):
    report = finished / "results" / "report.html"
    assert report.is_file()
    results = [p for p in (finished / "results" / "tiny").rglob("*") if p.is_file() and "logs" not in p.parts]
    assert report.stat().st_mtime >= max(p.stat().st_mtime for p in results)
    page = report.read_text(encoding="utf-8")
    assert page.index('id="summary-table"') < page.index('href="report_workflow.html"')  # results first, then
    html = (finished / "results" / "report_workflow.html").read_text(encoding="utf-8")  # Snakemake's report
    assert '"results/tiny/summary.html"' in html  # the summary table, category Summary
    assert "<li><strong>ctx</strong>:" in html  # workflow.rst's study list is a list ...
    assert "<p>The summary table (category <em>Summary</em>)" in html  # ... closed before the next paragraph


def test_a_run_of_some_targets_says_the_report_waits_for_a_full_run(tmp_path, repo):
    """`snakemake <one target>` ends with one plain line, not an error about files marked for the report.

    kills: onsuccess building the report after a run that made only some results."""
    write_config(tmp_path, TINY)
    r = snakemake(tmp_path, repo, "results/tiny/vocab_report.json")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("lmgrid:")]
    assert len(lines) == 1 and lines[0].startswith("lmgrid: results/report.html waits for a full run: "), lines
    assert not (tmp_path / "results" / "report.html").exists()


def test_a_failed_run_removes_a_stale_report(tmp_path, monkeypatch):
    from lmgrid.analysis.report import drop_if_stale

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "c").mkdir(parents=True)
    report = tmp_path / "results" / "report.html"
    report.write_text("<html></html>")
    (tmp_path / "results" / "c" / "summary.csv").write_text("x\n")
    os.utime(report, (1, 1))
    assert drop_if_stale(Path("results/c")) and not report.exists()


def _browser_or_skip():
    import importlib.util
    import os

    from lmgrid.analysis.report import chromium

    missing = ("playwright is not installed" if importlib.util.find_spec("playwright") is None
               else "no Chromium (apt-get install chromium)" if chromium() is None else None)
    if missing:
        if os.environ.get("LMGRID_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser check required (LMGRID_REQUIRE_BROWSER=1) but {missing}")
        pytest.skip(missing)


def test_the_report_opens_in_a_real_browser(finished, tmp_path):
    """Headless Chromium: no console or page error while the results page and Snakemake's report it links load and
    each results entry opens; every embedded image decodes.  A copy of the results page with a broken image and a
    console error must fail the same check."""
    _browser_or_skip()
    from lmgrid.analysis.report import check

    n, problems = check(finished / "results" / "report.html")
    assert n >= 3 and problems == []  # summary, table, figure
    html = (finished / "results" / "report.html").read_text(encoding="utf-8")
    broken = re.sub(r"(data:image/png;base64,)[A-Za-z0-9+/]{40}", r"\1" + "A" * 40, html, count=1)
    end = broken.rfind("</body>")
    (tmp_path / "broken.html").write_text(broken[:end] + '<script>console.error("boom")</script>' + broken[end:])
    _, problems = check(tmp_path / "broken.html")
    assert any("image does not decode" in p for p in problems) and any("console error: boom" in p for p in problems)


# ---- embeddings (lmgrid.embed): one job per corpus after training -----------------------------------------------

def test_embeddings_job_writes_vectors_scores_and_study_outputs(finished, repo):
    """On the tiny synthetic grid the embeddings job writes every neural cell's vectors, the scores, and each
    study's table, neighbours and map; the table says the benchmarks do not cover the made-up words.  A changed
    embeddings setting reruns that job alone.  kills: a setting missing from the rule's params (the change would
    rerun nothing)."""
    import pandas as pd

    from lmgrid.run.key import all_runs

    res = finished / "results" / "tiny"
    table = pd.read_csv(res / "embeddings" / "embeddings.csv")
    neural = [k for k in all_runs(GRID["studies"]) if not k.is_ngram]
    assert len(neural) == 4
    expected = {"Feed-forward n3 l1 window s1", "Elman RNN n3 l1 window s1", "GRU n3 l1 window s1",
                "Elman RNN n0 l1 stream s1"}
    rows = table["model"].value_counts().to_dict()
    assert rows == {**{m: 2 for m in expected}, "PPMI-SVD d8": 1, "random d8": 1}, rows  # input and output vectors
    for k in neural:
        cell = res / "embeddings" / "vectors" / k.arch / k.impl / Path(k.run_dir("tiny")).name
        assert {p.name for p in cell.iterdir()} == {"input.w2v.txt", "output.w2v.txt"}, cell
    for name in GRID["studies"]:
        study = res / "studies" / name
        if name == "ctx":  # n-grams only: no vectors
            continue
        for f in ("embeddings.csv", "embeddings.md", "embeddings.html", "embeddings_neighbours.md",
                  "embeddings_neighbours.html", "embeddings_map.png", "embeddings_map.pdf"):
            assert (study / f).is_file(), (name, f)
        # made-up words: no benchmark covered, so one line and no table of n/a
        md = (study / "embeddings.md").read_text()
        assert "the vocabulary covers none of the benchmarks" in md and "n/a" not in md and "|" not in md, md
    assert (res / "logs" / "embeddings.log").is_file()
    target = "results/tiny/embeddings/embeddings.csv"
    changed = ("--config", "set=embeddings.ppmi_window=2")
    assert planned_jobs(snakemake(finished, repo, "-n", target, *changed)) == {"embeddings": 1}
    # The mutant: Snakemake blind to params (only file times) plans nothing, so the rerun above came from them.
    assert planned_jobs(snakemake(finished, repo, "-n", target, *changed, "--rerun-triggers", "mtime")) == {}
