"""The GPU check's figures in docs/gpu/README.md come from its snapshot (lmgrid.analysis.docs_gpu), never typed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lmgrid.analysis import docs_gpu, docs_render
from lmgrid.common.errors import LmgridError

REPO = Path(__file__).resolve().parents[1]
SNAP = REPO / "docs" / "results" / "gpu_check"


def copy_of_snapshot(tmp_path: Path) -> Path:
    out = tmp_path / "check"
    out.mkdir()
    for name in docs_gpu.FILES:
        shutil.copyfile(SNAP / name, out / name)
    return out


def test_the_gpu_readme_is_what_the_renderer_writes_and_a_typed_edit_fails(tmp_path):
    """docs/gpu/README.md's blocks equal what `make docs` writes from docs/results/gpu_check.  Kills: a figure of the
    GPU run edited by hand (the in-test control changes the medium cell's valid PPL in a copy: --check fails)."""
    assert not [p for p in docs_render.check(REPO) if "docs/gpu/" in p]
    root = tmp_path / "repo"
    (root / "docs" / "gpu").mkdir(parents=True)
    shutil.copytree(SNAP, root / "docs" / "results" / "gpu_check")
    text = (REPO / "docs" / "gpu" / "README.md").read_text()
    valid = f"{json.loads((SNAP / 'gpu-check.json').read_text())['medium']['bf16-mixed']['valid_ppl']:.2f}"
    assert valid in text
    (root / "docs" / "gpu" / "README.md").write_text(text.replace(valid, "99.99", 1))
    assert any("docs/gpu/README.md" in p for p in docs_render.check(root))


def test_a_failed_step_is_said_and_a_dry_or_gpu_less_check_is_refused(tmp_path):
    """Kills: a verdict line that says passed whatever the failures (the control: the snapshot's own JSON with one
    failure added), and a snapshot taken of a --dry folder or of one with no GPU figures (one line each)."""
    src = copy_of_snapshot(tmp_path)
    report = json.loads((src / "gpu-check.json").read_text())
    assert docs_gpu.gpu_steps(src).startswith("**Every step passed**")
    report.update(ok=False, failures=[{"step": "archs", "error": "9 of 36 runs failed"}])
    (src / "gpu-check.json").write_text(json.dumps(report))
    text = docs_gpu.gpu_steps(src)
    assert text.startswith("**1 step(s) failed** (archs)") and "failed: 9 of 36 runs failed" in text
    files = docs_gpu.snapshot(src, tmp_path / "snap", commit="abc1234")
    assert json.loads((tmp_path / "snap" / "run.json").read_text())["commit"] == "abc1234" and len(files) == 4
    for change, message in (({"dry": True}, "a --dry check"), ({"gpu": None}, "no 'gpu' figures")):
        broken = {**report, **change}
        if broken["gpu"] is None:
            del broken["gpu"]
        (src / "gpu-check.json").write_text(json.dumps(broken))
        with pytest.raises(LmgridError, match=message):
            docs_gpu.snapshot(src, tmp_path / "snap2", commit="abc1234")
    (src / "gpu-check.json").write_text(json.dumps({k: v for k, v in report.items() if k != "commit"}))
    with pytest.raises(LmgridError, match="give --commit"):
        docs_gpu.snapshot(src, tmp_path / "snap3")


def test_a_stated_commit_drops_the_dirty_flag_of_another_commits_tree(tmp_path):
    """The borrowed GPU machine's copy held a stale .git: the check recorded that history's HEAD (f3014f4f0e) and
    "uncommitted changes" for a tree that was commit 0ad66ad. Kills: keeping the report's dirty flag when --commit
    names another commit. In-test control: the same flag is kept when --commit agrees with the report's commit."""
    src = copy_of_snapshot(tmp_path)
    report = json.loads((src / "gpu-check.json").read_text())
    report.update(commit="f3014f4f0e", dirty=True)
    (src / "gpu-check.json").write_text(json.dumps(report))
    docs_gpu.snapshot(src, tmp_path / "other", commit="0ad66ad")
    assert json.loads((tmp_path / "other" / "run.json").read_text())["dirty"] is False
    docs_gpu.snapshot(src, tmp_path / "same", commit="f3014f4")
    assert json.loads((tmp_path / "same" / "run.json").read_text())["dirty"] is True
