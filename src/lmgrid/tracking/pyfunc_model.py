"""A grid cell's model as an MLflow pyfunc model: `mlflow.pyfunc.load_model(uri).predict(sentences)`.

The wrapper holds the run's own model file (model.ckpt or model.arpa, with the corpus vocabulary beside it)
and scores through `lmgrid.lm.load(...).sentence_logprobs`, the code `lmgrid score --run` runs, so a
prediction follows the shared convention of `lmgrid.data.ppl`: per sentence, the sum of the natural-log
probabilities of its words and the final </s> (never <s>; unknown words are <unk>) and how many tokens that
counts.  PPL over sentences = exp(-sum log_prob_nats / sum tokens): `perplexity_of(prediction)`.

For window-regime and n-gram cells, the PPL of the test split equals the cell's test PPL; a stream-regime
cell reads each sentence from a zero state, whereas its test PPL carried the state across sentences.

A model carries lmgrid with it: the package's source is logged as the model's code (`code_paths`; MLflow puts it
on sys.path before unpickling the wrapper, which refers to this module), and requirements.txt pins what loading
and predicting import (mlflow, pandas, numpy; torch and pytorch-lightning for a neural cell) by their public
versions (no `+cpu`).
So `pip install -r <model>/requirements.txt` and `mlflow.pyfunc.load_model(...)` load it outside this project.
"""
from __future__ import annotations

import contextlib
import logging
import os
from importlib import metadata
from pathlib import Path

import pandas as pd

from lmgrid.common.errors import LmgridError
from lmgrid.data.ppl import perplexity, targets

COLUMN = "sentence"
OUTPUTS = ("log_prob_nats", "tokens")
EXAMPLE_SENTENCES = 3
PACKAGE = Path(__file__).resolve().parents[1]  # src/lmgrid: logged with every model as its code


def _mlflow():
    import mlflow.pyfunc

    return mlflow


class LmgridPyfunc(_mlflow().pyfunc.PythonModel):
    """Scores sentences (space-separated tokens) under the run's model."""

    def load_context(self, context) -> None:
        from lmgrid import lm

        # A plug-in's run: its class file travels as an artifact, imported from there (docs/models.md).
        self.model = lm.load(Path(context.artifacts["model"]).parent, context.artifacts.get("plugin"))

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        sentences = [str(s).split() for s in sentences_of(model_input)]
        per = self.model.sentence_logprobs(sentences)
        tokens = [len(targets(s)) for s in sentences]
        if [len(lps) for lps in per] != tokens:
            raise AssertionError("the model scored other targets than lmgrid.data.ppl.targets counts")
        return pd.DataFrame({OUTPUTS[0]: [float(sum(lps)) for lps in per], OUTPUTS[1]: tokens})


def sentences_of(model_input) -> list:
    """The sentences of a DataFrame's `sentence` column (or its only column: MLflow hands a list of strings over as
    a one-column frame), a Series, or a list of strings."""
    if isinstance(model_input, pd.DataFrame):
        if COLUMN in model_input.columns:
            return model_input[COLUMN].tolist()
        if len(model_input.columns) != 1:
            raise LmgridError(f"predict input: expected a column {COLUMN!r}, got {list(model_input.columns)}")
        return model_input.iloc[:, 0].tolist()
    if isinstance(model_input, pd.Series):
        return model_input.tolist()
    if isinstance(model_input, str):
        return [model_input]
    return list(model_input)


def perplexity_of(prediction: pd.DataFrame) -> float:
    """The PPL of the sentences a prediction scored (lmgrid.data.ppl.perplexity)."""
    return perplexity(-float(prediction["log_prob_nats"].sum()), int(prediction["tokens"].sum()))


