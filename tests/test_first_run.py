"""tools/first_run.py (`make first-run`): a new user's first run, timed, on a fresh clone with empty caches.

The tool runs `make setup` and `make run` in a clone; here the clone is of a tiny git repository whose Makefile
checks what the tool promises (empty uv cache, pip's cache off, the committed HEAD, setup before run) instead of
installing anything, so the test takes a second and needs no network.  Figures (seconds) are never asserted.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("first_run_tool", REPO / "tools" / "first_run.py")
first_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_run)

# `setup` fails unless uv's cache is an existing empty folder and pip's is off; `run` fails unless setup ran first
# (in the same clone) and records the commit it ran at.
MAKEFILE = """\
setup:
\t@test -d "$$UV_CACHE_DIR" && test -z "$$(ls -A "$$UV_CACHE_DIR")" && test "$$PIP_NO_CACHE_DIR" = 1 \\
\t  || { echo "caches not empty"; exit 1; }
\t@touch setup.done
run:
\t@test -f setup.done
\t@git rev-parse HEAD > ran_at.txt
\t@test ! -f fail_run
"""


def _repo(tmp_path: Path, *, fail_run: bool = False) -> tuple[Path, str]:
    repo = tmp_path / "src" / "lmgrid"
    repo.mkdir(parents=True)
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "README.md").write_text("committed\n")
    if fail_run:
        (repo / "fail_run").write_text("")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tiny"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return repo, head


def test_first_run_times_setup_and_run_on_a_clean_clone_of_head(tmp_path, capsys):
    """Both steps pass in a fresh clone of HEAD (an uncommitted edit is warned about and not measured), the JSON
    names the commit, the machine and both times, and without --keep the clone is gone.  Kills: running in the
    repository itself (uncommitted edit measured, HEAD's file changed), a missing step, no warning on a dirty tree,
    the clone left behind."""
    repo, head = _repo(tmp_path)
    (repo / "README.md").write_text("uncommitted\n")
    parent = tmp_path / "scratch"
    parent.mkdir()
    out = tmp_path / "first_run.json"
    assert first_run.main(["--repo", str(repo), "--parent", str(parent), "--keep", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    clone = Path(figures["clone"])
    assert figures["commit"] == head and (clone / "ran_at.txt").read_text().strip() == head
    assert (clone / "README.md").read_text() == "committed\n"
    assert set(figures) >= {"cpu", "isa", "avx512_bf16", "cores", "setup_s", "run_s", "total_s", "target_s"}
    assert figures["total_s"] == pytest.approx(figures["setup_s"] + figures["run_s"])
    printed = capsys.readouterr().out
    assert "uncommitted changes" in printed and f"first-run at {head[:10]}" in printed
    assert first_run.main(["--repo", str(repo), "--parent", str(parent)]) == 0
    assert [p.name for p in parent.iterdir()] == [clone.parent.name]  # the kept one only


def test_a_failing_step_is_named_with_its_log_and_the_clone_kept(tmp_path, capsys):
    """`make run` fails: exit 1, one line naming the step and its log, the clone kept for reading it.  Kills: a
    failure reported as success, a message without the log's path, the evidence removed."""
    repo, _ = _repo(tmp_path, fail_run=True)
    assert first_run.main(["--repo", str(repo), "--parent", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`make run` exited" in err[0]
    log = Path(err[0].split("its log: ")[1].split(" ")[0])
    assert log.name == "first_run.run.log" and log.is_file()


def test_the_install_sees_empty_caches(tmp_path, monkeypatch, capsys):
    """The fake `make setup` checks the caches; with the tool's fresh environment it passes (above), and with a uv
    cache that already holds files, as on a machine that installed before, it fails.  Kills: a first run timed
    with warm caches (a fresh_env that keeps the user's cache or leaves pip's on)."""
    repo, _ = _repo(tmp_path)

    def warm_env(caches: Path) -> dict:
        caches.mkdir(parents=True)
        (caches / "wheel.whl").write_text("")
        return {**os.environ, "UV_CACHE_DIR": str(caches), "PIP_NO_CACHE_DIR": "1"}

    monkeypatch.setattr(first_run, "fresh_env", warm_env)
    assert first_run.main(["--repo", str(repo), "--parent", str(tmp_path)]) == 1
    assert "`make setup` exited" in capsys.readouterr().err
    monkeypatch.setattr(first_run, "fresh_env", lambda caches: {**os.environ, "UV_CACHE_DIR": str(caches)})
    assert first_run.main(["--repo", str(repo), "--parent", str(tmp_path)]) == 1  # no folder, pip's cache on


def test_isa_classes():
    """The CPU classes the README's budget names.  Kills: AVX-512 machines counted as AVX2-only (avx2 is also in
    their flags), an empty flag list called `older`."""
    assert first_run.isa({"avx2", "fma", "avx512f", "avx512_bf16"}) == "avx512"
    assert first_run.isa({"avx", "avx2", "fma"}) == "avx2-only"
    assert first_run.isa({"sse4_2", "avx"}) == "older"
    assert first_run.isa(set()) == "unknown"


def test_bad_arguments_stop_with_one_line(tmp_path, capsys):
    """A --repo that is not a git repository, or a --parent that does not exist: exit 2 naming the option and
    value, and nothing cloned."""
    for argv, named in ((["--repo", str(tmp_path)], "--repo"),
                        (["--repo", str(REPO), "--parent", str(tmp_path / "none")], "--parent")):
        with pytest.raises(SystemExit) as stop:
            first_run.main(argv)
        assert stop.value.code == 2 and named in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
