"""`lmgrid status` and `lmgrid plan`: pending jobs from Snakemake's dry run; progress.json, logs and benchmark files
for the rest."""
from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmgrid.orchestration.dryrun import Job, Plan
from lmgrid.common.errors import LmgridError
from lmgrid.orchestration.eta import Task, wall_s
from lmgrid.orchestration.progress import format_plan, format_status, grid_status, left
from lmgrid.run.record import RunRecord, SplitScore
from lmgrid.run.key import RunKey, beside_runs

CONFIG = {"corpus": {"name": "c"},
          "studies": {"a": {"arch": ["lstm"], "n_step": [2, 3, 5], "layers": [1], "impl": ["torch"], "seed": [1],
                            "regime": ["window"]},
                      "b": {"arch": ["lstm", "kn"], "n_step": [5], "layers": [1], "impl": ["torch"], "seed": [1],
                            "regime": ["window"]}}}
LSTM = {n: RunKey("lstm", "torch", n, 1, "window", 1) for n in (2, 3, 5)}
KN = RunKey("kn", "ngram", 5, 1, "window", 0)


def _job(key: RunKey, reason: str = "missing output", deps=()) -> Job:
    rule = "ngram" if key.is_ngram else "train_gated"
    wildcards = {"corpus": "c", "arch": key.arch, "impl": key.impl, "n_step": str(key.n_step),
                 "layers": str(key.layers), "regime": key.regime, "seed": str(key.seed)}
    return Job(rule, wildcards, reason, deps=list(deps))


# What the dry run of the fixture's grid says: every cell but the finished one, then the jobs after the cells.
PLAN = Plan([_job(LSTM[3]), _job(LSTM[5], "params changed: lr"), _job(KN)])


def _done(key: RunKey, seconds: float, valid_ppl: float = 30.0, test_ppl: float = 29.0) -> None:
    run = Path(key.run_dir("c"))
    run.mkdir(parents=True, exist_ok=True)
    score = lambda ppl: SplitScore(ppl=ppl, nll_nats=100 * math.log(ppl), tokens=100, oov_tokens=0)  # noqa: E731
    RunRecord(name=key.name, **asdict(key), valid=score(valid_ppl), test=score(test_ppl), params=0,
              extra={"wall_s": seconds}).write(run / "metrics.json")
    bench = Path(key.beside("c", "benchmarks/runs", ".tsv"))
    bench.parent.mkdir(parents=True, exist_ok=True)
    bench.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:{int(seconds):02d}\t100\n")


@pytest.fixture()
def grid(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _done(LSTM[2], 10.0)
    # Running: progress.json from this (live) process, halfway through epoch 3 of 10, last epoch took 8 s.
    ckpt = Path(LSTM[3].beside("c", "ckpt/runs"))
    ckpt.mkdir(parents=True)
    now = time.time()
    (ckpt / "progress.json").write_text(json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(), "epoch": 3, "max_epochs": 10, "batch": 50,
        "batches": 100, "started_at": now - 20.0, "epoch_started_at": now - 4.0, "updated_at": now, "valid_ppl": 21.5, "last_epoch_s": 8.0}))
    # Failed: the job log ends with the one-line error.
    log = Path(KN.beside("c", "logs/ngram", ".log"))
    log.parent.mkdir(parents=True)
    log.write_text("counting\nlmgrid: error: counts.npz: not a count table\n")
    os.utime(log, (now - 600, now - 600))
    # Status is read at the fixture's moment: on a loaded machine the seconds between writing the fixture and
    # reading it would otherwise move "epoch ends in" and the time spent.
    monkeypatch.setattr("lmgrid.orchestration.progress.time", SimpleNamespace(time=lambda: now))
    return tmp_path


