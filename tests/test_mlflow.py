"""MLflow mirror of fixture runs: contents, idempotence (run-key tags), replacement on change, a real http server."""
from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from lmgrid.analysis import build
from lmgrid.analysis.fixtures import write_fake_results
from lmgrid.tracking.mirror import TAG_KEY, registered_name, sync
from lmgrid.run.key import all_runs, expand_study

CORPUS = "fx"
STUDIES = {
    "context": {"arch": ["kn", "lstm"], "n_step": [2, 3], "seed": [1, 2]},
    "more": {"arch": ["lstm"], "n_step": [3], "seed": [1, 2], "description": "shares two runs with context"},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlf")
    write_fake_results(root, CORPUS, STUDIES)
    build.build_all(CORPUS, STUDIES, str(root / f"results/{CORPUS}/oracle.json"), root)
    return root


@contextlib.contextmanager
def fluent_uri(uri: str):
    old = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(old)


def active_runs(uri: str):
    with fluent_uri(uri):
        return mlflow.search_runs(experiment_names=[CORPUS], max_results=1000)


def test_sync_contents_and_idempotence(results, tmp_path, new_store):
    """A sync mirrors each cell and study once (run-key tags), with the cell's metrics, params, history and
    artifacts; a second sync changes nothing; a retrained cell replaces its run and its study's.  The study's best
    run is chosen on valid.  Kills: a study best chosen on test (mirror.best_on_valid taking the lowest test_ppl:
    after the retrain below gives another run the study's lowest test PPL, 50.0, it picks that run; run by hand as
    a temporary edit, and failed), and the old `best_test_ppl` metric logged.  The fixture's own runs have the same
    best on valid and on test, so only the retrain can tell the two apart (asserted below)."""
    uri = new_store(tmp_path / "mlflow.db")
    n_cells = len(all_runs(STUDIES))  # 2 kn + 4 lstm; the 'more' runs are shared
    assert n_cells == 6
    first = sync(uri, CORPUS, STUDIES, results)
    assert (first["created"], first["unchanged"], first["cells"]) == (n_cells + 2, 0, n_cells)
    runs = active_runs(uri)
    assert len(runs) == n_cells + 2
    assert runs[f"tags.{TAG_KEY}"].is_unique

    client = MlflowClient(tracking_uri=uri)
    cell = runs[runs[f"tags.{TAG_KEY}"] == f"results/{CORPUS}/runs/lstm/torch/n3_l1_window_s2"].iloc[0]
    metrics = json.loads((results / f"results/{CORPUS}/runs/lstm/torch/n3_l1_window_s2/metrics.json").read_text())
    assert cell["metrics.test_ppl"] == pytest.approx(metrics["test"]["ppl"])
    assert cell["params.n_step"] == "3" and cell["params.hparams.optimizer"] == "adam"
    assert cell["metrics.best_epoch"] == metrics["best_epoch"] and cell["metrics.epochs"] == metrics["epochs"]
    assert cell["tags.stopped_because"] == metrics["stopped_because"]
    assert cell["tags.lmgrid.studies"] == "context,more"
    assert cell["tags.mlflow.source.git.commit"] and cell["tags.version.mlflow"] == mlflow.__version__
    assert cell["metrics.gates/l1/f/mean"] > 0
    history = client.get_metric_history(cell["run_id"], "epoch/valid_ppl")
    log = (results / f"results/{CORPUS}/runs/lstm/torch/n3_l1_window_s2/log.csv").read_text().splitlines()[1:]
    assert [(h.step, round(h.value, 4)) for h in history] == [(int(r.split(",")[1]), float(r.split(",")[5]))
                                                              for r in log]
    artifacts = {a.path for a in client.list_artifacts(cell["run_id"])}
    assert {"metrics.json", "log.csv", "gates.csv", "curve.png", "environment"} <= artifacts
    study = runs[runs[f"tags.{TAG_KEY}"] == "study:context"].iloc[0]
    assert study["metrics.runs"] == 6 and study["params.arch"] == '["kn", "lstm"]'
    # The study's best run is chosen on valid (issue 44), its test PPL only reported; no test-chosen metric.
    scores = [json.loads((results / k.run_dir(CORPUS) / "metrics.json").read_text())
              for k in expand_study(STUDIES["context"])]
    pick = min(scores, key=lambda m: m["valid"]["ppl"])
    assert study["metrics.best_valid_ppl"] == pytest.approx(pick["valid"]["ppl"])
    assert study["metrics.test_ppl_of_best_valid"] == pytest.approx(pick["test"]["ppl"])
    assert "metrics.best_test_ppl" not in runs.columns
    tables = {a.path for a in client.list_artifacts(study["run_id"], "tables")}
    assert {"tables/table.json", "tables/runs.json", "tables/gates_effect.json"} <= tables
    assert "study/ppl_vs_nstep.png" in {a.path for a in client.list_artifacts(study["run_id"], "study")}

    second = sync(uri, CORPUS, STUDIES, results)
    assert (second["created"], second["replaced"], second["unchanged"]) == (0, 0, n_cells + 2)
    assert len(active_runs(uri)) == n_cells + 2
    assert second["studies"] == first["studies"]

    # A retrained cell (new metrics.json) replaces its MLflow run in place of a duplicate.
    path = results / f"results/{CORPUS}/runs/kn/ngram/n2_l1_window_s0/metrics.json"
    saved = path.read_text()
    try:
        m = json.loads(saved)
        m["test"]["ppl"] = 50.0  # now the study's lowest test PPL, on a run that is not its best on valid
        path.write_text(json.dumps(m))
        third = sync(uri, CORPUS, STUDIES, results)
    finally:
        path.write_text(saved)
    # The cell and the one study holding it (its runs table lists the test PPL) are replaced; 'more' is not.
    assert (third["created"], third["replaced"], third["unchanged"]) == (0, 2, n_cells)
    assert third["studies"]["more"] == first["studies"]["more"]
    assert third["studies"]["context"] != first["studies"]["context"]
    runs = active_runs(uri)
    assert len(runs) == n_cells + 2
    # One model per cell in the Models view: the replaced run's model went with it.
    models = client.search_logged_models([client.get_experiment_by_name(CORPUS).experiment_id])
    assert sorted(m.source_run_id for m in models) == sorted(runs[runs["tags.lmgrid.kind"] == "cell"]["run_id"])
    row = runs[runs[f"tags.{TAG_KEY}"] == f"results/{CORPUS}/runs/kn/ngram/n2_l1_window_s0"].iloc[0]
    assert row["metrics.test_ppl"] == 50.0
    # The replaced study still names the run best on valid and its test PPL, not the run lowest on test.
    assert m["valid"]["ppl"] > pick["valid"]["ppl"] and pick["test"]["ppl"] > 50.0
    study = runs[runs[f"tags.{TAG_KEY}"] == "study:context"].iloc[0]
    assert study["metrics.best_valid_ppl"] == pytest.approx(pick["valid"]["ppl"])
    assert study["metrics.test_ppl_of_best_valid"] == pytest.approx(pick["test"]["ppl"])
    # N-gram settings are params, its timings metrics.
    assert row["params.order"] == "2" and row["params.settings.discounts"] == "[0.5, 0.8]"
    assert row["metrics.timing.score_s"] == 0.25


def test_cells_first_then_studies_mirror_what_one_sync_does(results, tmp_path, new_store):
    """The workflow's two MLflow jobs: `mlflow_cells` (sync with cells_only) mirrors every cell and no study, so it
    needs no study table and runs beside the aggregation; `mlflow_sync` after it finds every cell current (nothing
    re-logged) and adds the studies.  Together they leave the runs one sync leaves, with the same study records.
    Kills: cells_only ignored (the first job would read the study tables it must not wait for: studies created in
    it), and a second job that re-mirrors the cells (created or replaced cells in it); both seen failing by hand."""
    n_cells = len(all_runs(STUDIES))
    uri = new_store(tmp_path / "split.db")
    cells = sync(uri, CORPUS, STUDIES, results, cells_only=True)
    assert (cells["created"], cells["replaced"], cells["cells"], cells["studies"]) == (n_cells, 0, n_cells, {})
    assert set(active_runs(uri)["tags.lmgrid.kind"]) == {"cell"}
    rest = sync(uri, CORPUS, STUDIES, results)
    assert (rest["created"], rest["replaced"], rest["unchanged"]) == (len(STUDIES), 0, n_cells)
    assert set(rest["studies"]) == set(STUDIES)
    one = new_store(tmp_path / "one.db")
    sync(one, CORPUS, STUDIES, results)

    def view(runs):  # each run's key with the metrics a reader compares
        return sorted(zip(runs[f"tags.{TAG_KEY}"], runs["metrics.test_ppl"].fillna(-1),
                          runs["metrics.runs"].fillna(-1), runs["metrics.best_valid_ppl"].fillna(-1)))

    assert view(active_runs(uri)) == view(active_runs(one))


SETTINGS = {"corpus": {"name": CORPUS, "kind": "synth", "synth": {"seed": 4}}, "vocab": {"min_count": 2}}


def test_runs_are_complete_records(results, tmp_path, new_store):
    """Training's start and end, the model, the data as dataset inputs with digests, corpus and vocabulary
    settings, the benchmark's peak RSS and CPU time; no stray Default experiment; optional registration."""
    uri = new_store(tmp_path / "mlflow.db")
    first = sync(uri, CORPUS, STUDIES, results, data_settings=SETTINGS, register_models=True)
    client = MlflowClient(tracking_uri=uri)
    assert [e.name for e in client.search_experiments()] == [CORPUS]  # Default is gone (deleted, not listed)
    runs = active_runs(uri)
    for tag, model_files in ((f"results/{CORPUS}/runs/lstm/torch/n3_l1_window_s2", {"model.ckpt", "vocab.json"}),
                             (f"results/{CORPUS}/runs/kn/ngram/n2_l1_window_s0", {"model.arpa", "vocab.json"})):
        row = runs[runs[f"tags.{TAG_KEY}"] == tag].iloc[0]
        run = client.get_run(row["run_id"])
        m = json.loads((results / tag / "metrics.json").read_text())
        assert (run.info.start_time, run.info.end_time) == (int(m["start_unix_s"] * 1000), int(m["end_unix_s"] * 1000))
        # runs:/<id>/<cell slug> is the cell's pyfunc model (tests/test_mlflow_models.py loads real ones)
        key = next(k for k in all_runs(STUDIES) if k.run_dir(CORPUS) == tag)
        [model] = client.search_logged_models([run.info.experiment_id],
                                              filter_string=f"source_run_id = '{run.info.run_id}'")
        assert model.name == key.slug
        assert "MLmodel" in {a.path.split("/")[-1] for a in client.list_logged_model_artifacts(model.model_id)}
        assert {a.path.split("/")[-1]
                for a in client.list_logged_model_artifacts(model.model_id, "artifacts")} == model_files
        inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
        assert set(inputs) == {"train", "valid", "test", "vocab"}
        with (results / f"results/{CORPUS}/corpus/train.txt").open("rb") as fh:
            assert inputs["train"].dataset.digest == hashlib.file_digest(fh, "sha256").hexdigest()[:32]
        assert {t.value for t in inputs["vocab"].tags} == {"vocabulary"}
        params = run.data.params
        assert params["corpus.kind"] == "synth" and params["corpus.synth.seed"] == "4"
        assert params["vocab.min_count"] == "2" and params["vocab.size"] == "6" and params["corpus.train.tokens"] == "30"
        assert run.data.metrics["bench_wall_s"] == 2.0 + key.n_step
        assert resource_metrics(run.data.metrics) == {"cpu_s": m["cpu_s"], "max_rss_mib": m["max_rss_mib"]}
        versions = client.search_model_versions(f"name = '{registered_name(CORPUS, key)}'")
        assert [v.run_id for v in versions] == [run.info.run_id]
    # Idempotent: nothing new on a second sync.
    second = sync(uri, CORPUS, STUDIES, results, data_settings=SETTINGS, register_models=True)
    assert (second["created"], second["replaced"]) == (0, 0) and second["studies"] == first["studies"]
    # Changed data leaves a trace: every cell's run is replaced, with the new digest.
    train = results / f"results/{CORPUS}/corpus/train.txt"
    saved = train.read_text()
    try:
        train.write_text(saved + "one more sentence\n")
        third = sync(uri, CORPUS, STUDIES, results, data_settings=SETTINGS)
    finally:
        train.write_text(saved)
    # Every cell, and both studies (their runs tables list the new run ids).
    assert (third["created"], third["replaced"]) == (0, len(all_runs(STUDIES)) + 2)


def resource_metrics(metrics: dict) -> dict:
    """A run's CPU-time and peak-memory metrics, whatever their name."""
    return {k: v for k, v in metrics.items() if "rss" in k or "cpu" in k}


def test_resource_metrics_are_the_training_process_own(results, tmp_path, monkeypatch, new_store):
    """A cell's run logs the CPU time and peak RSS its own process measured (metrics.json: cpu_s, max_rss_mib), and
    of Snakemake's benchmark file only the wall time: under the warm server that file measures the thin client.
    Negative control, the mutation it kills: logging the benchmark file's max_rss and cpu_time too (as bench_*),
    the figures that said 17 MiB and 0.06 s for an LSTM of 479 MiB and 26 s."""
    from lmgrid.tracking import mirror as tracking
    from lmgrid.analysis.collect import read_benchmark

    key = next(k for k in all_runs(STUDIES) if k.arch == "lstm")
    m = json.loads((results / key.run_dir(CORPUS) / "metrics.json").read_text())

    def logged(uri: str) -> dict:
        sync(uri, CORPUS, STUDIES, results)
        runs = active_runs(uri)
        return runs[runs[f"tags.{TAG_KEY}"] == key.run_dir(CORPUS)].iloc[0].filter(like="metrics.").dropna() \
            .rename(lambda c: c[len("metrics."):]).to_dict()

    expected = {"cpu_s": m["cpu_s"], "max_rss_mib": m["max_rss_mib"]}
    assert resource_metrics(logged(new_store(tmp_path / "a.db"))) == expected
    monkeypatch.setattr(tracking, "benchmark_metrics",
                        lambda path: {f"bench_{k}": v for k, v in read_benchmark(path).items()})
    assert resource_metrics(logged(new_store(tmp_path / "b.db"))) != expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sync_to_a_real_mlflow_server(results, tmp_path):
    port = _free_port()
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow_bin), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", f"sqlite:///{tmp_path}/server.db", "--artifacts-destination", str(tmp_path / "art")]
    log = open(tmp_path / "server.log", "w")
    # Its own session, so stopping it by its process id also stops the workers it spawns.
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(server, port, tmp_path / "server.log")
        uri = f"http://127.0.0.1:{port}"
        first = sync(uri, CORPUS, STUDIES, results)
        second = sync(uri, CORPUS, STUDIES, results)
        runs = active_runs(uri)
        assert first["created"] == len(runs) == len(all_runs(STUDIES)) + 2
        assert second["created"] == 0 and second["unchanged"] == len(runs)
        client = MlflowClient(tracking_uri=uri)
        study = runs[runs[f"tags.{TAG_KEY}"] == "study:more"].iloc[0]
        assert "tables/table.json" in {a.path for a in client.list_artifacts(study["run_id"], "tables")}
        exp = client.get_experiment_by_name(CORPUS)
        assert exp.artifact_location.startswith("mlflow-artifacts:")  # the server's, not a path of this machine
        models = client.search_logged_models([exp.experiment_id])
        assert sorted(m.name for m in models) == sorted(k.slug for k in all_runs(STUDIES))
        assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
        _check_live_training_logs(uri, tmp_path)
    finally:
        _stop(server)
        log.close()


