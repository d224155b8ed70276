"""One writer at a time per MLflow sqlite store (lmgrid.tracking.store_lock): the sync and `make mlflow`'s view
hold `<db>.lock` while they write, waiting writers say so, an http store takes no lock, and two syncs of two
corpora into one fresh store both succeed."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lmgrid.analysis import build
from lmgrid.analysis.fixtures import write_fake_results
from lmgrid.common.errors import LmgridError
from lmgrid.tracking import mirror, store_lock, view

STUDIES = {"tiny": {"arch": ["kn"], "n_step": [2], "seed": [1]}}
CORPORA = ("aa", "bb")
SRC = str(Path(mirror.__file__).resolve().parents[2])
# Exit status 0 when the lock file could be locked at once (nobody holds it), 1 when another holder has it.
PROBE = ("import fcntl, sys\nf = open(sys.argv[1], 'a')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
         "except BlockingIOError:\n    sys.exit(1)\n")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lock")
    for corpus in CORPORA:
        write_fake_results(root, corpus, STUDIES)
        build.build_all(corpus, STUDIES, str(root / f"results/{corpus}/oracle.json"), root)
    return root


def locked_elsewhere(path: Path) -> bool:
    """Whether another process finds the lock file held (a separate process: what a second writer would see)."""
    rc = subprocess.run([sys.executable, "-c", PROBE, str(path)]).returncode
    assert rc in (0, 1), f"lock probe failed (exit {rc})"
    return rc == 1


def probed_sync(results: Path, uri: str, monkeypatch) -> list[tuple[str, bool]]:
    """Sync corpus aa, probing the lock file from another process where MLflow first opens the store (on a fresh
    file: its schema creation) and as each run is finished; returns (where, held) per probe."""
    lock, seen = store_lock.lock_path(uri), []
    first_open, finish = mirror.experiment_id, mirror.Syncer._finish

    def probe_then(where, fn):
        def wrapped(*args, **kwargs):
            seen.append((where, locked_elsewhere(lock)))
            return fn(*args, **kwargs)
        return wrapped

    with monkeypatch.context() as m:
        m.setattr(mirror, "experiment_id", probe_then("store opened", first_open))
        m.setattr(mirror.Syncer, "_finish", probe_then("run finished", finish))
        mirror.sync(uri, "aa", STUDIES, results)
    return seen


def test_sync_holds_the_store_lock_while_it_writes(results, tmp_path, new_store, monkeypatch):
    """The deterministic test of the lock: while the sync opens the store and writes each run, another process
    cannot take `<db>.lock`; after the sync, and after a sync that failed, it can.  Kills: the lock not taken
    (control, run here: with store_lock.writing a no-op the same probes find the file free)."""
    uri = new_store(tmp_path / "held/mlflow.db")
    seen = probed_sync(results, uri, monkeypatch)
    assert [w for w, _ in seen] == ["store opened", "run finished", "run finished"]  # the cell, the study
    assert all(held for _, held in seen), seen
    assert not locked_elsewhere(store_lock.lock_path(uri))

    with monkeypatch.context() as m:  # released when the sync fails too
        m.setattr(mirror.Syncer, "sync_study", lambda *a, **k: (_ for _ in ()).throw(LmgridError("boom")))
        with pytest.raises(LmgridError):
            mirror.sync(uri, "aa", STUDIES, results)
    assert not locked_elsewhere(store_lock.lock_path(uri))

    control = new_store(tmp_path / "control/mlflow.db")
    monkeypatch.setattr(store_lock, "writing", lambda uri: contextlib.nullcontext())
    seen = probed_sync(results, control, monkeypatch)
    assert seen and not any(held for _, held in seen), seen


def test_view_holds_the_store_lock(tmp_path, new_store, monkeypatch):
    """`make mlflow`'s view writes tags (and creates or migrates an older store's schema): it holds the lock too.
    Kills: view.urls without the lock (control, run here: store_lock.writing a no-op, the probe finds it free)."""
    uri = new_store(tmp_path / "mlflow.db")
    from mlflow import MlflowClient

    exp = MlflowClient(tracking_uri=uri).create_experiment("older", tags=view.EXPERIMENT_KIND)
    seen = []
    monkeypatch.setattr(view, "ensure", lambda client, i: seen.append(locked_elsewhere(store_lock.lock_path(uri))))
    (name, address), = view.urls(uri, "http://h")
    assert name == "older" and f"/experiments/{exp}/" in address
    monkeypatch.setattr(store_lock, "writing", lambda uri: contextlib.nullcontext())
    view.urls(uri, "http://h")
    assert seen == [True, False]


def test_a_waiting_writer_says_which_lock_it_waits_on(tmp_path, capsys, monkeypatch):
    """A writer blocked by another waits (it does not go ahead) and prints one line naming the lock file; it goes
    on once the lock is free.  Kills: a non-blocking lock or a silent wait."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setattr(store_lock, "QUIET_WAIT_S", 0.0)
    entered = threading.Event()

    def writer():
        with store_lock.writing(uri):
            entered.set()

    with store_lock.writing(uri) as lock:  # this thread's own open file: flock conflicts with the writer's
        t = threading.Thread(target=writer)
        t.start()
        for _ in range(400):  # the line comes at once (QUIET_WAIT_S = 0); the bound only keeps a bug from hanging
            err = capsys.readouterr().err
            if err:
                break
            time.sleep(0.05)
        assert err == f"mlflow: waiting for {lock} (another lmgrid process is writing this MLflow store)\n"
        assert not entered.is_set()
    t.join(timeout=60)
    assert entered.is_set()