def test_status_states_eta_and_estimates(grid):
    cells = {c.key: c for c in grid_status(CONFIG, PLAN)}
    assert cells[LSTM[2]].state == "done" and cells[LSTM[2]].spent_s == 10.0
    running = cells[LSTM[3]]
    assert running.state == "running" and "epoch 3/10 (50%)" in running.detail and "valid PPL 21.50" in running.detail
    assert re.search(r"epoch ends in ~4 s", running.detail), running.detail
    assert running.spent_s == pytest.approx(20.0, abs=1.0)
    # At most this epoch's rest + 7 epochs to the cap (60 s); the finished lstm cell took 10 s, less than this one
    # has run already, so what is left is the rest of the current epoch.
    assert running.left_s == pytest.approx(4.0, abs=1.0)
    assert cells[KN].state == "failed" and "not a count table" in cells[KN].detail
    # Pending lstm n5: estimated from the finished lstm cell; the n-gram has nothing like it finished.
    assert cells[LSTM[5]].state == "pending" and cells[LSTM[5]].left_s == 10.0
    assert cells[LSTM[5]].detail == "params changed: lr"  # Snakemake's reason
    assert cells[KN].left_s is None
    text = format_status(CONFIG, list(cells.values()), left(CONFIG, list(cells.values()), PLAN, cores=2))
    assert "4 cells: 1 done, 1 running, 1 failed, 1 pending" in text
    assert "time spent:" in text and "1 cell(s) with nothing finished to estimate from" in text


def test_status_of_a_finished_grid_shows_each_cell_valid_and_test_ppl(tmp_path, monkeypatch):
    """`lmgrid status` on a grid where Snakemake would run nothing: one row per cell with its valid and test PPL from
    its metrics.json, and no empty columns.  Negative control, the mutation it kills: a status that does not read the
    results (the 53 "done" rows with empty columns of issue 28)."""
    from lmgrid.orchestration import progress

    monkeypatch.chdir(tmp_path)
    keys = [LSTM[2], LSTM[3], LSTM[5], KN]
    for i, key in enumerate(keys):
        _done(key, 10.0 + i, valid_ppl=1000.0 + i + 0.125, test_ppl=20.0 + i + 0.5)

    def rows() -> dict[str, dict[str, str]]:
        cells = grid_status(CONFIG, Plan([]))
        text = format_status(CONFIG, cells, left(CONFIG, cells, Plan([]), cores=2))
        lines = [line for line in text.splitlines() if line.startswith("|")]
        head = [c.strip() for c in lines[0].split("|")[1:-1]]
        return {r[0]: dict(zip(head, r)) for r in ([c.strip() for c in line.split("|")[1:-1]] for line in lines[2:])}

    def shows_results(table) -> bool:
        return set(table) == {k.name for k in keys} and all(
            table[k.name].get("valid PPL") == f"{1000.0 + i + 0.125:,.2f}" and table[k.name]["test PPL"] ==
            f"{20.0 + i + 0.5:.2f}" and all(table[k.name].values()) for i, k in enumerate(keys))

    assert shows_results(rows()), rows()
    monkeypatch.setattr(progress, "_record", lambda key, corpus: None)  # a status that reads no run record
    assert not shows_results(rows())


