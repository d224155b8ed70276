"""Mirror run folders and study outputs into MLflow: one experiment per corpus, one run per grid cell,
one run per study.  The aggregation job is the only writer within one Snakemake run; runs sharing one sqlite
store take turns through its writer lock (lmgrid.tracking.store_lock).

Idempotent: each MLflow run carries the tag `lmgrid.run_key` (the run folder, or `study:<name>`) and a
hash of the files it mirrors.  A sync finds runs by that tag; an unchanged run is left alone, a changed one
(the cell was retrained) is replaced by a fresh run with the same tag and the old one is deleted, so the
active run count never grows.  Params are immutable in MLflow, hence replacement rather than update.
The tracking URI is always passed explicitly (the retired ./mlruns file store is never used).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import pandas as pd

from lmgrid.common import gitinfo, plugins
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.run.key import RunKey, all_runs, expand_study
from lmgrid.tracking import artifact_store, store_lock
from lmgrid.tracking.curves import CurveDrawer
from lmgrid.analysis.collect import read_benchmark, read_gates, read_log
from lmgrid.analysis.layout import EMBEDDING_VECTORS, EMBEDDINGS_DIR, STUDIES_DIR
from lmgrid.run.live import check_mlflow
from lmgrid.tracking.view import EXPERIMENT_KIND, VIEW_TAGS

TAG_KEY = "lmgrid.run_key"
TAG_HASH = "lmgrid.content_sha256"
TAG_KIND = "lmgrid.kind"
TAG_STUDIES = "lmgrid.studies"
TAG_MODEL = "lmgrid.model"
# Every experiment's tags (EXPERIMENT_KIND: the UI's own tag for classic model training; VIEW_TAGS: the shared
# training view that `make mlflow`'s address opens) are in lmgrid.tracking.view.
MODEL_FORMAT = "pyfunc-2"  # in every cell's content hash: a change here re-logs every cell once
FINAL_KEYS = ("params", "train_tokens_per_s", "epochs", "wall_s")
NUMERIC_PARAMS = ("order",)
TAG_KEYS = ("stopped_because", "device", "torch_version", "lightning_version")
KEY_FIELDS = ("name", "arch", "impl", "n_step", "layers", "regime", "seed", "valid", "test")
VERSIONED = ("lmgrid", "torch", "pytorch-lightning", "lightning", "mlflow", "pandas", "numpy", "snakemake",
             "matplotlib", "kenlm", "scipy", "gensim", "scikit-learn")


def client_for(uri: str):
    from mlflow import MlflowClient

    check_mlflow({"tracking_uri": uri}, source="--tracking-uri")
    db = artifact_store.sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    artifact_store.install()
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def experiment_id(client, name: str, uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        for k, v in {**EXPERIMENT_KIND, **VIEW_TAGS}.items():  # experiments created before a tag existed get it too
            if exp.tags.get(k) != v:
                client.set_experiment_tag(exp.experiment_id, k, v)
        return exp.experiment_id
    # mlflow-artifacts:/<name> (mlartifacts/ beside a sqlite database, wherever it moves) or the server's default.
    return client.create_experiment(name, artifact_location=artifact_store.experiment_location(uri, name),
                                    tags={**EXPERIMENT_KIND, **VIEW_TAGS})


def _drop_empty_default(client) -> None:
    """A new store starts with an experiment `Default` whose artifacts would go to ./mlruns; lmgrid never uses it,
    so an empty one is deleted (MLflow keeps it as deleted: it is out of the UI and of searches)."""
    default = client.get_experiment("0")
    if default is not None and default.lifecycle_stage == "active" and not client.search_runs(["0"], max_results=1):
        client.delete_experiment("0")


def environment() -> dict[str, str]:
    """The project's git commit and the installed package versions, recorded on every run."""
    tags = {}
    here = gitinfo.commit(".", short=None)  # MLflow's UI shows and links the whole hash
    if here["commit"] == gitinfo.UNKNOWN:
        tags["mlflow.source.git.commit"] = "unknown (not a git checkout)"
    else:
        tags["mlflow.source.git.commit"] = here["commit"]
        tags["lmgrid.git_dirty"] = str(here["dirty"]).lower()
    for pkg in VERSIONED:
        try:
            tags[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    tags["version.python"] = sys.version.split()[0]
    return tags


def packages_text() -> str:
    names = sorted({(d.metadata["Name"] or "?").lower(): d.version for d in metadata.distributions()}.items())
    return "".join(f"{n}=={v}\n" for n, v in names)


def _sha(paths: list[Path], extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(p.name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"<missing>") + b"\0")
    return h.hexdigest()


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(value)[:6000]
    elif value is not None:
        out[prefix] = str(value)[:6000]


def cell_payload(key: RunKey, run_dir: Path) -> dict:
    """Params, tags, final metrics and metric histories of one run folder (no MLflow calls)."""
    # The run's fields by name, without the file format's version: a cell trained before the field existed and one
    # trained after it log the same params and metrics.
    m = RunRecord.read(run_dir / RECORD_FILE).results()
    params = {k: str(getattr(key, k)) for k in ("arch", "impl", "n_step", "layers", "regime", "seed")}
    extras = {k: v for k, v in m.items() if k not in KEY_FIELDS and k not in FINAL_KEYS and k not in TAG_KEYS}
    # Top-level numbers (train_tokens, best_epoch, ...) are results; settings (hparams, the n-gram order) are params.
    numbers = {k: float(v) for k, v in extras.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NUMERIC_PARAMS}
    _flatten("", {k: v for k, v in extras.items() if k not in numbers}, params)
    tags = {k: str(m[k]) for k in TAG_KEYS if m.get(k) is not None}
    final = {}
    for split in ("valid", "test"):
        for k, v in m[split].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                final[f"{split}_{k}"] = float(v)
    for k in FINAL_KEYS:
        if isinstance(m.get(k), (int, float)):
            final["n_params" if k == "params" else k] = float(m[k])
    final.update(numbers)
    for k in [k for k in params if k.endswith("_s") and "." in k]:  # timings (e.g. timing.score_s) are results
        try:
            final[k] = float(params[k])
        except ValueError:
            continue
        del params[k]
    history = []  # (key, value, step)
    if (run_dir / "log.csv").is_file():
        log = read_log(run_dir / "log.csv")
        for _, row in log.iterrows():
            step = int(row["step"])
            history.append(("epoch", float(row["epoch"]), step))
            for col in ("train_loss", "train_ppl", "valid_loss", "valid_ppl", "lr", "wall_s"):
                if pd.notna(row[col]):
                    history.append((f"epoch/{col}", float(row[col]), step))
    if (run_dir / "gates.csv").is_file():
        g = read_gates(run_dir / "gates.csv")
        for _, row in g[g["scope"] == "all"].iterrows():
            for col in ("mean", "std", "frac_left_saturated", "frac_right_saturated"):
                final[f"gates/{layer_label(row['layer'])}/{row['gate']}/{col}"] = float(row[col])
        for _, row in g[g["scope"] == "position"].iterrows():
            history.append((f"gates_by_position/{layer_label(row['layer'])}/{row['gate']}/mean", float(row["mean"]),
                            int(row["index"])))
    return {"params": params, "tags": tags, "final": final, "history": history}


def embedding_payload(root: Path, corpus: str, key: RunKey) -> tuple[dict[str, float], list[Path]]:
    """The cell's word-vector scores (results/<corpus>/embeddings/embeddings.csv, lmgrid.embed) as metrics
    embed_<embedding>_<score>, missing scores left out, and its vector files; nothing when that job did not run."""
    table = root / EMBEDDINGS_DIR.format(corpus=corpus) / "embeddings.csv"
    if key.is_ngram or not table.is_file():
        return {}, []
    rows = pd.read_csv(table, keep_default_na=False, na_values=["", "nan"])
    metrics = {}
    for _, row in rows[rows["run"] == key.run_dir(corpus)].iterrows():
        for col in rows.columns[rows.columns.get_loc("dim") + 1:]:
            if pd.notna(row[col]):
                metrics[f"embed_{row['embedding']}_{col}"] = float(row[col])
    return metrics, sorted((root / key.beside(corpus, EMBEDDING_VECTORS)).glob("*.w2v.txt"))


def layer_label(layer: int) -> str:
    """gates.csv counts layers from 0 (docs/contracts.md); a metric name, like the tables and figures, from 1."""
    return f"l{int(layer) + 1}"


def _log_all(client, run_id: str, params: dict, tags: dict, final: dict, history: list, when_ms: int,
             model_id: str | None = None) -> None:
    """One log_batch call: MLflow splits it into requests within its per-batch limits itself.  With `model_id`, the
    final metrics are also the logged model's."""
    from mlflow.entities import Metric, Param, RunTag

    metrics = [Metric(k, v, when_ms, 0, model_id=model_id) for k, v in final.items()]
    metrics += [Metric(k, v, when_ms, s) for k, v, s in history]
    client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])