def _wait_healthy(server: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert server.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "mlflow server did not answer /health in 120 s"
        time.sleep(0.5)


def _stop(server: subprocess.Popen) -> None:
    """Stops a server started in its own session, with the workers it spawned (by its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def _check_live_training_logs(uri: str, tmp_path: Path) -> None:
    """mlflow.live: a training job logs each epoch through Lightning's MLFlowLogger to the http server."""
    from test_neural_support import tiny_corpus

    from lmgrid.run.live import live_logger_kwargs
    from lmgrid.run.spec import RunSpec

    c = tiny_corpus(tmp_path / "live")
    run_dir = tmp_path / "live" / "run"
    # The logger's settings reach the job in its run spec (live_mlflow), as the workflow writes it.
    spec = RunSpec.build(arch="lstm", impl="torch", n_step=3, layers=1, regime="window", seed=1, corpus="c",
                         train={"epochs": 1, "max_train_tokens": 2000, "emb_dim": 16, "hidden_dim": 16,
                                "log_every": 0},
                         paths=c["paths"], vocab=c["vocab_path"], run_dir=str(run_dir),
                         ckpt_dir=str(tmp_path / "live" / "ckpt"),
                         live_mlflow=live_logger_kwargs({"tracking_uri": uri, "live": True}, "c"))
    spec.write(tmp_path / "live" / "spec.json")
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "lmgrid", "train", "--spec", str(tmp_path / "live" / "spec.json")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("c-live")
    live = client.search_runs([exp.experiment_id])
    assert len(live) == 1 and live[0].data.tags["lmgrid.run_key"] == str(run_dir)
    history = client.get_metric_history(live[0].info.run_id, "valid_ppl")
    logged = [round(m.value, 4) for m in sorted(history, key=lambda m: m.step)]
    with open(run_dir / "log.csv") as fh:
        expected = [round(float(row["valid_ppl"]), 4) for row in csv.DictReader(fh)]
    assert logged == expected and len(expected) >= 1


def user_facing_problems(uri: str, root: Path) -> list[str]:
    """What a user of MLflow's UI and API would trip over in a synced store: an experiment without MLflow 3's
    classic-training kind tag (the tag alone does not open the training view: tests/test_mlflow_view.py checks the
    address `make mlflow` prints), models not named by their cell, layers counted from 0, dataset sources that are paths of one clone."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(CORPUS)
    problems = []
    if exp.tags.get("mlflow.experimentKind") != "custom_model_development":
        problems.append("experiment kind")
    models = client.search_logged_models([exp.experiment_id])
    runs = {r.info.run_id: r for r in client.search_runs([exp.experiment_id]) if r.data.tags["lmgrid.kind"] == "cell"}
    slugs = {r.info.run_id: next(k.slug for k in all_runs(STUDIES) if k.run_dir(CORPUS) == r.data.tags[TAG_KEY])
             for r in runs.values()}
    if sorted((m.source_run_id, m.name) for m in models) != sorted(slugs.items()):
        problems.append("model names")
    for r in runs.values():
        layers = {k.split("/")[1] for k in r.data.metrics if k.startswith("gates/")}
        key = next(k for k in all_runs(STUDIES) if k.run_dir(CORPUS) == r.data.tags[TAG_KEY])
        if layers and layers != {f"l{n}" for n in range(1, key.layers + 1)}:
            problems.append("layer numbering")
        sources = [json.loads(i.dataset.source)["uri"] for i in r.inputs.dataset_inputs]
        if not sources or any(s.startswith("/") or str(root) in s or not (root / s).is_file() for s in sources):
            problems.append("dataset sources")
    return sorted(set(problems))


def test_models_layers_experiment_and_sources_read_as_a_user_expects(results, tmp_path, monkeypatch, new_store):
    """Each logged model is named by its cell (e.g. lstm-torch-n3-l1-window-s2), gate metrics count layers from 1
    (gates/l1/...), the experiment carries MLflow 3's experiment-kind tag for classic model training, and dataset
    sources are relative to the clone (results/<corpus>/...).  Negative controls, the mutations they kill, one sync
    each: every model named `model`; layers counted from 0 (gates/l0/...); an experiment created without the tag;
    absolute dataset paths."""
    from lmgrid.tracking import mirror as tracking
    from lmgrid.run.key import RunKey, normalise

    assert normalise("lstm", "torch", 5, 1, "window", 1).slug == "lstm-torch-n5-l1-window-s1"
    monkeypatch.setattr("lmgrid.tracking.mirror.environment", lambda: {})  # no git calls: faster syncs
    sync(new_store(tmp_path / "ok.db"), CORPUS, STUDIES, results, data_settings=SETTINGS)
    assert user_facing_problems(f"sqlite:///{tmp_path}/ok.db", results) == []
    mutants = {"model names": (RunKey, "slug", property(lambda self: "model")),
               "layer numbering": (tracking, "layer_label", lambda layer: f"l{int(layer)}"),
               "experiment kind": (tracking, "EXPERIMENT_KIND", {}),
               "dataset sources": (tracking.CorpusData, "source", lambda self, path: str(path.resolve()))}
    for problem, (owner, name, mutant) in mutants.items():
        with monkeypatch.context() as m:
            m.setattr(owner, name, mutant)
            uri = new_store(tmp_path / f"{problem.replace(' ', '_')}.db")
            sync(uri, CORPUS, STUDIES, results, data_settings=SETTINGS)
        assert user_facing_problems(uri, results) == [problem]


def test_one_run_per_combination_with_its_weights_and_settings(results, tmp_path, new_store):
    """Issue 26: each combination is one MLflow run: its components and EM weights as params, the settings a
    test-time component chose on valid as params, the mixture's and each component's PPL as metrics, its table as
    artifacts; a refitted combination replaces its run.  Kills: combinations left out of the sync, weights or
    chosen settings not logged, a changed result.json keeping its stale run, and a table.html that differs between
    two writes of one result (pandas' random table ids), which replaced the run at every rewrite (the negative
    control: the same result written and synced twice keeps its run, a new weight replaces it)."""
    from lmgrid.testtime.combine.mixture import Mixture
    from lmgrid.testtime.combine.table import write as write_combination

    folder = results / f"results/{CORPUS}/combine/kn_lstm"
    components = [{"label": "kn n2", "mode": "base"},
                  {"label": "lstm n3 s1 (cache)", "mode": "cache",
                   "adapt": {"settings": {"window": 50, "theta": 0.3, "lam": 0.1}, "base_valid_ppl": 40.0,
                             "base_test_ppl": 41.0, "grid": [{"window": 50, "theta": 0.3, "lam": 0.1,
                                                              "valid_ppl": 35.0}]}}]

    def write(weights: list[float]) -> str:
        m = Mixture(labels=[c["label"] for c in components], weights=weights, valid_ppl=33.5, test_ppl=34.25,
                    component_valid_ppl=[50.0, 35.0], component_test_ppl=[52.0, 36.0], iterations=17,
                    tokens={"valid": 100, "test": 120})
        write_combination(folder, "kn_lstm", m, components)
        return str((folder / "result.json").relative_to(results))

    uri = new_store(tmp_path / "mlflow.db")
    first = sync(uri, CORPUS, STUDIES, results, combinations=[write([0.25, 0.75])])
    runs = active_runs(uri)
    combo = runs[runs["tags.lmgrid.kind"] == "combination"]
    assert len(combo) == 1 and list(first["combinations"]) == ["kn_lstm"]
    row = combo.iloc[0]
    assert (row["params.component_0"], row["params.weight_0"]) == ("kn n2", "0.25")
    assert (row["params.component_1"], row["params.weight_1"]) == ("lstm n3 s1 (cache)", "0.75")
    assert (row["params.component_1_mode"], row["params.component_1_lam"], row["params.component_1_window"]) == \
        ("cache", "0.1", "50")
    assert (row["metrics.valid_ppl"], row["metrics.test_ppl"]) == (33.5, 34.25)
    assert (row["metrics.component_1_test_ppl"], row["metrics.component_1_base_test_ppl"]) == (36.0, 41.0)
    artifacts = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(row["run_id"], "combination")}
    assert {"combination/result.json", "combination/table.md"} <= artifacts

    again = sync(uri, CORPUS, STUDIES, results, combinations=[write([0.25, 0.75])])
    assert again["combinations"] == first["combinations"] and again["replaced"] == 0
    refit = sync(uri, CORPUS, STUDIES, results, combinations=[write([0.5, 0.5])])
    assert refit["combinations"]["kn_lstm"] != first["combinations"]["kn_lstm"] and refit["replaced"] == 1
    combo = active_runs(uri).query("`tags.lmgrid.kind` == 'combination'")
    assert len(combo) == 1 and combo.iloc[0]["params.weight_0"] == "0.5"


def test_each_seed_of_a_combination_is_its_own_mlflow_run(results, tmp_path, new_store):
    """Issue 44: a combination run per seed (combine/<name>/s<seed>/) is one MLflow run per seed, keyed on its
    result.json's `run`, so seed 2 does not replace seed 1.  Kills: runs keyed on the combination's name (negative
    control: the same two results without `run` leave one run, each sync replacing the other's)."""
    from lmgrid.common.fileio import read_json, write_json
    from lmgrid.testtime.combine.mixture import Mixture
    from lmgrid.testtime.combine.table import write as write_combination

    def write(seed: int, keep_run: bool = True) -> str:
        folder = results / f"results/{CORPUS}/combine/duo/s{seed}"
        m = Mixture(labels=["kn n2", f"lstm n3 s{seed}"], weights=[0.3, 0.7], valid_ppl=33.0 + seed,
                    test_ppl=34.0 + seed, component_valid_ppl=[50.0, 35.0], component_test_ppl=[52.0, 36.0],
                    iterations=9, tokens={"valid": 100, "test": 120})
        write_combination(folder, "duo", m, [{"label": "kn n2"}, {"label": f"lstm n3 s{seed}"}], seed=seed,
                          run=f"duo/s{seed}")
        if not keep_run:
            write_json(folder / "result.json", {k: v for k, v in read_json(folder / "result.json").items()
                                                if k != "run"})
        return str((folder / "result.json").relative_to(results))

    uri = new_store(tmp_path / "seeds.db")
    out = sync(uri, CORPUS, STUDIES, results, combinations=[write(1), write(2)])
    combo = active_runs(uri).query("`tags.lmgrid.kind` == 'combination'")
    assert sorted(out["combinations"]) == ["duo/s1", "duo/s2"] and len(combo) == 2
    assert sorted(combo["metrics.test_ppl"]) == [35.0, 36.0]

    uri = new_store(tmp_path / "by_name.db")
    sync(uri, CORPUS, STUDIES, results, combinations=[write(1, keep_run=False), write(2, keep_run=False)])
    assert len(active_runs(uri).query("`tags.lmgrid.kind` == 'combination'")) == 1
    assert sync(uri, CORPUS, STUDIES, results)["combinations"] == {}  # the workflow's list is what is synced
