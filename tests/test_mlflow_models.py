"""MLflow models of trained cells (a tiny LSTM and a KN trigram): loadable pyfunc models that score like the cell,
in the Models view, registered, and still loadable after results/ moves."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from lmgrid import cli
from lmgrid.tracking.pyfunc_model import perplexity_of
from lmgrid.tracking.mirror import TAG_MODEL, CorpusData, Syncer, registered_name
from lmgrid.data.corpus import load_split
from lmgrid.neural import train as train_mod
from lmgrid.run.spec import hand_spec
from lmgrid.run.key import normalise

from test_mlflow import fluent_uri
from test_neural_support import TINY, tiny_corpus

CORPUS = "c"
LSTM = normalise("lstm", "torch", 3, 1, "window", 1)
KN = normalise("kn", "ngram", 3, 1, "window", 0)
NO_ARPA = normalise("kn", "ngram", 2, 1, "window", 0)  # trained with write_arpa false


def _ngram(root, c, key, write_arpa="auto") -> None:
    run = root / key.run_dir(CORPUS)
    assert cli.main(["ngram", "--counts", str(root / "counts.npz"), "--vocab", c["vocab_path"], "--valid",
                     c["paths"]["valid"], "--test", c["paths"]["test"], "--arch", key.arch, "--order",
                     str(key.n_step), "--arpa", str(run / "model.arpa"), "--metrics", str(run / "metrics.json"),
                     "--write-arpa", write_arpa]) == 0


@pytest.fixture(scope="module")
def clone(tmp_path_factory, new_store):
    """A clone's results/ with three trained cells, synced to results/mlflow.db."""
    root = tmp_path_factory.mktemp("models") / "clone"
    c = tiny_corpus(root, corpus=CORPUS)
    train_mod.run(hand_spec(arch="lstm", impl="torch", n_step=3, layers=1, regime="window", seed=1, paths=c["paths"],
                            vocab_path=c["vocab_path"], run_dir=str(root / LSTM.run_dir(CORPUS)),
                            ckpt_dir=str(root / "ckpt"), hp=TINY), threads=1)
    assert cli.main(["ngram-counts", "--train", c["paths"]["train"], "--vocab", c["vocab_path"], "--max-order", "3",
                     "--out", str(root / "counts.npz")]) == 0
    _ngram(root, c, KN)
    _ngram(root, c, NO_ARPA, write_arpa="false")
    uri = new_store(root / "results" / "mlflow.db")
    syncer = Syncer(uri, CORPUS, CorpusData(root, CORPUS), register_models=True)
    ids = {k: syncer.sync_cell(k, k.run_dir(CORPUS), root / k.run_dir(CORPUS), ["s"]) for k in (LSTM, KN, NO_ARPA)}
    return root, ids


def _test_ppl_through_mlflow(root, model_uri: str) -> float:
    test = load_split(root / f"results/{CORPUS}/corpus/test.txt")
    with fluent_uri(f"sqlite:///{root}/results/mlflow.db"):
        model = mlflow.pyfunc.load_model(model_uri)
    pred = model.predict(pd.DataFrame({"sentence": [" ".join(s) for s in test]}))
    assert list(pred.columns) == ["log_prob_nats", "tokens"] and len(pred) == len(test)
    as_list = model.predict([" ".join(s) for s in test[:3]])  # a list of strings works too
    assert as_list.equals(pred.iloc[:3].reset_index(drop=True))
    return perplexity_of(pred)


@pytest.mark.parametrize("key", [LSTM, KN], ids=["lstm", "kn"])
def test_loaded_model_scores_the_test_split_like_the_cell(clone, key):
    """mlflow.pyfunc.load_model(runs:/<id>/<cell slug>).predict on the test split gives the cell's test PPL.
    kills: predict dropping </s>'s log-prob (or counting <s>, which its own target check also stops), log10."""
    root, ids = clone
    metrics = json.loads((root / key.run_dir(CORPUS) / "metrics.json").read_text())
    ppl = _test_ppl_through_mlflow(root, f"runs:/{ids[key]}/{key.slug}")
    assert ppl == pytest.approx(metrics["test"]["ppl"], rel=1e-6)