def test_http_store_takes_no_lock(tmp_path, monkeypatch):
    """An http(s) store is serialised by its server: no lock file is made or taken.  Kills: every URI locked (a
    lock file named after the URL appears in the current folder)."""
    monkeypatch.chdir(tmp_path)
    for uri in ("http://127.0.0.1:5000", "https://mlflow.example:443"):
        assert store_lock.lock_path(uri) is None
        with store_lock.writing(uri) as lock:
            assert lock is None
    assert list(tmp_path.iterdir()) == []
    assert store_lock.lock_path("sqlite:///results/mlflow.db?timeout=20") == Path("results/mlflow.db.lock")


# A child of the concurrency test: sync one corpus into the shared store, started together with the other child
# (both wait for the file `go`).  MLflow checks whether the store's tables exist and then creates them; the
# child waits after that check until the other child has passed it too (unless it holds the store's lock: then the
# other cannot get there), so without the lock both create the schema at once, as two Snakemake runs did.
CHILD = """
import contextlib, fcntl, json, sys, time
from pathlib import Path
import mlflow.store.db.utils as db_utils
import mlflow.store.model_registry.sqlalchemy_store, mlflow.store.tracking.sqlalchemy_store
from lmgrid.tracking import mirror, store_lock

uri, corpus, root, folder, mode, studies = sys.argv[1:]
folder = Path(folder)
if mode == "nolock":
    store_lock.writing = lambda uri: contextlib.nullcontext()
create = db_utils._initialize_tables


def held(lock):
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def widened(engine):
    db_utils._initialize_tables = create
    (folder / f"inside-{corpus}").touch()
    for _ in range(2400):  # at most 2 min: a bound against hanging, never reached when it works
        if held(store_lock.lock_path(uri)) or len(list(folder.glob("inside-*"))) == 2:
            break
        time.sleep(0.05)
    create(engine)
    if mode == "nolock":  # the control: the race is in the schema's creation, the rest would only cost time
        sys.exit(0)


db_utils._initialize_tables = widened
(folder / f"ready-{corpus}").touch()
while not (folder / "go").exists():
    time.sleep(0.01)
mirror.sync(uri, corpus, json.loads(studies), root)
"""


def sync_both_at_once(results: Path, folder: Path, mode: str) -> tuple[str, list[subprocess.CompletedProcess]]:
    """Two processes sync corpora aa and bb into one fresh sqlite store at the same moment; their results."""
    folder.mkdir()
    uri = f"sqlite:///{folder}/mlflow.db"
    env = {**os.environ, "PYTHONPATH": SRC}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, uri, c, str(results), str(folder), mode,
                                  json.dumps(STUDIES)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True) for c in CORPORA]
    while len(list(folder.glob("ready-*"))) < len(CORPORA) and all(c.poll() is None for c in children):
        time.sleep(0.02)
    (folder / "go").touch()
    done = [subprocess.CompletedProcess(c.args, c.wait(timeout=300), c.communicate()[0]) for c in children]
    return uri, done


@pytest.mark.slow  # two fresh MLflow schemas in child processes: about 30 s on a 2-core machine
def test_two_syncs_into_one_fresh_store_both_succeed(results, tmp_path):
    """The symptom: two Snakemake runs of other corpora sync into one fresh results/mlflow.db at once; both succeed
    and both corpora's runs (a cell and a study each) are in the store.  Kills: the sync without the lock (control,
    run here: with store_lock.writing a no-op in both children, both create MLflow's schema at once and one fails,
    e.g. `table params already exists` or `duplicate column name: step`; 5 failures in 5 tries).  The deterministic
    test of the lock itself is test_sync_holds_the_store_lock_while_it_writes; this one costs two fresh schema
    creations (MLflow's migrations: seconds each)."""
    from mlflow import MlflowClient

    uri, done = sync_both_at_once(results, tmp_path / "locked", "lock")
    assert [d.returncode for d in done] == [0, 0], "\n".join(d.stdout[-3000:] for d in done)
    client = MlflowClient(tracking_uri=uri)
    for corpus in CORPORA:
        exp = client.get_experiment_by_name(corpus)
        runs = client.search_runs([exp.experiment_id])
        assert sorted(r.data.tags[mirror.TAG_KIND] for r in runs) == ["cell", "study"], corpus

    _, done = sync_both_at_once(results, tmp_path / "unlocked", "nolock")
    assert any(d.returncode != 0 for d in done), "control: both created the schema at once without a failure"
