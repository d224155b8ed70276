"""Shared fixtures. Data-dependent tests find the Penn Treebank through LMGRID_PTB_DIR; they skip with the
reason on a user's machine, and fail instead when LMGRID_REQUIRE_DATA=1 (as .ci/run sets). The KenLM tests skip
likewise without KenLM's module or programs, and fail instead when LMGRID_REQUIRE_KENLM=1 (.ci/run, after
`make kenlm`)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PTB_FILES = ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")


@pytest.fixture(scope="session", autouse=True)
def fresh_inductor_cache(tmp_path_factory):
    """Every test session compiles into its own TorchInductor cache (subprocesses inherit it). The default cache,
    /tmp/torchinductor_<user>, is shared by every process of the machine: one killed while writing a kernel left a
    module there that aborted the interpreter (Fatal Python error) in each later test that compiled the same graph
    (seen 2026-11-27; a fresh cache passed)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
        yield


@pytest.fixture(scope="session")
def ptb_dir() -> Path:
    value = os.environ.get("LMGRID_PTB_DIR")
    reason = None
    if not value:
        reason = "LMGRID_PTB_DIR is not set (point it at a folder with ptb.{train,valid,test}.txt)"
    elif not all((Path(value) / f).is_file() for f in PTB_FILES):
        reason = f"LMGRID_PTB_DIR={value} does not hold {', '.join(PTB_FILES)}"
    if reason:
        if os.environ.get("LMGRID_REQUIRE_DATA") == "1":
            pytest.fail(f"required data missing: {reason}")
        pytest.skip(reason)
    return Path(value)


def _kenlm_missing(reason: str):
    if os.environ.get("LMGRID_REQUIRE_KENLM") == "1":
        pytest.fail(f"KenLM required (LMGRID_REQUIRE_KENLM=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kenlm():
    """KenLM's Python module (requirements-test.lock; `make test` installs it)."""
    try:
        import kenlm as module
    except ImportError:
        _kenlm_missing("the kenlm module is not installed (make test installs it)")
    return module


@pytest.fixture(scope="session")
def kenlm_tools() -> dict[str, Path]:
    """KenLM's estimator and scorer, {"lmplz": path, "query": path}: beside this Python first (`make kenlm` builds
    them into the venv), then on PATH."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    tools = {name: shutil.which(name, path=search) for name in ("lmplz", "query")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        _kenlm_missing(f"{' and '.join(missing)} not found (make kenlm builds them into the venv)")
    return {name: Path(path) for name, path in tools.items()}


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


# tests/tiers.py: the fast and full tiers and their guard; pytester: the guard's own test runs a suite inside a suite
pytest_plugins = ["tiers", "pytester"]


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory) -> Path:
    """One empty MLflow sqlite store with MLflow's migrations applied, made once a session: a fresh store runs them
    all (5-20 s on a 2-core machine), a copy of this one opens at once."""
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture(scope="session")
def new_store(mlflow_template):
    """new_store(path) -> the tracking URI of a migrated empty sqlite store at path (a copy of mlflow_template)."""
    import shutil

    def make(path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(mlflow_template, path)
        return f"sqlite:///{path}"

    return make


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory, repo, new_store) -> Path:
    """The shared finished tiny grid (tests/tinygrid.py: GRID), built once a session by a full Snakemake run: its
    work folder, with the run's terminal output in terminal.txt.  Read it; change only a copy (tinygrid.copy_grid).
    Its MLflow store (results/mlflow.db, where the workflow's sync looks) starts as a copy of the migrated one."""
    from tinygrid import GRID, build

    workdir = tmp_path_factory.mktemp("pipeline")
    new_store(workdir / "results" / "mlflow.db")
    build(workdir, repo, GRID)
    return workdir