def test_models_view_signature_and_registration(clone):
    """A LoggedModel per loadable cell (with its test_ppl, signature and input example), one registered version
    each; an n-gram cell without its ARPA file logs no model and says so."""
    root, ids = clone
    uri = f"sqlite:///{root}/results/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(CORPUS)
    assert exp.artifact_location == f"mlflow-artifacts:/{CORPUS}"  # no absolute path into the clone
    with fluent_uri(uri):
        models = mlflow.search_logged_models(experiment_ids=[exp.experiment_id], output_format="list")
    by_run = {m.source_run_id: m for m in models}
    assert set(by_run) == {ids[LSTM], ids[KN]}
    for key in (LSTM, KN):
        m = by_run[ids[key]]
        metrics = json.loads((root / key.run_dir(CORPUS) / "metrics.json").read_text())
        assert {x.key: x.value for x in m.metrics}["test_ppl"] == pytest.approx(metrics["test"]["ppl"])
        assert m.artifact_location.startswith(f"mlflow-artifacts:/{CORPUS}/models/")
        files = {a.path for a in client.list_logged_model_artifacts(m.model_id)}
        assert {"MLmodel", "python_model.pkl", "input_example.json", "artifacts"} <= files
        info = mlflow.models.get_model_info(f"{root}/results/mlartifacts/{CORPUS}/models/{m.model_id}/artifacts")
        assert info.signature.inputs.input_types() == [mlflow.types.DataType.string]
        assert info.saved_input_example_info["type"] == "dataframe"
        assert info.signature.outputs.input_names() == ["log_prob_nats", "tokens"]
        assert client.get_run(ids[key]).data.tags[TAG_MODEL] == f"models:/{m.model_id}"
        versions = client.search_model_versions(f"name = '{registered_name(CORPUS, key)}'")
        assert [(v.run_id, v.source) for v in versions] == [(ids[key], f"models:/{m.model_id}")]
    assert client.get_run(ids[NO_ARPA]).data.tags[TAG_MODEL].startswith("no model: model.arpa is a note")
    assert not client.search_model_versions(f"name = '{registered_name(CORPUS, NO_ARPA)}'")


def test_models_load_after_results_moves(clone, tmp_path):
    """Artifact URIs are mlflow-artifacts:/..., resolved beside the database wherever it is: a moved results/
    still loads and scores.  kills: experiments created at an absolute file:// location."""
    root, ids = clone
    moved = tmp_path / "elsewhere"
    shutil.copytree(root / "results", moved / "results")
    shutil.rmtree(root / "results" / "mlartifacts")  # nothing may still read the old place
    try:
        metrics = json.loads((moved / KN.run_dir(CORPUS) / "metrics.json").read_text())
        assert _test_ppl_through_mlflow(moved, f"runs:/{ids[KN]}/{KN.slug}") == pytest.approx(metrics["test"]["ppl"],
                                                                                        rel=1e-6)
        client = MlflowClient(tracking_uri=f"sqlite:///{moved}/results/mlflow.db")
        model_id = client.get_run(ids[LSTM]).data.tags[TAG_MODEL].split("/")[-1]
        metrics = json.loads((moved / LSTM.run_dir(CORPUS) / "metrics.json").read_text())
        assert _test_ppl_through_mlflow(moved, f"models:/{registered_name(CORPUS, LSTM)}/1") == pytest.approx(
            metrics["test"]["ppl"], rel=1e-6)
        assert _test_ppl_through_mlflow(moved, f"models:/{model_id}") == pytest.approx(metrics["test"]["ppl"],
                                                                                       rel=1e-6)
    finally:
        shutil.copytree(moved / "results" / "mlartifacts", root / "results" / "mlartifacts")


