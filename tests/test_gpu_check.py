"""tools/gpu_check.py (issue 45) on a CPU: its --dry form reaches the point where the check would use CUDA, with the
modules the GPU machine lacks blocked, and stops there; anything failing before it is one line and a non-zero exit.
The GPU steps themselves run only where a GPU is (make gpu-check, docs/gpu/README.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STOP = "stopped where the check would use the GPU"
# Test-only: lmgrid's training-settings check as it was before issue 45, needing jsonschema wherever it runs.
JSONSCHEMA_REQUIRED = '''
import lmgrid.run.settings as hparams

def check_types(values, section="train"):
    import jsonschema  # noqa: F401 - what the GPU machine does not have

assert hasattr(hparams, "check_types"), "the settings check this control replaces was renamed"
hparams.check_types = check_types
'''


def gpu_check(tmp_path: Path, *args: str, env: dict | None = None, inject: str | None = None):
    """The check in its own process, as `make gpu-check-dry` runs it; its result and its JSON (None if absent)."""
    paths = [str(REPO / "src"), os.environ.get("PYTHONPATH", "")]
    if inject is not None:  # a sitecustomize first on the path: applied before the check starts
        folder = tmp_path / "inject"
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(inject)
        paths.insert(0, str(folder))
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), **(env or {})}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(REPO / "tools" / "gpu_check.py"), "--out", str(out), *args],
                          capture_output=True, text=True, env=full_env, timeout=300, cwd=tmp_path)
    report = out / "gpu-check.json"
    return done, json.loads(report.read_text()) if report.is_file() else None


@pytest.mark.full  # reads the Penn Treebank (tests/tiers.py)
def test_the_dry_form_stops_where_the_gpu_would_be_used(tmp_path, ptb_dir):
    """Config from the preset, PTB through the corpus and vocab stages, the training stack imported, the GPU tests
    collected, then one line and exit 0, with the JSON and the log written.  Kills: a dry form that skips or stops
    before a step yet exits 0 (each step's figures are asserted), one that touches CUDA before the stop (a CPU
    build of torch raises there), and one whose stop line is missing or that writes no log."""
    done, report = gpu_check(tmp_path, "--dry", env={"LMGRID_PTB_DIR": str(ptb_dir)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu-check --dry: ") and last.endswith(STOP), last
    assert "gpu-check: error" not in done.stderr, done.stderr
    assert report["ok"] and report["dry"] and report["stopped_at"] == "cuda" and not report["failures"], report
    assert report["config"]["cell"] == "lstm n0 l2 stream s1" and report["config"]["hp"]["hidden_dim"] == 650
    assert report["data"]["vocab_size"] == 10002 and report["data"]["words"]["train"] == 887521, report["data"]
    assert report["versions"]["blocked"] == ["snakemake", "mlflow", "gensim", "jsonschema"]
    collected = report["tests"]["ids"]
    assert len(collected) == report["tests"]["collected"] > 0
    assert any(t.startswith("tests/test_gpu_path.py::") for t in collected), collected
    arch_runs = report["plan"]["arch_runs"]
    assert {r.split()[0] for r in arch_runs} == {"ffnn", "rnn", "lstm", "gru", "transformer"}
    assert {"lstm cell adaptive 32-true", "lstm concat full bf16-mixed"} <= set(arch_runs), arch_runs
    assert last in (tmp_path / "out" / "gpu-check.log").read_text()


@pytest.mark.parametrize("case", ["empty PTB folder", "missing preset"])
def test_the_dry_form_fails_with_one_line_before_the_stop(tmp_path, case):
    """A step before the CUDA point fails: exit 1, exactly one stderr line naming the step and the cause, no stop
    line, and the JSON says so.  Negative controls of the test above: an empty LMGRID_PTB_DIR and a preset path
    that does not exist.  Kills: a dry form that exits 0 past a failed step, or reports it as a traceback."""
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["--dry"] + (["--preset", str(tmp_path / "nope.yaml")] if case == "missing preset" else [])
    done, report = gpu_check(tmp_path, *args, env={"LMGRID_PTB_DIR": str(empty)})
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    want = (f"gpu-check: error: config: LMGRID_PTB_DIR={empty}: ptb.train.txt not found in it"
            if case == "empty PTB folder" else f"gpu-check: error: config: {tmp_path / 'nope.yaml'}: file not found")
    assert done.stderr.splitlines() == [want], done.stderr
    assert STOP not in done.stdout
    assert not report["ok"] and "stopped_at" not in report and report["failures"][0]["step"] == "config"


@pytest.mark.full  # reads the Penn Treebank (tests/tiers.py)
def test_the_check_runs_without_the_modules_the_gpu_machine_lacks(tmp_path, ptb_dir):
    """The check blocks Snakemake, MLflow, gensim and jsonschema in its process, as the GPU machine lacks them.
    The negative control: lmgrid's training-settings check put back as it was before issue 45 (jsonschema needed
    wherever it runs) makes the dry form fail in one line naming jsonschema.  Kills: a check that does not block
    them (that control would pass here, where they are installed, and fail only on the GPU machine)."""
    done, _ = gpu_check(tmp_path, "--dry", env={"LMGRID_PTB_DIR": str(ptb_dir)}, inject=JSONSCHEMA_REQUIRED)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: error: config: ") and "jsonschema" in lines[0], lines


def test_without_dry_and_without_a_gpu_is_one_line_at_once(tmp_path):
    """No GPU visible (CUDA_VISIBLE_DEVICES empty) and no --dry: exit 2 with one line, before any step.  Kills: the
    full check running on a CPU machine (training the medium cell there) or failing somewhere in the middle."""
    done, report = gpu_check(tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert done.stderr.splitlines() == ["gpu-check: error: gpu: no NVIDIA GPU visible here (no /dev/nvidia* device, "
                                        "or CUDA_VISIBLE_DEVICES hides it); on a CPU: --dry"], done.stderr
    assert "== config" not in done.stdout and report["failures"][0]["step"] == "gpu"


def test_the_identity_step_rebuilds_the_fingerprint_train_wrote(tmp_path):
    """The identity step (GPU only) rebuilds the checkpoint fingerprint of the resume step's run from its hand_spec
    kwargs; here it is compared with the one train._run wrote beside the checkpoint of a CPU run killed at epoch 2.
    Kills: a rebuild that has drifted from train._run's signature (the 4-argument call that failed on the first GPU
    run, 2026-11-27: the in-test control raises TypeError) and one that leaves out the precision (another precision
    must give another fingerprint)."""
    sys.path.insert(0, str(REPO / "tools"))
    from gpu_check_steps import rebuilt_fingerprint
    from test_neural_support import TINY, killed_at_epoch, tiny_corpus

    from lmgrid.neural import train as train_mod
    from lmgrid.run.spec import hand_spec

    corpus = tiny_corpus(tmp_path)
    kwargs = {"arch": "lstm", "n_step": 5, "layers": 1, "regime": "stream", "seed": 1, "paths": corpus["paths"],
              "vocab_path": corpus["vocab_path"], "run_dir": str(tmp_path / "run"), "ckpt_dir": str(tmp_path / "ckpt"),
              "hp": {**TINY, "epochs": 2, "threads": 1}}
    with killed_at_epoch(1):
        train_mod.run(hand_spec(**kwargs))
    stored = (tmp_path / "ckpt" / "fingerprint.txt").read_text().strip()
    precision = train_mod._placement(hand_spec(**kwargs))[1]
    assert rebuilt_fingerprint(kwargs, "cpu", precision) == stored
    other = "32-true" if precision != "32-true" else "bf16-mixed"
    assert rebuilt_fingerprint(kwargs, "cpu", other) != stored

    def stale(kwargs, device, precision):  # the identity step as the first GPU run had it
        run_info = {k: kwargs[k] for k in ("arch", "n_step", "layers", "regime", "seed")}
        return train_mod._fingerprint(run_info, kwargs["hp"], kwargs["paths"], {"device": device, "precision": precision})

    with pytest.raises(TypeError):
        stale(kwargs, "cpu", precision)


def test_a_stated_commit_wins_over_the_trees_git_history(monkeypatch):
    """$LMGRID_COMMIT names the commit a copied tree is (a borrowed GPU machine's copy may hold a stale .git: the
    2026-11-27 check recorded that history's HEAD, f3014f4f0e, and "uncommitted changes" for a tree at 0ad66ad).
    Kills: source_commit reading git first (this repository's own HEAD is never the stated value). Control: without
    the variable, git's HEAD of this repository is read."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check_tool", REPO / "tools" / "gpu_check.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setenv("LMGRID_COMMIT", "feedc0de12")
    assert tool.source_commit() == {"commit": "feedc0de12"}
    monkeypatch.delenv("LMGRID_COMMIT")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("this copy of the repository has no git history")
    assert tool.source_commit()["commit"] == head.stdout.strip()
