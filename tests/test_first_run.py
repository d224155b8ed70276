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

from lmgrid.analysis import docs_snapshot, docs_tables

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("first_run_tool", REPO / "tools" / "first_run.py")
first_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_run)

# `setup` fails unless uv's cache is an existing empty folder and pip's is off, and installs a stand-in `lmgrid`;
# `run` fails unless setup ran first (in the same clone), records the commit it ran at and leaves a finished run's
# results/synth/summary.csv.
MAKEFILE = """\
setup:
\t@test -d "$$UV_CACHE_DIR" && test -z "$$(ls -A "$$UV_CACHE_DIR")" && test "$$PIP_NO_CACHE_DIR" = 1 \\
\t  || { echo "caches not empty"; exit 1; }
\t@touch setup.done
\t@mkdir -p .venv/bin && cp stand_in_lmgrid .venv/bin/lmgrid
run:
\t@test -f setup.done
\t@git rev-parse HEAD > ran_at.txt
\t@test ! -f fail_run
\t@mkdir -p results/synth && touch results/synth/summary.csv
"""
# `lmgrid docs ...` as the clone's venv would run it: records its arguments; fails as lmgrid does with FAIL_SNAPSHOT.
STAND_IN_LMGRID = """\
#!/bin/sh
echo "$@" > lmgrid_args.txt
test -z "$FAIL_SNAPSHOT" || { echo "lmgrid docs: error: no room" >&2; exit 3; }
"""


def _repo(tmp_path: Path, *, fail_run: bool = False) -> tuple[Path, str]:
    repo = tmp_path / "src" / "lmgrid"
    repo.mkdir(parents=True)
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "README.md").write_text("committed\n")
    (repo / "stand_in_lmgrid").write_text(STAND_IN_LMGRID)
    (repo / "stand_in_lmgrid").chmod(0o755)
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
    assert figures["total_s"] == figures["setup_s"] + figures["run_s"]
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
    """A --repo that is not a git repository, a --parent that does not exist, a --json in a folder that does not
    exist (found before the run, not after it): exit 2 naming the option and value, and nothing cloned."""
    repo, _ = _repo(tmp_path / "repo")
    for argv, named in ((["--repo", str(tmp_path)], "--repo"),
                        (["--repo", str(repo), "--parent", str(tmp_path / "none")], "--parent"),
                        (["--repo", str(repo), "--parent", str(tmp_path), "--json", str(tmp_path / "no/x.json")],
                         "--json")):
        with pytest.raises(SystemExit) as stop:
            first_run.main(argv)
        assert stop.value.code == 2 and named in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]


def test_snapshot_takes_the_clones_run_with_its_own_lmgrid(tmp_path, monkeypatch, capsys):
    """--snapshot DIR: after both steps, the clone's own lmgrid snapshots its results/<corpus> into DIR (resolved
    against where the tool was started), and results/first_run.json holds the figures for it to carry; a failing
    snapshot is one line, the clone kept.  Kills: the snapshot taken with another lmgrid or of another folder, a
    relative DIR handed to a process in the clone (it would land inside the clone), the figures not written."""
    repo, head = _repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    parent = tmp_path / "scratch"
    parent.mkdir()
    assert first_run.main(["--repo", str(repo), "--parent", str(parent), "--keep", "--snapshot", "snap/x"]) == 0
    (clone,) = [p / "lmgrid" for p in parent.iterdir()]
    args = (clone / "lmgrid_args.txt").read_text().split()
    assert args == ["docs", "--from", str(clone / "results" / "synth"), "--snapshot", str(tmp_path / "snap" / "x")]
    figures = json.loads((clone / "results" / docs_snapshot.FIRST_RUN_FILE).read_text())
    assert figures["commit"] == head and {"setup_s", "run_s", "total_s", "isa"} <= set(figures)
    monkeypatch.setenv("FAIL_SNAPSHOT", "1")
    assert first_run.main(["--repo", str(repo), "--parent", str(parent), "--snapshot", "snap/x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exited 3: lmgrid docs: error: no room (the clone is kept)" in err[0]
    assert len(list(parent.iterdir())) == 2


FIGURES = {"commit": "abc1234567" + "f" * 30, "cpu": "CPU Y", "isa": "avx2-only", "avx512_bf16": False, "cores": 2,
           "setup_s": 61, "run_s": 330, "total_s": 391, "target_s": 480}


def _results(tmp_path: Path, commit: str) -> Path:
    results = tmp_path / "results" / "synth"
    results.mkdir(parents=True)
    (results / "summary.csv").write_text("model,test_ppl\nx,1.0\n")
    (results / "benchmarks").mkdir()
    (results / "benchmarks" / "a.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n10.0\t0:00:10\t10\t9.0\n")
    (tmp_path / "results" / docs_snapshot.FIRST_RUN_FILE).write_text(json.dumps({**FIGURES, "commit": commit}))
    return results


def test_the_docs_snapshot_carries_the_first_run_of_its_own_commit_only(tmp_path, monkeypatch):
    """A docs snapshot copies results/first_run.json when it names the results' commit, and the `first_run` table
    renders it (both times, the sum, the CPU's ISA); figures of another commit stay out, and the table then says the
    run was not timed.  Kills: a snapshot that carries a first run of another commit (an install time that is not
    this run's), a rendering that drops the install or calls an AVX2-only CPU AVX-512."""
    monkeypatch.setattr(docs_snapshot, "commit", lambda where: {"commit": "abc1234567", "dirty": False})
    for commit, carried in ((FIGURES["commit"], True), ("def" + "0" * 37, False)):
        snap = tmp_path / commit[:3] / "docs" / "results" / "default"
        docs_snapshot.snapshot(_results(tmp_path / commit[:3], commit), snap)
        assert (snap / docs_snapshot.FIRST_RUN_FILE).is_file() is carried
        text = docs_tables.first_run(snap)
        if carried:
            assert ("`make setup` took 1 min 01 s and `make run` (Snakemake's start, the jobs, the report) 5 min "
                    "30 s, **6 min 31 s** in all, on CPU Y (AVX2 only, avx512_bf16: no, 2 cores)") in text, text
        else:
            assert "not timed from a fresh clone" in text


def test_a_failed_clone_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """`git clone` fails (here: made to): exit 1 with one line naming the repository, and the new folder under
    --parent removed.  Kills: a half-made clone left behind, a traceback instead of the line."""
    repo, _ = _repo(tmp_path)
    parent = tmp_path / "scratch"
    parent.mkdir()
    real_run = subprocess.run

    def run(cmd, *a, **k):
        if cmd[:2] == ["git", "clone"]:
            raise subprocess.CalledProcessError(128, cmd)
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(first_run.subprocess, "run", run)
    assert first_run.main(["--repo", str(repo), "--parent", str(parent)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"could not clone {repo}" in err[0]
    assert list(parent.iterdir()) == []