def test_plan_counts_each_study_once(grid):
    cells = grid_status(CONFIG, PLAN)
    text = format_plan(CONFIG, cells, left(CONFIG, cells, PLAN, cores=1))
    rows = {line.split("|")[1].strip(): [p.strip() for p in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| a ") or line.startswith("| b ")}
    # a: 3 cells, 1 done; b: lstm n5 shared with a, so it adds only kn.
    assert rows["a"][:4] == ["3", "3", "1", "2"]
    assert rows["b"][:4] == ["2", "1", "0", "1"] and rows["b"][5] == "1"  # kn: nothing to estimate from


def test_progress_callback_writes_what_status_reads(tmp_path):
    from lmgrid.neural.callbacks import Progress

    path = tmp_path / "progress.json"
    cb = Progress(every=0, path=path)
    trainer = SimpleNamespace(current_epoch=1, max_epochs=5, num_training_batches=40, is_global_zero=True,
                              sanity_checking=False, should_stop=False,
                              optimizers=[SimpleNamespace(param_groups=[{"lr": 0.01}])])
    cb.on_train_epoch_start(trainer, None)
    cb._written = 0.0  # due
    cb.on_train_batch_end(trainer, SimpleNamespace(train_loss=3.0, train_count=10), None, None, 9)
    state = json.loads(path.read_text())
    assert (state["epoch"], state["max_epochs"], state["batch"], state["batches"]) == (2, 5, 10, 40)
    assert state["pid"] == os.getpid() and state["valid_ppl"] is None
    from lmgrid.neural.schedule import PlateauSchedule

    cb.on_validation_end(trainer, SimpleNamespace(train_loss=3.0, valid_loss=3.0,
                                                  schedule=PlateauSchedule(epochs=2, lr_history=[0.01, 0.01])))
    assert json.loads(path.read_text())["valid_ppl"] == pytest.approx(20.0855, rel=1e-4)


@pytest.mark.full  # lmgrid status and plan build Snakemake's DAG (tests/tiers.py)
def test_status_command_reads_the_config(tmp_path, repo):
    (tmp_path / "config.yaml").write_text((repo / "config.yaml").read_text())
    r = subprocess.run([sys.executable, "-m", "lmgrid", "status", "--snakefile", str(repo / "Snakefile"),
                        "--set", "corpus.name=nothing_yet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import yaml

    from lmgrid.run.key import all_runs

    n = len(all_runs(yaml.safe_load((repo / "config.yaml").read_text())["studies"]))
    assert f"# nothing_yet: {n} cells: 0 done, 0 running, 0 failed, {n} pending" in r.stdout
    # A --configfile is applied over config.yaml, as Snakemake does; its bad value is blamed on it.
    (tmp_path / "preset.yaml").write_text("corpus: {name: from_preset}\n")
    r = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--snakefile", str(repo / "Snakefile"),
                        "--configfile", "preset.yaml"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"# from_preset: {n} distinct cells"), r.stderr
    (tmp_path / "bad.yaml").write_text("train: {heads: 3}\n")
    r = subprocess.run([sys.executable, "-m", "lmgrid", "status", "--snakefile", str(repo / "Snakefile"),
                        "--configfile", "bad.yaml"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("lmgrid: error: bad.yaml: train.heads: 3 does not fit"), r.stderr
    r = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--snakefile", str(repo / "Snakefile"),
                        "--set", "train.lrr=1"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == ("lmgrid: error: --config set: train.lrr: unknown key "
                                                      "(did you mean 'lr'?)")


@pytest.mark.full  # lmgrid plan builds Snakemake's DAG
def test_plan_with_an_unreachable_download_names_the_way_out(tmp_path, repo, monkeypatch):
    """With corpus.download's server out of reach and no local copy, `lmgrid plan` stops with one line naming the
    URL and the local alternatives. Negative control, the mutation it kills: Snakemake's bare message passed on
    (explain returning its input), which names neither $LMGRID_PTB_DIR nor corpus.files."""
    from lmgrid.orchestration import dryrun

    with socket.socket() as s:  # a port nothing listens on: the request is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "config.yaml").write_text((repo / "config.yaml").read_text())
    (tmp_path / "ptb.yaml").write_text(
        "corpus: {name: ptb, kind: ptb, download: {base_url: 'http://127.0.0.1:%d/'}, sha256: {train: %s, valid: %s,"
        " test: %s}}\n" % (port, "a" * 64, "b" * 64, "c" * 64))
    env = {k: v for k, v in os.environ.items() if k != "LMGRID_PTB_DIR"}
    r = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--snakefile", str(repo / "Snakefile"),
                        "--configfile", "ptb.yaml"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"http://127.0.0.1:{port}/ptb.train.txt" in r.stderr and "$LMGRID_PTB_DIR or corpus.files" in r.stderr
    # The negative control runs the same dry run in this process with the mutant in place.
    monkeypatch.delenv("LMGRID_PTB_DIR", raising=False)
    monkeypatch.setattr(dryrun, "explain", lambda message: message)
    with pytest.raises(LmgridError) as mutant:
        dryrun.dry_run([str(tmp_path / "ptb.yaml")], snakefile=repo / "Snakefile", workdir=tmp_path)
    assert f"http://127.0.0.1:{port}/ptb.train.txt" in str(mutant.value)
    assert "$LMGRID_PTB_DIR or corpus.files" not in str(mutant.value)


def test_eta_counts_every_job_left_on_the_cores(tmp_path, monkeypatch):
    """The ETA arithmetic from fixture benchmark files: four 10 s cells, then summary (2 s) and aggregate (6 s)
    side by side, the MLflow sync (15 s) after the aggregation, the report (9 s) last.
    kills: ETA of cells only (no aggregation, MLflow sync, report); job time divided by the cores."""
    monkeypatch.chdir(tmp_path)
    keys = [RunKey("lstm", "torch", n, 1, "window", 1) for n in (2, 3, 5, 7)]
    for key in keys:
        _done(key, 10.0)
    for rule, seconds in (("summary", 2.0), ("aggregate", 6.0), ("mlflow_sync", 15.0)):
        Path(f"results/c/benchmarks/{rule}.tsv").write_text(f"s\th:m:s\n{seconds}\t0:00:{int(seconds):02d}\n")
    from lmgrid.analysis.report import REPORT_BENCHMARK, record_s

    record_s(9.0)
    assert Path(REPORT_BENCHMARK).read_text().splitlines()[1].startswith("9.0000\t0:00:09")
    config = {"corpus": {"name": "c"}, "studies": {"a": {"arch": ["lstm"], "n_step": [2, 3, 5, 7]}}}
    cells = [_job(k, "params changed: lr") for k in keys]
    after = [Job("summary", {"corpus": "c"}, "input rebuilt first", deps=[0, 1, 2, 3]),
             Job("aggregate", {"corpus": "c"}, "input rebuilt first", deps=[0, 1, 2, 3]),
             Job("mlflow_sync", {"corpus": "c"}, "input rebuilt first", deps=[0, 1, 2, 3, 5])]
    plan = Plan(cells + after, dag_s=3.0)
    status = grid_status(config, plan)
    assert [c.state for c in status] == ["pending"] * 4 and all(c.left_s == 10.0 for c in status)
    rest = left(config, status, plan, cores=2)
    assert rest.job_s == pytest.approx(40 + 2 + 6 + 15 + 9)
    assert rest.wall_s == pytest.approx(20 + 6 + 15 + 9)  # cells 2 at a time; summary beside the aggregation
    assert left(config, status, plan, cores=1).wall_s == pytest.approx(rest.job_s)
    assert left(config, status, plan, cores=2, startup=True).wall_s == pytest.approx(rest.wall_s + 3.0)
    assert [(o[0], o[3]) for o in rest.others] == [("summary", "benchmark"), ("aggregate", "benchmark"),
                                                   ("mlflow_sync", "benchmark"), ("report", "benchmark")]
    # Without a benchmark file: how long Snakemake's metadata says the job took last time, else a default.
    Path("results/c/benchmarks/mlflow_sync.tsv").unlink()
    after[2].last_s = 12.0
    assert left(config, status, plan, cores=2).others[2][2:] == (12.0, "last run")
    after[2].last_s = None
    from lmgrid.orchestration.eta import DEFAULT_S

    assert left(config, status, plan, cores=2).others[2][2:] == (DEFAULT_S["mlflow_sync"], "default")
    text = format_plan(config, status, rest)
    assert "params changed: lr" in text and "mlflow_sync" in text and "~50 s wall on 2 cores" in text


def _bench(path: str, seconds: float) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(f"s\th:m:s\n{seconds}\t0:00:{int(seconds) % 60:02d}\n")


def test_eta_of_a_test_time_job_reads_the_per_job_benchmark_files(tmp_path, monkeypatch):
    """token_scores, adapt_scores and combine write one benchmark file per job (combine.smk).  A job is estimated
    from its own file, else from this corpus's jobs of its rule and mode.  Kills: reading results/<corpus>/
    benchmarks/<rule>.tsv for them (falls to the default); a mode match by suffix alone, so `cache` also takes
    the `dynamic+cache` files (the negative control runs that variant and sees its estimate move)."""
    monkeypatch.chdir(tmp_path)
    from lmgrid.orchestration import eta

    cell = {"arch": "lstm", "impl": "torch", "n_step": "0", "layers": "2", "regime": "stream"}
    runs = beside_runs("benchmarks/token_scores", "_{mode}.tsv")
    _bench(runs.format(corpus="c", **cell, seed="1", mode="cache"), 100.0)
    _bench(runs.format(corpus="c", **cell, seed="1", mode="dynamic+cache"), 400.0)
    _bench(runs.format(corpus="c", **cell, seed="1", mode="base"), 10.0)
    _bench("results/c/benchmarks/combine_kn_rnn.tsv", 3.0)
    rnn_cache = {"corpus": "c", **cell, "arch": "rnn", "layers": "1", "seed": "1", "mode": "cache"}
    assert eta.rule_estimate("adapt_scores", "c", None, rnn_cache) == (100.0, "like jobs")
    assert eta.rule_estimate("token_scores", "c", None, {**rnn_cache, "mode": "base"}) == (10.0, "like jobs")
    assert eta.rule_estimate("combine", "c", None, {"corpus": "c", "combo": "all"}) == (3.0, "like jobs")
    _bench(runs.format(**rnn_cache), 130.0)  # the job's own file, from an earlier run of it
    assert eta.rule_estimate("adapt_scores", "c", None, rnn_cache) == (130.0, "benchmark")
    assert eta.rule_estimate("combine", "c", 9.0, {"corpus": "c", "combo": "kn_rnn"}) == (3.0, "benchmark")
    # Through `left`, from the dry run's wildcards.
    plan = Plan([Job("adapt_scores", {**rnn_cache, "seed": "2"}, "missing output")])
    assert left({"corpus": {"name": "c"}, "studies": {}}, [], plan, cores=2).others[0][2:] == (115.0, "like jobs")

    own_file = eta._per_job_files
    monkeypatch.setattr(eta, "_per_job_files", lambda rule, w: (own_file(rule, w)[0], rf"{w['mode']}\.tsv$")
                        if rule == "adapt_scores" else own_file(rule, w))
    assert eta.rule_estimate("adapt_scores", "c", None, {**rnn_cache, "seed": "2"})[0] == pytest.approx(630 / 3)
    monkeypatch.setattr(eta, "_per_job_files", lambda rule, w: None)
    assert eta.rule_estimate("adapt_scores", "c", None, rnn_cache)[1] == "default"


def test_wall_time_simulation():
    # Threads: a 2-thread job waits for both cores; running tasks go first.
    tasks = [Task("a", 10.0), Task("b", 10.0, threads=2), Task("c", 4.0, running=True)]
    assert wall_s(tasks, 2) == pytest.approx(20.0)  # c and a together (10), then b (10)
    assert wall_s(tasks, 4) == pytest.approx(10.0)
    assert wall_s([Task("a", 5.0, threads=8)], 2) == pytest.approx(5.0)  # scaled down to the cores
    assert wall_s([Task("a", None), Task("b", 3.0, deps=[0])], 2) == pytest.approx(3.0)


@pytest.fixture
def finished_grid(tiny_pipeline, tmp_path):
    """A copy of the session's finished tiny grid (tests/tinygrid.py), which the test may change."""
    from tinygrid import copy_grid

    return copy_grid(tiny_pipeline, tmp_path / "grid")


def _dry_run_jobs(out: str) -> set[str]:
    """The jobs of `snakemake -n` output: a cell as RunKey.name, any other job by its rule ('all' left out)."""
    jobs = set()
    for block in re.split(r"^(?:local)?rule ", out, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        w = dict(kv.split("=", 1) for kv in re.search(r"wildcards: (.*)", block)[1].split(", ")) \
            if "wildcards:" in block else {}
        if rule in ("ngram", "train", "train_gated"):
            jobs.add(RunKey.from_wildcards(w).name)
        elif rule != "all":
            jobs.add(rule)
    return jobs


def _plan_rows(out: str, section: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.split(section, 1)[1].split("\n\n", 1)[0].splitlines()[3:] if section in out else []:
        cols = [c.strip() for c in line.split("|")[1:-1]]
        rows[cols[0]] = cols[1:]
    return rows


@pytest.mark.full
def test_the_cells_mirror_waits_for_no_study_table(finished_grid, repo, monkeypatch):
    """The MLflow mirror's first job (mlflow_cells: every cell's run and model) reads no study output, so it runs
    beside the aggregation, not after it: with one study table deleted, a dry run reruns the aggregation and the
    studies' mirror (mlflow_sync) but not mlflow_cells.  Kills: mlflow_cells given the study tables as inputs (it
    then reruns after the aggregation, the old serial tail), seen failing by hand."""
    from tinygrid import snakemake

    table = next((finished_grid / "results" / "tiny" / "studies").glob("*/table.csv"))
    table.unlink()
    monkeypatch.setenv("LMGRID_VERBOSE", "1")
    dry = snakemake(finished_grid, repo, "-n", "--quiet", "host")
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = _dry_run_jobs(dry.stdout + dry.stderr)
    assert {"aggregate", "mlflow_sync"} <= jobs and "mlflow_cells" not in jobs, jobs


@pytest.mark.full
def test_plan_pends_what_the_dry_run_runs(finished_grid, repo, monkeypatch):
    """After a changed setting and a deleted output, plan's pending cells and jobs are exactly the jobs
    `snakemake -n` schedules (its full job blocks: VERBOSE), each with Snakemake's reason.
    kills: pending from file existence (only the cell whose metrics.json is gone would be pending)."""
    from tinygrid import snakemake

    (finished_grid / RunKey("mkn", "ngram", 3, 1, "window", 0).run_dir("tiny") / "metrics.json").unlink()
    monkeypatch.setenv("LMGRID_VERBOSE", "1")  # Snakemake's job blocks, not the rules' one-line messages
    dry = snakemake(finished_grid, repo, "-n", "--quiet", "host", "--config", "set=ngram.addk_k=0.5")
    assert dry.returncode == 0, dry.stderr[-3000:]
    expected = _dry_run_jobs(dry.stdout + dry.stderr)
    # The addk cells (a changed setting), the mkn cell (a deleted output) and, after it, its per-token scores and
    # the two combinations that hold it (tests/tinygrid.py), then the tables and the MLflow mirror.
    assert expected == {"addk n2 l1 window s0", "addk n3 l1 window s0", "mkn n3 l1 window s0", "token_scores",
                        "combine", "combinations", "summary", "aggregate", "mlflow_cells", "mlflow_sync"}
    r = subprocess.run([sys.executable, "-m", "lmgrid", "plan", "--snakefile", str(repo / "Snakefile"),
                        "--set", "ngram.addk_k=0.5", "--cores", "2"],
                       cwd=finished_grid, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    cells, others = _plan_rows(r.stdout, "Cells to run:"), _plan_rows(r.stdout, "Other jobs:")
    assert set(cells) | (set(others) - {"report"}) == expected, r.stdout
    assert cells["addk n2 l1 window s0"][1] == "params changed: addk-k"
    assert cells["mkn n3 l1 window s0"][1] == "missing output"
    assert others["aggregate"][0] == "input rebuilt first" and others["mlflow_sync"][2] == "benchmark"
    r = subprocess.run([sys.executable, "-m", "lmgrid", "status", "--snakefile", str(repo / "Snakefile"),
                        "--set", "ngram.addk_k=0.5"],
                       cwd=finished_grid, capture_output=True, text=True, timeout=120)
    assert "8 cells: 5 done, 0 running, 0 failed, 3 pending" in r.stdout, r.stdout + r.stderr
