"""What a workflow job pays before its command runs: every `lmgrid` process builds the whole parser (lmgrid.cli,
PLUGINS), so registering the commands must import none of torch, Lightning, pandas, scipy, matplotlib or MLflow.
Each of those is an import of 0.5-4 CPU-seconds, and the default run starts ~30 jobs that never use them
(docs/benchmarks.md, "Per-job overhead")."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lmgrid

HEAVY = ("torch", "lightning", "pytorch_lightning", "pandas", "scipy", "matplotlib", "mlflow")
SRC = str(Path(lmgrid.__file__).resolve().parent.parent)


def heavy_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running `code` (with lmgrid.cli imported as cli)."""
    script = f"import json, sys\nfrom lmgrid import cli\n{code}\nprint(json.dumps(sorted(m for m in {HEAVY!r} " \
             "if m in sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_building_the_parser_imports_no_heavy_library():
    """Kills: a plugin module (or a module its register() imports) importing pandas, scipy or torch at module level,
    as lmgrid.analysis.docs_render (docs_tables: pandas), lmgrid.testtime.adapt's __init__ (torch) and
    lmgrid.analysis.budget (pandas, scipy.stats) did.  Negative control: the same check sees docs_render's old
    module-level import of docs_tables, put back by wrapping its register()."""
    assert heavy_after("cli.build_parser()") == []
    put_back = ("import lmgrid.analysis.docs_render as d\n_r = d.register\n"
                "def register(sub):\n    import lmgrid.analysis.docs_tables\n    _r(sub)\n"
                "d.register = register\ncli.build_parser()")
    assert "pandas" in heavy_after(put_back)


def test_a_light_command_runs_without_a_heavy_library(tmp_path):
    """`lmgrid vocab` parses and runs without any HEAVY import: the job pays only for what it computes.  Kills: the
    parser's imports (above) and a light command's own module importing pandas or torch.  Negative control: the
    `summary` command's module does import pandas, and the check sees it."""
    args = ["vocab"]
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a b c\nb c d\n")
        args += [f"--{split}", str(tmp_path / f"{split}.txt")]
    args += ["--out", str(tmp_path / "vocab.json"), "--report", str(tmp_path / "vocab_report.json")]
    run = f"assert cli.main({args!r}) == 0"
    assert heavy_after(run) == []
    assert (tmp_path / "vocab.json").is_file()
    assert "pandas" in heavy_after("import lmgrid.analysis.summary")


def test_scoring_from_a_saved_model_imports_torch_but_not_lightning():
    """`lmgrid reset-scores` (4 jobs in the default run) evaluates a saved model: torch, not Lightning (about 3
    CPU-seconds a job).  Kills: evaluate/corpus_order back in lmgrid.neural.module or LMData back in
    lmgrid.neural.data (both import pytorch_lightning).  Negative control: the training module does import it."""
    used = ("import lmgrid.testtime.reset\nfrom lmgrid.neural.evaluation import corpus_order, evaluate\n"
            "from lmgrid.neural.data import StreamChunks, sentence_rows\nfrom lmgrid.neural.model_io import load_run")
    assert heavy_after(used) == ["torch"]
    assert "pytorch_lightning" in heavy_after("import lmgrid.neural.module")