def test_one_sync_copies_lmgrids_source_once_for_all_its_models(clone, tmp_path, monkeypatch, new_store):
    """A sync copies lmgrid's source (the models' code) once however many models it logs, removes the copy when it
    ends, and copies nothing when it logs no model (MLflow copies the source twice more per model).  Kills: the
    source packaged again for every model (negative control, run here: a syncer whose code() packages on every
    call makes two copies for the two models), a copy left behind when the sync ends (seen failing with
    Syncer.close doing nothing), and a copy made by a sync with nothing to log (seen failing with the copy made in
    Syncer.__init__)."""
    from lmgrid.tracking import pyfunc_model

    root, ids = clone
    made, real = [], pyfunc_model.package_source

    @contextlib.contextmanager
    def counted():
        with real() as code:
            made.append(code)
            yield code

    monkeypatch.setattr(pyfunc_model, "package_source", counted)

    def sync(store: Path) -> Syncer:
        with contextlib.closing(Syncer(new_store(store) if not store.exists() else f"sqlite:///{store}", CORPUS,
                                       CorpusData(root, CORPUS))) as syncer:
            for k in ids:
                syncer.sync_cell(k, k.run_dir(CORPUS), root / k.run_dir(CORPUS), ["s"])
        return syncer  # alive: its copy must be gone when the sync ends, not when it is garbage

    first = sync(tmp_path / "once" / "mlflow.db")
    assert first.counts["created"] == 3 and len(made) == 1 and not made[0].exists()
    assert sync(tmp_path / "once" / "mlflow.db").counts["unchanged"] == 3 and len(made) == 1  # nothing to log
    monkeypatch.setattr(Syncer, "code", lambda self: self._closing.enter_context(pyfunc_model.package_source()))
    sync(tmp_path / "mutant" / "mlflow.db")
    assert len(made) == 3  # the mutant: one copy per model


def test_second_sync_logs_nothing_new(clone):
    root, ids = clone
    uri = f"sqlite:///{root}/results/mlflow.db"
    syncer = Syncer(uri, CORPUS, CorpusData(root, CORPUS), register_models=True)
    again = {k: syncer.sync_cell(k, k.run_dir(CORPUS), root / k.run_dir(CORPUS), ["s"]) for k in ids}
    assert again == ids and syncer.counts == {"created": 0, "replaced": 0, "unchanged": 3}
    exp = MlflowClient(tracking_uri=uri).get_experiment_by_name(CORPUS).experiment_id
    with fluent_uri(uri):
        assert len(mlflow.search_logged_models(experiment_ids=[exp], output_format="list")) == 2


