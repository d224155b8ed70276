"""`lmgrid mlflow-sync --jobs N` (lmgrid.tracking.curves): the runs' curves drawn ahead in a child process are the
curves the serial sync draws, on the right runs, and only those of runs it re-mirrors."""
from __future__ import annotations

import json
import shutil

import pytest
from mlflow import MlflowClient

from lmgrid.analysis import build
from lmgrid.analysis.fixtures import write_fake_results
from lmgrid.common import processes
from lmgrid.common.errors import LmgridError
from lmgrid.run.key import all_runs
from lmgrid.tracking import curves
from lmgrid.tracking.mirror import TAG_KEY, sync
from pools import CountingPool, one_pool

CORPUS = "fx"
STUDIES = {"context": {"arch": ["kn", "lstm", "rnn"], "n_step": [2, 3], "seed": [1, 2]}}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("curves")
    write_fake_results(root, CORPUS, STUDIES)
    build.build_all(CORPUS, STUDIES, str(root / f"results/{CORPUS}/oracle.json"), root)
    return root


def _curves(uri: str, dest) -> dict[str, bytes]:
    """Each cell run's curve.png, by run key."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(CORPUS)
    out = {}
    for run in client.search_runs([exp.experiment_id], max_results=1000):
        tag = run.data.tags[TAG_KEY]
        if tag.startswith("results/") and "curve.png" in {a.path for a in client.list_artifacts(run.info.run_id)}:
            out[tag] = (dest / client.download_artifacts(run.info.run_id, "curve.png", str(dest))).read_bytes()
            (dest / "curve.png").unlink()
    return out


def test_curves_drawn_in_a_child_process_are_the_serial_sync_curves(results, tmp_path, new_store, monkeypatch):
    """With --jobs 2 one child process draws every neural cell's curve (the n-grams have no log.csv), and each run
    gets the same curve.png bytes as the serial sync draws for it.  Kills: --jobs ignored (every curve drawn in the
    writer: the serial sync here is that variant, and the negative control shows the check catches it); a curve
    attached to another run (each title names its cell, so the bytes differ); a curve that differs when drawn in
    another process (another style or dpi in the child)."""
    monkeypatch.setattr(processes, "ProcessPoolExecutor", CountingPool)
    neural = [k for k in all_runs(STUDIES) if not k.is_ngram]
    pngs = {}
    for jobs in (1, 2):
        CountingPool.made = []
        uri = new_store(tmp_path / f"jobs{jobs}/mlflow.db")
        sync(uri, CORPUS, STUDIES, results, jobs=jobs)
        (tmp_path / f"dl{jobs}").mkdir()
        pngs[jobs] = _curves(uri, tmp_path / f"dl{jobs}")
        if jobs == 1:
            with pytest.raises(AssertionError):  # negative control: the serial sync is caught by the check
                one_pool(1, len(neural))
    one_pool(1, len(neural))
    assert sorted(pngs[1]) == sorted(k.run_dir(CORPUS) for k in neural)
    assert [t for t in pngs[1] if pngs[1][t] != pngs[2][t]] == []
    assert len(set(pngs[2].values())) == len(neural)  # every run its own curve


def test_only_the_curves_of_runs_to_re_mirror_are_drawn(results, tmp_path, new_store, monkeypatch):
    """A second sync of unchanged results draws no curve and starts no child; after one cell is retrained, only
    its curve is drawn.  Kills: curves drawn ahead for every cell whatever the store holds (the pool made on the
    unchanged sync), and a digest for the curves that is not the sync's own (the retrained cell's curve not drawn
    ahead, or the others drawn)."""
    root = tmp_path / "copy"
    shutil.copytree(results, root)
    monkeypatch.setattr(processes, "ProcessPoolExecutor", CountingPool)
    uri = new_store(tmp_path / "mlflow.db")
    CountingPool.made = []
    sync(uri, CORPUS, STUDIES, root, jobs=2)
    assert CountingPool.made and CountingPool.made[0]["tasks"] > 1  # the first sync draws ahead
    CountingPool.made = []
    again = sync(uri, CORPUS, STUDIES, root, jobs=2)
    assert again["created"] == again["replaced"] == 0 and CountingPool.made == []
    retrained = next(k for k in all_runs(STUDIES) if not k.is_ngram)
    metrics = root / retrained.run_dir(CORPUS) / "metrics.json"
    metrics.write_text(json.dumps(json.loads(metrics.read_text()), indent=3))  # new bytes, the same record
    third = sync(uri, CORPUS, STUDIES, root, jobs=2)
    assert third["replaced"] >= 1
    one_pool(1, 1)


def test_a_curve_failing_in_the_child_is_the_one_line_error(tmp_path):
    """A log.csv the child cannot draw raises its LmgridError where the curve is asked for, as the serial drawing
    does.  Kills: the child's failure swallowed (a path returned for a curve that was never drawn)."""
    log = tmp_path / "log.csv"
    log.write_text("epoch,step\n0,1\n")
    for jobs in (1, 2):
        drawer = curves.CurveDrawer(tmp_path / f"drawn{jobs}", jobs)
        try:
            drawer.ahead("cell", log, "a cell")
            with pytest.raises(LmgridError, match=r"log.csv: missing column 'train_loss'"):
                drawer.path("cell", log, "a cell")
        finally:
            drawer.close()


def test_cli_mlflow_sync_rejects_jobs_below_one(capsys):
    from lmgrid.cli import main

    assert main(["mlflow-sync", "--corpus", "x", "--studies", "{}", "--tracking-uri", "sqlite:///x.db",
                 "--jobs", "0"]) == 2
    assert "--jobs: expected at least 1, got 0" in capsys.readouterr().err
