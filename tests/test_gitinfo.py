"""lmgrid.common.gitinfo.commit: the one reading of "which commit, and was it changed" behind every provenance record
(docs snapshots, MLflow tags, the screenshots' sidecars, the benchmarks, the GPU check)."""
from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from lmgrid.common import gitinfo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    git("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return repo, git("rev-parse", "HEAD")


def test_the_commit_its_length_and_dirty_only_for_tracked_changes(tmp_path):
    """A checkout's HEAD, 10 hex digits by default and all 40 with short=None; dirty only once a tracked file changes
    (an untracked file, like results/, is not a change to the code).  Kills: dirty from `git status` with untracked
    files counted (`--untracked-files=all`: seen failing; the control below shows git sees the untracked file), and
    a short hash where the whole one is asked for."""
    repo, head = _repo(tmp_path)
    assert gitinfo.commit(repo) == {"commit": head[:10], "dirty": False}
    assert gitinfo.commit(repo, short=None) == {"commit": head, "dirty": False}
    (repo / "results.csv").write_text("untracked\n")
    assert gitinfo.commit(repo)["dirty"] is False
    untracked = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert untracked.stdout.strip(), "control: git status with untracked files sees the new file"
    (repo / "code.py").write_text("x = 2\n")
    assert gitinfo.commit(repo)["dirty"] is True


def test_outside_a_checkout_or_without_git_the_commit_is_unknown(tmp_path, monkeypatch):
    """Not a checkout, or no git program: UNKNOWN and not dirty, no exception.  Kills: an empty commit string (a
    record that names no commit and does not say so) and an OSError escaping when git is missing."""
    assert gitinfo.commit(tmp_path) == {"commit": gitinfo.UNKNOWN, "dirty": False}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the path
    assert gitinfo.commit(tmp_path) == {"commit": gitinfo.UNKNOWN, "dirty": False}


def test_mlflow_tags_and_screenshot_sidecars_name_the_same_commit(tmp_path, monkeypatch):
    """The MLflow runs' tags (tracking.mirror.environment) and the screenshots' sidecar (screenshots.provenance) read
    the working directory's checkout through gitinfo, the whole hash, with the same dirty flag.  Kills: mirror
    taking gitinfo's default 10-digit hash where MLflow's UI wants the whole one (seen failing), and a dirty flag
    lost on the way (the checkout has a changed tracked file: the tags say dirty, the sidecar uncommitted changes)."""
    from lmgrid.orchestration import screenshots
    from lmgrid.tracking import mirror

    repo, head = _repo(tmp_path)
    (repo / "code.py").write_text("x = 3\n")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(screenshots, "machine", lambda: {})
    tags = mirror.environment()
    assert tags["mlflow.source.git.commit"] == head and tags["lmgrid.git_dirty"] == "true"
    args = argparse.Namespace(configfile=None, set="", cores=2)
    meta = screenshots.provenance(args, "make run")
    assert meta["commit"] == head and meta["uncommitted_changes"] is True
    monkeypatch.chdir(tmp_path)  # not a checkout
    assert mirror.environment()["mlflow.source.git.commit"] == "unknown (not a git checkout)"