def signature():
    """Input: one string column, left unnamed so that a plain list of strings passes MLflow's schema check too (a
    named column would refuse it); the input example names it `sentence`."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, DataType, Schema

    return ModelSignature(inputs=Schema([ColSpec(DataType.string)]),
                          outputs=Schema([ColSpec(DataType.double, OUTPUTS[0]), ColSpec(DataType.long, OUTPUTS[1])]))


def input_example(text_path: Path | None) -> pd.DataFrame:
    """The first sentences of a split (the corpus's test split), else a made-up one."""
    lines = []
    if text_path is not None and text_path.is_file():
        with text_path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    lines.append(" ".join(line.split()))
                if len(lines) == EXAMPLE_SENTENCES:
                    break
    return pd.DataFrame({COLUMN: lines or ["an example sentence"]})


def requirements(neural: bool) -> list[str]:
    """Pinned from this environment (no inference: MLflow's would load each model in a subprocess), by public
    version: a local label such as torch's `+cpu` names a build, which another machine's index need not have
    (pip's `torch==2.13.0` accepts the +cpu build where that is installed).  lmgrid itself is not a requirement:
    the model carries its source (code_paths)."""
    from packaging.version import Version

    pins = []
    # A neural cell's loader imports Lightning too (lmgrid.neural.data's DataModule module).
    for pkg in ("mlflow", "pandas", "numpy", *(("torch", "pytorch-lightning") if neural else ())):
        try:
            pins.append(f"{pkg}=={Version(metadata.version(pkg)).public}")
        except metadata.PackageNotFoundError:
            pins.append(pkg)
    return pins


@contextlib.contextmanager
def package_source():
    """A copy of lmgrid's source (.py files only: no caches, no build leftovers) to log as models' code.  One copy
    serves every model of a sync (mirror.Syncer.code): MLflow copies it twice more for each model it logs, and on
    a slow disk creating those files is a large part of the sync job."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(PACKAGE, Path(tmp) / PACKAGE.name,
                        ignore=lambda d, names: [n for n in names if not (n.endswith(".py") or (Path(d) / n).is_dir())
                                                 or n == "__pycache__"])
        yield Path(tmp) / PACKAGE.name


def unloadable_reason(model_file: Path) -> str | None:
    """Why a run's model file cannot back a pyfunc model (None: it can)."""
    if not model_file.is_file():
        return f"no model: {model_file.name} missing"
    if model_file.suffix == ".arpa":
        from lmgrid.ngram.model import ARPA_NOT_WRITTEN

        with model_file.open("rb") as fh:
            if fh.read(len(ARPA_NOT_WRITTEN)).decode(errors="replace") == ARPA_NOT_WRITTEN:
                return "no model: model.arpa is a note, the run did not write its ARPA file (ngram.write_arpa)"
    return None


class _DropPickleNotice(logging.Filter):
    """MLflow warns on every model that a Python object is cloudpickled: expected here (the object holds no state;
    its class is pickled by reference to this module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "causes it to be serialized using CloudPickle" not in record.getMessage()


@contextlib.contextmanager
def _quiet():
    """No per-model pickle notice, and no download progress bars (MLflow validates the input example by loading
    the model back) in the sync job's log."""
    log, notice = logging.getLogger("mlflow.pyfunc"), _DropPickleNotice()
    saved = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    log.addFilter(notice)
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        log.removeFilter(notice)
        if saved is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = saved


def log_cell_model(name: str, model_file: Path, vocab: Path | None, example_text: Path | None, params: dict,
                   tags: dict, code: Path, plugin_source: str | None = None):
    """Log the pyfunc model of one cell, named `name` (RunKey.slug), into the active run; returns MLflow's
    ModelInfo.  `code`: lmgrid's source as package_source copied it, logged as the model's code.  `plugin_source`:
    a plug-in cell's class file, logged beside the model so it loads in a fresh process without the user's
    folder."""
    mlflow = _mlflow()
    artifacts = {"model": str(model_file)}
    if plugin_source:
        artifacts["plugin"] = str(plugin_source)
    if vocab is not None and vocab.is_file():
        artifacts["vocab"] = str(vocab)
    with _quiet():
        return mlflow.pyfunc.log_model(name=name, python_model=LmgridPyfunc(), artifacts=artifacts,
                                       code_paths=[str(code)], signature=signature(),
                                       input_example=input_example(example_text),
                                       pip_requirements=requirements(model_file.suffix == ".ckpt"),
                                       params=params, tags=tags)