def make_mlflow_command(venv: Path, port: int) -> list[str]:
    """The command `make mlflow` runs (the Makefile's recipe), for this environment and port."""
    import re
    import shlex

    recipe = re.search(r"^mlflow:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)[1]
    line = [x for x in recipe.replace("\\\n", " ").splitlines() if " ui " in x][0].strip()
    return shlex.split(line.replace("$(VENV)", str(venv)).replace("$(MLFLOW_PORT)", str(port)))


@pytest.mark.slow
def test_models_load_through_make_mlflow(clone, tmp_path):
    """The command `make mlflow` runs (`mlflow ui --backend-store-uri sqlite:///results/mlflow.db
    --artifacts-destination results/mlartifacts ...`), started in a copy of the clone, serves the models: a client
    over http loads one and gets the cell's test PPL."""
    import subprocess
    import sys

    from test_mlflow import _free_port, _stop, _wait_healthy

    root, ids = clone
    moved = tmp_path / "copy"
    shutil.copytree(root / "results", moved / "results")
    port = _free_port()
    cmd = make_mlflow_command(Path(sys.executable).parents[1], port) + ["--workers", "1"]
    assert cmd[1:6] == ["ui", "--backend-store-uri", "sqlite:///results/mlflow.db", "--artifacts-destination",
                        "results/mlartifacts"], cmd
    with open(tmp_path / "ui.log", "w") as log:
        server = subprocess.Popen(cmd, cwd=moved, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_healthy(server, port, tmp_path / "ui.log")
            metrics = json.loads((moved / KN.run_dir(CORPUS) / "metrics.json").read_text())
            test = load_split(moved / f"results/{CORPUS}/corpus/test.txt")
            with fluent_uri(f"http://127.0.0.1:{port}"):
                model = mlflow.pyfunc.load_model(f"runs:/{ids[KN]}/{KN.slug}")
            ppl = perplexity_of(model.predict([" ".join(s) for s in test]))
            assert ppl == pytest.approx(metrics["test"]["ppl"], rel=1e-6)
        finally:
            _stop(server)


REPO = Path(__file__).resolve().parents[1]
# MLflow's own loader in a fresh interpreter: no lmgrid import before it, the tracking URI of MLflow's docs.
PLAIN_LOAD = """
import json, sys
import mlflow
if sys.argv[3] == "without-entry-point":  # the mutant: what MLflow does with no lmgrid installed
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry
    from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository
    _artifact_repository_registry.register("mlflow-artifacts", MlflowArtifactsRepository)
mlflow.set_tracking_uri(sys.argv[1])
model = mlflow.pyfunc.load_model(sys.argv[2])
print(json.dumps(model.predict(["the cat sat"]).to_dict("list")))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """lmgrid's installed metadata as pip writes it from pyproject.toml (a .dist-info folder with METADATA and
    entry_points.txt), without building anything: the package itself is imported from this checkout."""
    import tomllib

    import lmgrid

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    target = tmp_path_factory.mktemp("site")
    info = target / f"lmgrid-{lmgrid.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: lmgrid\nVersion: {lmgrid.__version__}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items()) + "\n"
        for group, points in project.get("entry-points", {}).items()))
    return target


def test_plain_mlflow_load_with_the_sqlite_uri(clone, installed):
    """`mlflow.set_tracking_uri("sqlite:///results/mlflow.db"); mlflow.pyfunc.load_model("runs:/<id>/<cell>")`, as
    MLflow's docs show it, loads a cell's model in a fresh process where lmgrid is installed, with nothing imported
    from lmgrid first: its `mlflow.artifact_repository` entry point maps mlflow-artifacts:/ under the store's
    mlartifacts/.  Negative control, the mutation it kills: no such entry point (MLflow's own repository for the
    scheme), which fails with "the tracking URI must be a valid http or https URI"."""
    import subprocess
    import sys
    from importlib.metadata import Distribution

    root, ids = clone
    [dist] = Distribution.discover(name="lmgrid", path=[str(installed)])
    assert [(e.name, e.value) for e in dist.entry_points.select(group="mlflow.artifact_repository")] == [
        ("mlflow-artifacts", "lmgrid.tracking.artifact_store:repository")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(REPO / "src")])}
    uri, model = f"sqlite:///{root}/results/mlflow.db", f"runs:/{ids[KN]}/{KN.slug}"
    ok = subprocess.run([sys.executable, "-c", PLAIN_LOAD, uri, model, "as-installed"], env=env, cwd=root,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(ok.stdout.splitlines()[-1])["tokens"] == [4]  # the cat sat </s>
    mutant = subprocess.run([sys.executable, "-c", PLAIN_LOAD, uri, model, "without-entry-point"], env=env,
                            cwd=root, capture_output=True, text=True, timeout=300)
    assert mutant.returncode != 0 and "must be a valid http or https URI" in mutant.stderr


FRESH_LOAD = """
import importlib.util, json, sys
assert importlib.util.find_spec("lmgrid") is None, "lmgrid is importable before the model is loaded"
import mlflow
model = mlflow.pyfunc.load_model(sys.argv[1])
pred = model.predict(open(sys.argv[2]).read().splitlines())
import lmgrid
print(json.dumps({"log_prob_nats": float(pred["log_prob_nats"].sum()), "tokens": int(pred["tokens"].sum()),
                  "lmgrid": lmgrid.__file__}))
"""


def _norm(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: list[str]) -> set[str]:
    """The distributions the requirements name and everything they require (extras left out), normalised."""
    import re
    from importlib import metadata

    todo, seen = [re.split(r"[=<>!~;\[ ]", r, maxsplit=1)[0] for r in requirements], set()
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [re.split(r"[=<>!~;\[ (]", req, maxsplit=1)[0] for req in metadata.requires(name) or []
                     if "extra ==" not in req]
        except metadata.PackageNotFoundError:
            pass
    return seen


def _fresh_venv(path: Path, requirements: list[str]) -> Path:
    """A new virtual environment holding exactly the requirements and what they require, taken from this
    environment (symlinks to their files in a folder a .pth line adds to its path) so that torch need not be
    installed again; lmgrid is not among them.  Returns its python."""
    import subprocess
    import sys
    from importlib import metadata

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    wanted, shelf = _closure(requirements) | {"pip"}, path / "requirements"
    shelf.mkdir()
    for dist in metadata.distributions():
        if _norm(dist.metadata["Name"]) not in wanted:
            continue
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (shelf / top).exists():
                (shelf / top).symlink_to(source)
    Path(site, "requirements.pth").write_text(f"{shelf}\n")
    return python


@pytest.mark.slow
def test_a_logged_model_loads_in_a_fresh_environment(clone, tmp_path, new_store):
    """A cell's model, copied out of the store, loads and scores in a new virtual environment that holds only its
    requirements.txt and what they require: they are satisfied there offline (`pip install --no-index -r`; no
    `+cpu` local versions), lmgrid comes from the model's own code folder (code_paths), and the test split scores
    to the cell's test PPL.
    Negative control, the mutation it kills: a model logged without lmgrid's source (code_paths empty), which
    fails to load there with "No module named 'lmgrid'"."""
    import subprocess
    import sys

    from lmgrid.tracking import pyfunc_model

    root, ids = clone
    client = MlflowClient(tracking_uri=f"sqlite:///{root}/results/mlflow.db")
    model_id = client.get_run(ids[LSTM]).data.tags[TAG_MODEL].split("/")[-1]
    model_dir = tmp_path / "model"
    shutil.copytree(root / f"results/mlartifacts/{CORPUS}/models/{model_id}/artifacts", model_dir)
    requirements = (model_dir / "requirements.txt").read_text().split()
    assert not [r for r in requirements if "+" in r] and any(r.startswith("torch==") for r in requirements)
    test = tmp_path / "test.txt"
    test.write_text((root / f"results/{CORPUS}/corpus/test.txt").read_text())

    python = _fresh_venv(tmp_path / "venv", requirements)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "-r",
                          str(model_dir / "requirements.txt")], env=env, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    done = subprocess.run([str(python), "-c", FRESH_LOAD, str(model_dir), str(test)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert Path(out["lmgrid"]).is_relative_to(model_dir / "code")
    metrics = json.loads((root / LSTM.run_dir(CORPUS) / "metrics.json").read_text())
    assert perplexity_of(pd.DataFrame([out])) == pytest.approx(metrics["test"]["ppl"], rel=1e-6)

    # The mutant: the same cell logged without lmgrid's source (an empty folder as its code).
    empty = tmp_path / "empty" / "not_lmgrid"
    empty.mkdir(parents=True)
    mutant_uri = new_store(tmp_path / "mutant" / "mlflow.db")
    mlflow_client = MlflowClient(tracking_uri=mutant_uri)
    with fluent_uri(mutant_uri):
        exp = mlflow_client.create_experiment("mutant", artifact_location=(tmp_path / "mutant_art").as_uri())
        with mlflow.start_run(experiment_id=exp):
            info = pyfunc_model.log_cell_model(LSTM.slug, root / LSTM.run_dir(CORPUS) / "model.ckpt",
                                               root / f"results/{CORPUS}/vocab.json", test, {}, {}, empty)
        mutant_dir = tmp_path / "mutant_model"
        shutil.copytree(mlflow.artifacts.download_artifacts(info.model_uri), mutant_dir)
    failed = subprocess.run([str(python), "-c", FRESH_LOAD, str(mutant_dir), str(test)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "No module named 'lmgrid'" in failed.stderr