def run_times_ms(run_dir: Path, record: RunRecord) -> tuple[int, int]:
    """When the run's work began and ended: metrics.json's start_unix_s / end_unix_s; for results written before
    those existed, the file's modification time and wall_s."""
    end = record.get("end_unix_s") or (run_dir / RECORD_FILE).stat().st_mtime
    start = record.get("start_unix_s") or end - float(record.get("wall_s") or 0.0)
    return int(start * 1000), int(end * 1000)


def benchmark_metrics(path: Path) -> dict[str, float]:
    """The job's wall time from its Snakemake benchmark file, as `bench_wall_s` ({} when none).  Its peak RSS and
    CPU time are left out: a training job forked from the warm server is not in the job's process tree, so they
    would be the thin client's.  The run's own `cpu_s` and `max_rss_mib` (metrics.json, lmgrid.common.resources) are
    logged instead."""
    wall = read_benchmark(path).get("wall_s")
    return {} if wall is None else {"bench_wall_s": wall}


class CorpusData:
    """What every run of a corpus was trained and scored on: its splits and vocabulary as MLflow dataset inputs
    (with sha256 digests, so retraining on changed data shows), and the corpus and vocabulary settings as params."""

    def __init__(self, root: Path, corpus: str, settings: dict | None = None):
        self.root = Path(root)
        base = self.root / f"results/{corpus}"
        files = {s: base / f"corpus/{s}.txt" for s in ("train", "valid", "test")} | {"vocab": base / "vocab.json"}
        self.files = {name: path for name, path in files.items() if path.is_file()}
        self.digests = {}
        for name, path in self.files.items():
            with path.open("rb") as fh:
                self.digests[name] = hashlib.file_digest(fh, "sha256").hexdigest()
        self.params: dict[str, str] = {}
        _flatten("", settings or {}, self.params)
        if (base / "vocab_report.json").is_file():
            self.params["vocab.size"] = str(read_json(base / "vocab_report.json")["vocab_size"])
        if (base / "corpus/corpus_stats.json").is_file():
            for split, stats in read_json(base / "corpus/corpus_stats.json")["splits"].items():
                for k in ("sentences", "tokens"):
                    if k in stats:
                        self.params[f"corpus.{split}.{k}"] = str(stats[k])

    def fingerprint(self) -> str:
        return json.dumps([self.digests, self.params], sort_keys=True)

    def source(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def log_inputs(self, client, run_id: str) -> None:
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.sources import LocalArtifactDatasetSource
        from mlflow.entities import DatasetInput, InputTag

        # MLflow stores at most 36 characters of a dataset digest: the first 32 hex digits of the sha256.  A source
        # is the file's path relative to the folder holding results/ (results/<corpus>/...): the same on every clone.
        inputs = [DatasetInput(MetaDataset(LocalArtifactDatasetSource(self.source(path)), name=name,
                                           digest=self.digests[name][:32])._to_mlflow_entity(),
                               tags=[InputTag("mlflow.data.context", "vocabulary" if name == "vocab" else name)])
                  for name, path in self.files.items()]
        if inputs:
            client.log_inputs(run_id, datasets=inputs)


class Syncer:
    def __init__(self, uri: str, experiment: str, data: CorpusData | None = None, register_models: bool = False,
                 jobs: int = 1):
        """`jobs`: processes, this one and `jobs - 1` that draw the cells' curves ahead (lmgrid.tracking.curves)."""
        self.uri = uri
        self.client = client_for(uri)
        self.experiment = experiment
        self.experiment_id = experiment_id(self.client, experiment, uri)
        _drop_empty_default(self.client)
        self.env = environment()
        self.data = data
        self.register_models = register_models
        self.existing = self._existing()
        self.counts = {"created": 0, "replaced": 0, "unchanged": 0}
        self._packages = None
        self._code: Path | None = None
        self._closing = contextlib.ExitStack()
        # closed in reverse: the drawing children stop before their folder is removed
        self.curves = self._closing.enter_context(contextlib.closing(
            CurveDrawer(self._closing.enter_context(tempfile.TemporaryDirectory()), jobs)))

    def code(self) -> Path:
        """lmgrid's source, copied on the first model this syncer logs (pyfunc_model.package_source) and logged as
        the code of every model after it; a sync that logs no model copies nothing."""
        if self._code is None:
            from lmgrid.tracking import pyfunc_model

            self._code = self._closing.enter_context(pyfunc_model.package_source())
        return self._code

    def close(self) -> None:
        """Remove the source copy (if one was made) and the curves; stop the processes drawing them."""
        self._closing.close()
        self._code = None

    def _existing(self) -> dict[str, object]:
        """Active runs by run-key tag; stray duplicates (a sync killed mid-way) are deleted."""
        import mlflow
        from mlflow.entities import ViewType

        found: dict[str, list] = {}
        mlflow.set_tracking_uri(self.uri)  # the fluent search pages through every result itself
        for r in mlflow.search_runs([self.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, output_format="list"):
            if TAG_KEY in r.data.tags:
                found.setdefault(r.data.tags[TAG_KEY], []).append(r)
        out = {}
        for key, runs in found.items():
            runs.sort(key=lambda r: (r.data.tags.get(TAG_HASH) is not None, r.info.start_time), reverse=True)
            out[key] = runs[0]
            for r in runs[1:]:
                self.client.delete_run(r.info.run_id)
        return out

    def _packages_file(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        p = folder / "packages.txt"
        if self._packages is None:
            self._packages = packages_text()
        p.write_text(self._packages, encoding="utf-8")
        return p

    def _current(self, tag: str, digest: str) -> bool:
        """Whether the store already holds `tag`'s run with this content hash (a sync leaves it alone)."""
        old = self.existing.get(tag)
        return old is not None and old.data.tags.get(TAG_HASH) == digest

    def _start(self, tag: str, digest: str, run_name: str, tags: dict, start_ms: int | None = None):
        """The existing run for `tag` if its content hash matches (None), else a fresh run."""
        old = self.existing.get(tag)
        if self._current(tag, digest):
            self.counts["unchanged"] += 1
            for k, v in tags.items():  # mutable bookkeeping (e.g. which studies hold the cell)
                if old.data.tags.get(k) != v:
                    self.client.set_tag(old.info.run_id, k, v)
            return old, False
        run = self.client.create_run(self.experiment_id, run_name=run_name, start_time=start_ms,
                                     tags={TAG_KEY: tag, **self.env, **tags})
        if old is not None:
            self.client.set_tag(run.info.run_id, "lmgrid.replaces", old.info.run_id)
            self._delete_models_of(old.info.run_id)
            self.client.delete_run(old.info.run_id)
            self.counts["replaced"] += 1
        else:
            self.counts["created"] += 1
        self.existing[tag] = run
        return run, True

    def _finish(self, run_id: str, digest: str, end_ms: int | None = None) -> None:
        # The hash goes last: a run killed before this point is replaced on the next sync.
        self.client.set_tag(run_id, TAG_HASH, digest)
        self.client.set_terminated(run_id, "FINISHED", end_time=end_ms)

    def _log_model(self, key: RunKey, tag: str, run_id: str, run_dir: Path, params: dict) -> str | None:
        """The cell's model as an MLflow pyfunc model named after the cell (RunKey.slug, e.g. runs:/<id>/lstm-torch-
        n5-l1-window-s1; pyfunc_model: its model.ckpt or model.arpa and the vocabulary as artifacts; a LoggedModel in
        the Models view), its id; None, with the reason in the tag lmgrid.model, when there is none to log.  With
        mlflow.register_models, also a registered model version."""
        import mlflow

        from lmgrid.tracking import pyfunc_model

        model_file = run_dir / ("model.arpa" if key.is_ngram else "model.ckpt")
        reason = pyfunc_model.unloadable_reason(model_file)
        if reason is not None:
            self.client.set_tag(run_id, TAG_MODEL, reason)
            return None
        files = self.data.files if self.data is not None else {}
        with mlflow.start_run(run_id=run_id, log_system_metrics=False):
            plugin = plugins.facts(key.arch)  # a plug-in's class file goes with its model
            info = pyfunc_model.log_cell_model(key.slug, model_file, files.get("vocab"), files.get("test"), params,
                                               {TAG_KEY: tag}, self.code(), plugin.source if plugin else None)
        self.client.set_tag(run_id, TAG_MODEL, info.model_uri)
        if self.register_models:
            name = registered_name(self.experiment, key)
            from mlflow.exceptions import MlflowException

            try:
                self.client.create_registered_model(name)
            except MlflowException:
                pass  # registered by an earlier sync: add a version
            self.client.create_model_version(name, source=info.model_uri, run_id=run_id, model_id=info.model_id)
        return info.model_id

    def _delete_models_of(self, run_id: str) -> None:
        """The logged models of a replaced run leave the Models view with it."""
        for m in self.client.search_logged_models([self.experiment_id], filter_string=f"source_run_id = '{run_id}'"):
            self.client.delete_logged_model(m.model_id)

    def _cell_files(self, run_dir: Path) -> list[Path]:
        files = [run_dir / f for f in (RECORD_FILE, "log.csv", "gates.csv")]
        if not files[0].is_file():
            raise LmgridError(f"{files[0]}: file not found (run the training first)")
        return files

    def _cell_digest(self, files: list[Path], embed: tuple[dict[str, float], list[Path]]) -> str:
        # The files' bytes, as they are on disk: a cell is re-mirrored only when its folder changed (retrained).
        return _sha(files, extra=MODEL_FORMAT + (self.data.fingerprint() if self.data else "")
                    + json.dumps(embed[0], sort_keys=True))

    def draw_curve_ahead(self, key: RunKey, tag: str, run_dir: Path,
                         embed: tuple[dict[str, float], list[Path]] = ({}, [])) -> None:
        """Start drawing the curve of a cell that `sync_cell` will re-mirror (none for a current one)."""
        files = self._cell_files(run_dir)
        if files[1].is_file() and not self._current(tag, self._cell_digest(files, embed)):
            self.curves.ahead(tag, files[1], key.name)

    def sync_cell(self, key: RunKey, tag: str, run_dir: Path, studies: list[str], bench: Path | None = None,
                  embed: tuple[dict[str, float], list[Path]] = ({}, [])) -> str:
        """`tag` is the run folder relative to the repository (results/<corpus>/runs/...); `bench` the job's
        Snakemake benchmark file; `embed` its word-vector scores and vector files (embedding_payload)."""
        files = self._cell_files(run_dir)
        digest = self._cell_digest(files, embed)
        tags = {TAG_KIND: "cell", TAG_STUDIES: ",".join(studies)}
        start_ms, end_ms = run_times_ms(run_dir, RunRecord.read(files[0]))
        run, fresh = self._start(tag, digest, key.name, tags, start_ms)
        if not fresh:
            return run.info.run_id
        rid = run.info.run_id
        payload = cell_payload(key, run_dir)
        params = {**payload["params"], **(self.data.params if self.data else {})}
        final = {**payload["final"], **(benchmark_metrics(bench) if bench else {}), **embed[0]}
        # The model first: its final metrics (test_ppl, ...) are then logged once, linked to it for the Models view.
        model_id = self._log_model(key, tag, rid, run_dir, payload["params"])
        _log_all(self.client, rid, params, payload["tags"], final, payload["history"], end_ms, model_id)
        if self.data is not None:
            self.data.log_inputs(self.client, rid)
        with tempfile.TemporaryDirectory() as tmp:  # staged, then one upload (one request over http)
            for f in files:
                if f.is_file():
                    shutil.copyfile(f, Path(tmp) / f.name)
            if files[1].is_file():
                shutil.copyfile(self.curves.path(tag, files[1], key.name), Path(tmp) / "curve.png")
            for f in embed[1]:  # the word vectors, word2vec format
                (Path(tmp) / "embeddings").mkdir(exist_ok=True)
                shutil.copyfile(f, Path(tmp) / "embeddings" / f.name)
            self._packages_file(Path(tmp) / "environment")
            self.client.log_artifacts(rid, tmp)
        self._finish(rid, digest, end_ms)
        return rid

    def sync_study(self, name: str, study: dict, study_dir: Path, cell_ids: dict[RunKey, str],
                   ppl: dict[RunKey, tuple[float, float]]) -> str:
        """One run per study: its tables and figures, its runs' table, and the metrics `best_valid_ppl` and
        `test_ppl_of_best_valid`: the run with the lowest valid PPL, chosen on valid (never on test), and its test
        PPL.  `ppl`: each cell's (valid PPL, test PPL)."""
        keys = expand_study(study)
        files = sorted(p for p in study_dir.iterdir() if p.is_file()) if study_dir.is_dir() else []
        if not files:
            raise LmgridError(f"{study_dir}: no study outputs (run `lmgrid aggregate` first)")
        runs = pd.DataFrame({"run": [k.name for k in keys], "mlflow_run_id": [cell_ids[k] for k in keys],
                             "valid_ppl": [ppl.get(k, (None, None))[0] for k in keys],
                             "test_ppl": [ppl.get(k, (None, None))[1] for k in keys]})
        digest = _sha([p for p in files if p.suffix in (".csv", ".md", ".tex")],
                      extra=json.dumps(study, sort_keys=True) + runs.to_csv(index=False))
        run, fresh = self._start(f"study:{name}", digest, f"study: {name}", {TAG_KIND: "study"})
        if not fresh:
            return run.info.run_id
        rid = run.info.run_id
        params = {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in study.items()}
        final = {"runs": float(len(keys))}
        final.update(best_on_valid(runs))
        _log_all(self.client, rid, params, {}, final, [], int(time.time() * 1000))
        self.client.log_table(rid, runs, "tables/runs.json")
        with tempfile.TemporaryDirectory() as tmp:
            for p in files:
                if p.suffix == ".csv":
                    self.client.log_table(rid, pd.read_csv(p), f"tables/{p.stem}.json")
                (Path(tmp) / "study").mkdir(exist_ok=True)
                shutil.copyfile(p, Path(tmp) / "study" / p.name)
            self._packages_file(Path(tmp) / "environment")
            self.client.log_artifacts(rid, tmp)
        self._finish(rid, digest)
        return rid


    def sync_combination(self, path: Path) -> str:
        """One run per combination (lmgrid.testtime.combine): components and their weights as params, the mixture's and
        each component's valid and test PPL as metrics, its table as artifacts."""
        result = read_json(path)
        files = sorted(p for p in path.parent.iterdir() if p.is_file() and not p.name.startswith("."))
        digest = _sha(files)
        name = result.get("run") or result["name"]  # a combination run per seed: one MLflow run each (<name>/s<seed>)
        run, fresh = self._start(f"combination:{name}", digest, f"combination: {name}", {TAG_KIND: "combination"})
        if not fresh:
            return run.info.run_id
        rid = run.info.run_id
        params = {"method": result["method"], "components": str(len(result["labels"]))}
        final = {"valid_ppl": result["valid_ppl"], "test_ppl": result["test_ppl"],
                 "em_iterations": float(result["iterations"])}
        for i, (label, w, v, t) in enumerate(zip(result["labels"], result["weights"], result["component_valid_ppl"],
                                                 result["component_test_ppl"])):
            params[f"component_{i}"] = label
            params[f"weight_{i}"] = f"{w:.6g}"
            final[f"component_{i}_valid_ppl"], final[f"component_{i}_test_ppl"] = v, t
        # Test-time modes (lmgrid.testtime.combine.adapted): the mode, the settings chosen on valid, the one-stream base PPLs.
        for i, c in enumerate(result.get("components", [])):
            params[f"component_{i}_mode"] = c.get("mode", "base")
            if c.get("adapt"):
                params.update({f"component_{i}_{k}": str(v) for k, v in c["adapt"]["settings"].items()})
                final[f"component_{i}_base_valid_ppl"] = c["adapt"]["base_valid_ppl"]
                final[f"component_{i}_base_test_ppl"] = c["adapt"]["base_test_ppl"]
        _log_all(self.client, rid, params, {}, final, [], int(time.time() * 1000))
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "combination").mkdir()
            for p in files:
                shutil.copyfile(p, Path(tmp) / "combination" / p.name)
            self.client.log_artifacts(rid, tmp)
        self._finish(rid, digest)
        return rid


def best_on_valid(runs: pd.DataFrame) -> dict[str, float]:
    """A study run's `best_valid_ppl` and `test_ppl_of_best_valid`: the run (a row of `runs`, columns valid_ppl and
    test_ppl) with the lowest valid PPL, the first on a tie, and that run's test PPL; {} when no run has a valid PPL.
    Chosen on valid, never on test (issue 44): the test PPL is only reported."""
    valid = pd.to_numeric(runs["valid_ppl"], errors="coerce")
    if valid.isna().all():
        return {}
    best = runs.loc[valid.idxmin()]
    return {"best_valid_ppl": float(best["valid_ppl"]), "test_ppl_of_best_valid": float(best["test_ppl"])}


def registered_name(experiment: str, key: RunKey) -> str:
    """The registered-model name of a grid cell (mlflow.register_models): experiment and run key."""
    return f"{experiment}.{key.arch}.{key.impl}.n{key.n_step}.l{key.layers}.{key.regime}.s{key.seed}"


def sync(uri: str, corpus: str, studies: dict, root: str | Path = ".", experiment_prefix: str = "",
         data_settings: dict | None = None, register_models: bool = False, combinations: list = (),
         jobs: int = 1, cells_only: bool = False) -> dict:
    """Sync every run of every study, then one run per study; returns counts and run ids.  `data_settings`: the
    config's corpus and vocab sections, logged as params with the dataset inputs.  `jobs`: processes, this one
    (the store's writer) and `jobs - 1` drawing the cells' curves ahead.  `cells_only`: the cells' runs alone (the
    workflow's `mlflow_cells` job, which needs no study table and so runs beside the aggregation; the `mlflow_sync`
    after it finds those runs current and adds the studies and combinations).  Holds the store's writer lock
    throughout (lmgrid.tracking.store_lock), from MLflow's schema creation to the last run."""
    with store_lock.writing(uri):
        return _sync(uri, corpus, studies, root, experiment_prefix, data_settings, register_models, combinations,
                     jobs, cells_only)


def _sync(uri: str, corpus: str, studies: dict, root: str | Path, experiment_prefix: str, data_settings: dict | None,
          register_models: bool, combinations: list, jobs: int, cells_only: bool = False) -> dict:
    root = Path(root)
    with contextlib.closing(Syncer(uri, experiment_prefix + corpus, CorpusData(root, corpus, data_settings),
                                   register_models, jobs)) as syncer:
        membership: dict[RunKey, list[str]] = {}
        for name, study in studies.items():
            for k in expand_study(study):
                membership.setdefault(k, []).append(name)
        cells = [(key, key.run_dir(corpus), root / key.run_dir(corpus), embedding_payload(root, corpus, key))
                 for key in all_runs(studies)]
        for key, tag, run_dir, embed in cells:  # every curve queued first: the children draw while cells are written
            syncer.draw_curve_ahead(key, tag, run_dir, embed)
        cell_ids, ppl = {}, {}
        for key, tag, run_dir, embed in cells:
            cell_ids[key] = syncer.sync_cell(key, tag, run_dir, membership[key],
                                             root / key.beside(corpus, "benchmarks/runs", ".tsv"), embed)
            record = RunRecord.read(run_dir / RECORD_FILE)
            ppl[key] = (record.valid.ppl, record.test.ppl)
        study_ids, combination_ids = {}, {}
        if not cells_only:
            for name, study in studies.items():
                study_dir = root / STUDIES_DIR.format(corpus=corpus) / name
                study_ids[name] = syncer.sync_study(name, study, study_dir, cell_ids, ppl)
            combination_ids = {(lambda r: r.get("run") or r["name"])(read_json(root / p)):
                               syncer.sync_combination(root / p) for p in combinations}
        return {"tracking_uri": uri, "experiment": experiment_prefix + corpus, "experiment_id": syncer.experiment_id,
                **syncer.counts, "cells": len(cell_ids), "studies": study_ids, "combinations": combination_ids}
