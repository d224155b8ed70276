"""What an `lmgrid train` job spends beyond a plain PyTorch loop (python -m lmgrid.bench vs-plain), kept from
creeping back: gate statistics only where the setting asks for them (train.gate_stats), and no heavy library
imported by lmgrid's own modules on the training path."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lmgrid.common.errors import LmgridError
from lmgrid.run import gate_facts
from lmgrid.run.settings import DEFAULTS, NOT_COMPUTING

from test_neural_support import tiny_corpus
from test_neural_train import train

# Libraries no module of lmgrid may import on the way of `lmgrid train`: plots, tables, tracking, the workflow.
HEAVY = ("matplotlib", "mlflow", "pandas", "scipy", "sklearn", "seaborn", "snakemake")
# Of those, the ones that nothing on that way loads at all (matplotlib and scipy.signal are loaded by torchmetrics,
# which Lightning imports eagerly: not lmgrid's to change; docs/benchmarks.md, "Per-job overhead").
NEVER_LOADED = ("mlflow", "pandas", "sklearn", "seaborn", "snakemake")


def gate_problems(run_dir: Path, metrics: dict, asked: bool, reference: dict) -> list[str]:
    """What is wrong with a run's gate output given train.gate_stats = `asked`: gates.csv must exist exactly when
    asked, and the test score must not depend on it (the same pass scores test either way)."""
    problems = []
    if (run_dir / "gates.csv").is_file() != asked:
        problems.append(f"gates.csv {'missing' if asked else 'written'} with gate_stats {asked}")
    if metrics["test"]["nll_nats"] != pytest.approx(reference["test"]["nll_nats"], rel=1e-6):
        problems.append(f"test NLL {metrics['test']['nll_nats']} differs from {reference['test']['nll_nats']}")
    if metrics["hparams"]["gate_stats"] is not asked:
        problems.append("metrics.json's hparams do not say which")
    return problems


def test_gate_statistics_are_gathered_exactly_when_the_setting_asks(tmp_path, monkeypatch):
    """train.gate_stats true (the default): gates.csv; false: none, and test scored to the same NLL.  Kills: the
    setting ignored (statistics gathered, gates.csv written, for every gated run); negative control: that mutation,
    made here by patching train.gathers_gates, is caught."""
    from lmgrid.neural import train as train_mod

    corpus = tiny_corpus(tmp_path)
    on, on_dir = train(corpus, tmp_path / "on", regime="stream", layers=2)
    off, off_dir = train(corpus, tmp_path / "off", regime="stream", layers=2, gate_stats=False)
    assert gate_problems(on_dir, on, True, on) == []
    assert gate_problems(off_dir, off, False, on) == []

    monkeypatch.setattr(train_mod, "gathers_gates", lambda spec: gate_facts.is_gated(spec.arch))
    ignored, ignored_dir = train(corpus, tmp_path / "ignored", regime="stream", layers=2, gate_stats=False)
    assert gate_problems(ignored_dir, ignored, False, on) == ["gates.csv written with gate_stats False"]


def test_the_workflow_keeps_gate_statistics_on(monkeypatch):
    """The default is on and reruns nothing (no rule param, no fingerprint: `x-changes-results: false`), and the
    workflow refuses it off for a gated architecture, whose rule (train_gated) declares gates.csv for the gate
    studies.  Kills: a default of false (the gate analysis loses its data) or the workflow's check dropped;
    negative control: with the check's gated test patched out, off goes through."""
    assert DEFAULTS["gate_stats"] is True and "gate_stats" in NOT_COMPUTING
    gate_facts.check_workflow_gates("ffnn", {"gate_stats": False})
    gate_facts.check_workflow_gates("lstm", {"gate_stats": True})
    for arch in ("lstm", "gru"):
        with pytest.raises(LmgridError, match=rf"^train.gate_stats: false for {arch}, .*gates.csv"):
            gate_facts.check_workflow_gates(arch, {"gate_stats": False})
    monkeypatch.setattr(gate_facts, "is_gated", lambda arch: False)
    gate_facts.check_workflow_gates("lstm", {"gate_stats": False})  # the mutation: nothing stops it
    smk = (Path(__file__).parents[1] / "workflow" / "rules" / "common.smk").read_text()
    assert "check_workflow_gates(arch, hp)" in smk  # where every neural cell's spec is built (_cell_spec)


