"""tools/avx2_calibration.py (`make avx2-calibration`): the share for `make first-run --avx2-emulation`, from the
reference commit's `make run` timed here with the kernels capped at AVX2 against the same run on a real AVX2-only CPU.

The tool clones and runs a tiny git repository here (its Makefile checks the promises: the reference commit, empty
caches, the AVX2 caps and no CPU quota), so the test takes a second.  No figure of this machine is asserted.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmgrid.analysis import docs_tables
from lmgrid.neural.precision import AVX2_FLAGS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
_spec = importlib.util.spec_from_file_location("avx2_calibration_tool", REPO / "tools" / "avx2_calibration.py")
calibration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibration)

# setup: fails unless uv's cache is an empty folder and pip's is off; run: fails unless the kernels are capped at
# AVX2 and lmgrid is told an AVX2-only CPU's flags, and records the commit it ran at.
MAKEFILE = """\
setup:
\t@test -d "$$UV_CACHE_DIR" && test -z "$$(ls -A "$$UV_CACHE_DIR")" && test "$$PIP_NO_CACHE_DIR" = 1
run:
\t@test "$$ONEDNN_MAX_CPU_ISA" = AVX2 && test "$$ATEN_CPU_CAPABILITY" = avx2 && test "$$MKL_ENABLE_INSTRUCTIONS" = AVX2
\t@test "$$LMGRID_CPU_FLAGS" = "$$(cat flags.txt)"
\t@git rev-parse HEAD > ran_at.txt
\t@sleep 1
"""


def _repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository of two commits: the reference (its Makefile checks the run) and a later one (HEAD)."""
    repo = tmp_path / "src" / "lmgrid"
    repo.mkdir(parents=True)
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "flags.txt").write_text(" ".join(AVX2_FLAGS))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, env=env, capture_output=True,
                                    text=True).stdout.strip()
    git("init", "-q"), git("add", "-A"), git("commit", "-q", "-m", "reference")
    reference = git("rev-parse", "HEAD")
    (repo / "Makefile").write_text("setup:\nrun:\n\t@false\n")  # HEAD's run would fail: the reference must run
    git("commit", "-q", "-am", "later")
    return repo, reference, git("rev-parse", "HEAD")


def test_the_share_is_this_machines_time_over_the_references_rounded_down():
    """Kills: the ratio the wrong way round (reference over here), rounding to nearest (0.84 below), and no cap at 1
    for a machine slower than the reference; each run as a temporary edit of share_of, and failed."""
    assert calibration.share_of(483, 577) == 0.83
    assert calibration.share_of(0.839 * 577, 577) == 0.83
    assert calibration.share_of(700, 577) == 1.0
    assert calibration.share_of(288.5, 577) == 0.5


def test_the_reference_commit_runs_with_the_avx2_caps_and_writes_a_snapshot(tmp_path, monkeypatch, capsys):
    """The reference commit, not HEAD, is cloned and run, with empty caches and the kernels capped at AVX2; the
    snapshot holds both runs and the share, and renders.  Kills: HEAD cloned instead of the reference commit (its
    run fails), the AVX2 caps left out of the environment (the run fails), the share computed from another figure
    than this run's `make run` seconds; seen failing by hand."""
    repo, reference, head = _repo(tmp_path)
    monkeypatch.setattr(calibration, "REFERENCE_COMMIT", reference)
    monkeypatch.setattr(calibration, "REFERENCE", {**calibration.REFERENCE, "run_s": 100})
    out = tmp_path / "docs" / "results" / "avx2_calibration"
    assert calibration.main(["--repo", str(repo), "--parent", str(tmp_path), "--keep", "--out", str(out)]) == 0
    c = json.loads((out / calibration.CALIBRATION_FILE).read_text())
    assert c["reference"]["commit"] == reference and c["here"]["commit"] == reference
    assert c["here"]["kernels"] == "avx2"
    assert c["cpu_share"] == calibration.share_of(c["here"]["run_s"], 100)
    ran_at = next(tmp_path.glob("lmgrid-avx2-calibration.*/lmgrid/ran_at.txt")).read_text().strip()
    assert ran_at == reference != head
    run = json.loads((out / calibration.RUN_FILE).read_text())
    assert run["commit"] == reference[:10] and run["corpus"] == "synth" and "cpu" in run["machine"]
    assert "--avx2-emulation" in capsys.readouterr().out


def test_a_repository_without_the_reference_commit_is_one_line(tmp_path, capsys):
    """Kills: a run that clones and fails later with a traceback when the reference commit is missing."""
    repo, _, _ = _repo(tmp_path)
    with pytest.raises(SystemExit) as stop:
        calibration.main(["--repo", str(repo), "--parent", str(tmp_path), "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert "has no commit" in capsys.readouterr().err
    assert not list(tmp_path.glob("lmgrid-avx2-calibration.*"))


def test_an_out_that_is_a_file_stops_before_the_run(tmp_path, monkeypatch, capsys):
    """Kills: a --out that is a file accepted, the run made, and the figures lost to a traceback at the end."""
    repo, reference, _ = _repo(tmp_path)
    monkeypatch.setattr(calibration, "REFERENCE_COMMIT", reference)
    (tmp_path / "out").write_text("a file\n")
    with pytest.raises(SystemExit) as stop:
        calibration.main(["--repo", str(repo), "--parent", str(tmp_path), "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'out'}: not a folder" in err
    assert not list(tmp_path.glob("lmgrid-avx2-calibration.*"))


def test_the_calibration_renders_both_runs_and_the_share(tmp_path):
    """The docs table names the reference's CPU and source, this machine as capped at AVX2, both `make run` times
    and the share.  Kills: the two times swapped between the rows, the share left out (both checked here)."""
    snap = tmp_path / "avx2_calibration"
    snap.mkdir()
    ref = {**calibration.REFERENCE, "commit": "23986ddc0f3abb9cca4a1494c025db51921dad13"}
    here = {"commit": ref["commit"], "cpu": "Some CPU", "isa": "avx512", "avx512_bf16": True, "cores": 2,
            "kernels": "avx2", "setup_s": 100, "run_s": 483}
    (snap / "calibration.json").write_text(json.dumps({"reference": ref, "here": here, "cpu_share": 0.83}))
    text = docs_tables.avx2_calibration(snap)
    lines = text.splitlines()
    ref_row = next(line for line in lines if "AVX2-only CPU (issue 46" in line)
    here_row = next(line for line in lines if "capped at AVX2" in line and line.startswith("|"))
    assert "AMD EPYC (AVX2 only, avx512_bf16: no, 2 cores)" in ref_row and "9 min 37 s" in ref_row
    assert "Some CPU (AVX-512, avx512_bf16: yes, 2 cores)" in here_row and "8 min 03 s" in here_row
    assert "`--avx2-emulation 0.83`" in text and "23986ddc0f" in text