PROBE = """
import builtins, json, sys
heavy, seen, real = set(json.loads(sys.argv[1])), [], builtins.__import__

def hook(name, globals=None, locals=None, fromlist=(), level=0):
    # Every import statement passes here, of a module loaded already too: whose statement it is counts.
    importer = (globals or {}).get("__name__") or ""
    if level == 0 and name.split(".")[0] in heavy and importer.startswith("lmgrid"):
        seen.append([importer, name])
    return real(name, globals, locals, fromlist, level)

builtins.__import__ = hook
for extra in sys.argv[3:]:
    __import__(extra)
from lmgrid.cli import main
main(json.loads(sys.argv[2]))
print(json.dumps({"by_lmgrid": seen, "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


def import_report(tmp_path: Path, *extra_modules: str) -> dict:
    """The probe's findings over one `lmgrid train --fast` in a fresh interpreter whose path starts at tmp_path (where
    a negative control's module goes), after importing `extra_modules`."""
    corpus = tiny_corpus(tmp_path)
    args = ["train", "--arch", "lstm", "--n-step", "0", "--regime", "stream", "--fast", "--threads", "1",
            *[a for s in ("train", "valid", "test") for a in (f"--{s}", corpus["paths"][s])],
            "--vocab", corpus["vocab_path"], "--run-dir", str(tmp_path / "run"), "--ckpt-dir", str(tmp_path / "ckpt")]
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{Path(__file__).parents[1] / 'src'}"}
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(args), *extra_modules],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_lmgrid_train_imports_no_heavy_library_of_its_own(tmp_path):
    """A whole `lmgrid train` (imports, training, test, writing): no lmgrid module imports matplotlib, mlflow,
    pandas, scipy, sklearn, seaborn or snakemake, and mlflow, pandas, sklearn, seaborn and snakemake are not loaded
    at all.  Kills: a top-level `import matplotlib` (or pandas, mlflow) in a module on the training path; negative
    control: such a module, put on the path and imported first, is caught even though torchmetrics has matplotlib
    loaded already."""
    report = import_report(tmp_path / "clean")
    assert report["by_lmgrid"] == [], report
    assert not set(NEVER_LOADED) & set(report["loaded"]), report

    (tmp_path / "control").mkdir()
    (tmp_path / "control" / "lmgrid_negative_control.py").write_text("import matplotlib.pyplot\nimport pandas\n")
    caught = import_report(tmp_path / "control", "lmgrid_negative_control")
    assert ["lmgrid_negative_control", "matplotlib.pyplot"] in caught["by_lmgrid"], caught
    assert "pandas" in caught["loaded"], caught


def recurrence_problems(rnn, width: int) -> list[str]:
    """Where an nn.LSTM's initial recurrence departs from lmgrid's recipe (lmgrid.models.common.init_recurrence)."""
    import torch

    problems = []
    for name, p in rnn.named_parameters():
        if name.startswith("weight_hh"):
            for k, block in enumerate(p.detach().split(width, 0)):
                if not torch.allclose(block @ block.T, torch.eye(width), atol=1e-4):
                    problems.append(f"{name} block {k} is not orthogonal")
        elif name.startswith("bias"):
            want = torch.zeros_like(p)
            if name.startswith("bias_ih"):
                want[width:2 * width] = 1.0
            if not torch.equal(p.detach(), want):
                problems.append(f"{name} is not lmgrid's (0, forget gate 1)")
    return problems


def test_the_plain_script_initialises_the_recurrence_as_lmgrid_does():
    """vs-plain's two sides are one model with one recipe: the plain script's LSTM starts as lmgrid's (orthogonal
    recurrence, forget-gate bias 1).  Kills: the plain script on nn.LSTM's default init (the recipe difference that
    parted their valid PPLs); negative control: a default nn.LSTM of the same shape shows it."""
    import torch

    from lmgrid.bench.plain_lstm import LSTMLM

    torch.manual_seed(0)
    assert recurrence_problems(LSTMLM(50, 8, 2).rnn, 8) == []
    assert len(recurrence_problems(torch.nn.LSTM(8, 8, 2, batch_first=True), 8)) == 2 * 4 + 2 * 2
