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
from lmgrid.neural.precision import AVX2_FLAGS

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("first_run_tool", REPO / "tools" / "first_run.py")
first_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_run)

# `setup` fails unless uv's cache is an existing empty folder and pip's is off, and installs a stand-in `lmgrid`;
# `run` fails unless setup ran first (in the same clone), records the commit it ran at and leaves a finished run's
# results/synth/summary.csv.  Where the clone has `expect_emulation` (an AVX2-only CPU's flags), both fail unless
# the kernels are capped at AVX2 and the step's make ($PPID of its shell) is the pid in the one cgroup under the
# stand-in root $LMGRID_CGROUP_ROOT, and record that group's quota and period in cgroup.<step>.txt.
MAKEFILE = """\
EMULATED = if test -f expect_emulation; then \\
\t  { test "$$ONEDNN_MAX_CPU_ISA" = AVX2 && test "$$ATEN_CPU_CAPABILITY" = avx2 \\
\t    && test "$$MKL_ENABLE_INSTRUCTIONS" = AVX2 && test "$$LMGRID_CPU_FLAGS" = "$$(cat expect_emulation)"; } \\
\t  || { echo "kernels not capped at AVX2"; exit 1; }; \\
\t  g=$$(ls -d "$$LMGRID_CGROUP_ROOT"/cpu/lmgrid-first-run.*) && grep -qx "$$PPID" "$$g/cgroup.procs" \\
\t  || { echo "make is not in the group"; exit 1; }; \\
\t  echo $$(cat "$$g/cpu.cfs_quota_us") $$(cat "$$g/cpu.cfs_period_us") > cgroup.$@.txt; fi
setup:
\t@$(EMULATED)
\t@test -d "$$UV_CACHE_DIR" && test -z "$$(ls -A "$$UV_CACHE_DIR")" && test "$$PIP_NO_CACHE_DIR" = 1 \\
\t  || { echo "caches not empty"; exit 1; }
\t@touch setup.done
\t@mkdir -p .venv/bin && cp stand_in_lmgrid .venv/bin/lmgrid
run:
\t@$(EMULATED)
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


def _repo(tmp_path: Path, *, fail_run: bool = False, emulated: bool = False) -> tuple[Path, str]:
    repo = tmp_path / "src" / "lmgrid"
    repo.mkdir(parents=True)
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "README.md").write_text("committed\n")
    (repo / "stand_in_lmgrid").write_text(STAND_IN_LMGRID)
    (repo / "stand_in_lmgrid").chmod(0o755)
    if fail_run:
        (repo / "fail_run").write_text("")
    if emulated:
        (repo / "expect_emulation").write_text(" ".join(AVX2_FLAGS))
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
    assert figures["emulation"] is None
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


# A machine of 4 cores as lmgrid.common.machine names it: the quota's expected value does not depend on this one's.
MACHINE = {"cpu": "CPU T", "avx512_bf16": True, "cores": 4}


def _cgroup_root(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in for /sys/fs/cgroup in the v1 layout, plain files, that $LMGRID_CGROUP_ROOT points the tool at."""
    cpu = tmp_path / "cgroup" / "cpu"
    cpu.mkdir(parents=True)
    for name, text in (("cgroup.procs", ""), ("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "-1")):
        (cpu / name).write_text(text)
    monkeypatch.setenv(first_run.CGROUP_ROOT_ENV, str(tmp_path / "cgroup"))
    monkeypatch.setattr(first_run, "machine", lambda: dict(MACHINE))
    return cpu


def test_avx2_emulation_caps_the_kernels_and_runs_each_step_in_a_quota_group(tmp_path, monkeypatch, capsys):
    """--avx2-emulation 0.5 on a 4-core machine: both steps see oneDNN, ATen and MKL capped at AVX2 and the AVX2
    flags (the stand-in Makefile fails otherwise), each step's make is the pid in a new group
    lmgrid-first-run.<pid> whose quota is 0.5 x 4 x the 10 ms period, the group is gone afterwards, the JSON says
    `emulation` while cpu and cores stay the machine's, and the line says it is the emulation.  Kills (each applied
    and seen failing): the caps left out of the steps' environment; a quota not SHARE x cores x period (SHARE x
    period); make not put in the group (no preexec_fn); the group not removed; a summary line without the
    emulation."""
    cpu = _cgroup_root(tmp_path, monkeypatch)
    repo, head = _repo(tmp_path, emulated=True)
    out = tmp_path / "avx2.json"
    argv = ["--repo", str(repo), "--parent", str(tmp_path), "--keep", "--json", str(out), "--avx2-emulation", "0.5"]
    assert first_run.main(argv) == 0, capsys.readouterr()
    figures = json.loads(out.read_text())
    assert figures["emulation"] == {"isa": "avx2", "cpu_share": 0.5}
    assert (figures["commit"], figures["cpu"], figures["cores"]) == (head, "CPU T", 4)
    clone = Path(figures["clone"])
    for step in first_run.STEPS:
        assert (clone / f"cgroup.{step}.txt").read_text().split() == ["20000", "10000"]
    assert sorted(p.name for p in cpu.iterdir()) == ["cgroup.procs", "cpu.cfs_period_us", "cpu.cfs_quota_us"]
    assert "under the AVX2-only emulation (kernels capped at AVX2, 0.5 of each core's time)" in capsys.readouterr().out


def test_avx2_emulation_removes_its_group_when_a_step_fails(tmp_path, monkeypatch, capsys):
    """`make run` fails under the emulation: exit 1 and the group removed all the same.  Kills: a group removed
    only after a run that passed."""
    cpu = _cgroup_root(tmp_path, monkeypatch)
    repo, _ = _repo(tmp_path, emulated=True, fail_run=True)
    assert first_run.main(["--repo", str(repo), "--parent", str(tmp_path), "--avx2-emulation", "1"]) == 1
    assert "`make run` exited" in capsys.readouterr().err
    assert not list(cpu.glob(first_run.CGROUP_PREFIX + "*"))


def test_avx2_emulation_without_a_cpu_controller_stops_before_cloning(tmp_path, monkeypatch, capsys):
    """No writable cpu controller under the root (here a stand-in with none): exit 2 with one line naming what was
    looked for, and nothing cloned.  Kills: an emulated run timed without its quota (the caps alone), a traceback,
    a clone made first."""
    (tmp_path / "cgroup").mkdir()
    monkeypatch.setenv(first_run.CGROUP_ROOT_ENV, str(tmp_path / "cgroup"))
    repo, _ = _repo(tmp_path / "repo", emulated=True)
    parent = tmp_path / "scratch"
    parent.mkdir()
    assert first_run.main(["--repo", str(repo), "--parent", str(parent), "--avx2-emulation", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("first-run: error: --avx2-emulation needs a writable cgroup cpu "
                                               "controller (cgroup v2: ")
    assert "cpu.cfs_quota_us" in err[0] and "cgroup.controllers" in err[0]
    assert list(parent.iterdir()) == []


def test_avx2_emulation_refuses_a_snapshot(tmp_path, monkeypatch, capsys):
    """--avx2-emulation with --snapshot: exit 2, one line saying why and what to do, before any group or clone.
    Kills: an emulated run snapshotted as the docs' run."""
    cpu = _cgroup_root(tmp_path, monkeypatch)
    repo, _ = _repo(tmp_path / "repo", emulated=True)
    parent = tmp_path / "scratch"
    parent.mkdir()
    argv = ["--repo", str(repo), "--parent", str(parent), "--avx2-emulation", "0.5", "--snapshot", str(tmp_path / "s")]
    assert first_run.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--avx2-emulation with --snapshot" in err[0] and "--json" in err[0]
    assert list(parent.iterdir()) == [] and not list(cpu.glob(first_run.CGROUP_PREFIX + "*"))


@pytest.mark.parametrize("share", ["0", "1.5", "x", "-0.5", "nan"])
def test_avx2_emulation_refuses_a_share_out_of_range(tmp_path, capsys, share):
    """SHARE must be a number over 0 and at most 1: argparse's exit 2 naming the option and the value.  Kills: a
    share of 0, over 1 or not a number accepted (a quota of nothing, more than the machine, a crash later)."""
    repo, _ = _repo(tmp_path)
    with pytest.raises(SystemExit) as stop:
        first_run.main(["--repo", str(repo), "--parent", str(tmp_path), "--avx2-emulation", share])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--avx2-emulation" in err and repr(share) in err


def _snapshot_with_avx2(tmp_path: Path, monkeypatch, avx2_commit: str) -> Path:
    """A docs snapshot of the run of FIGURES' commit, with an emulated first run of `avx2_commit` written into it."""
    monkeypatch.setattr(docs_snapshot, "commit", lambda where: {"commit": "abc1234567", "dirty": False})
    snap = tmp_path / "docs" / "results" / "default"
    docs_snapshot.snapshot(_results(tmp_path, FIGURES["commit"]), snap)
    emulated = {**FIGURES, "commit": avx2_commit, "cpu": "CPU Z", "isa": "avx512", "avx512_bf16": True,
                "setup_s": 90, "run_s": 500, "total_s": 590, "emulation": {"isa": "avx2", "cpu_share": 0.6}}
    (snap / docs_snapshot.FIRST_RUN_AVX2_FILE).write_text(json.dumps(emulated))
    return snap


def test_the_docs_line_adds_the_emulated_first_run_of_its_own_commit_only(tmp_path, monkeypatch):
    """first_run_avx2.json of the snapshot's commit: a sentence after the native one with both steps' times, the
    sum, the share and the words that it is an emulation; of another commit: nothing of it.  Kills: an emulated
    figure of another commit rendered as this run's, a sentence that hides the emulation or its share."""
    snap = _snapshot_with_avx2(tmp_path, monkeypatch, FIGURES["commit"])
    text = docs_tables.first_run(snap)
    assert text.startswith("A fresh clone of this commit") and text.endswith(
        'The same commit under the AVX2-only emulation (`make first-run FIRST_RUN_ARGS="--avx2-emulation 0.6 --json '
        'docs/results/default/first_run_avx2.json"`: on CPU Z, 2 cores, the kernels capped at AVX2 and each core at '
        "0.6 of its time by a cgroup CPU quota, the share from `make avx2-calibration`, benchmarks.md's \"An AVX2-only "
        "CPU, emulated\"; an emulation, not an AVX2-only machine): `make setup` 1 min 30 s, "
        "`make run` 8 min 20 s, **9 min 50 s** in all, against the target of 8 min 00 s."), text
    other = _snapshot_with_avx2(tmp_path / "other", monkeypatch, "def" + "0" * 37)
    assert "emulation" not in docs_tables.first_run(other)


def test_a_resnapshot_keeps_the_emulated_first_run_of_the_new_commit_only(tmp_path, monkeypatch):
    """Taking the snapshot again (docs_snapshot removes and rewrites its folder): first_run_avx2.json stays when it
    names the new run's commit and is dropped when it names another, so no re-snapshot shows a stale emulated
    figure.  Kills: the emulated file lost on every re-snapshot (the order `--snapshot`, then `--json` into it,
    undone by the next snapshot), a stale one kept."""
    snap = _snapshot_with_avx2(tmp_path, monkeypatch, FIGURES["commit"])
    written = docs_snapshot.snapshot(tmp_path / "results" / "synth", snap)
    assert snap / docs_snapshot.FIRST_RUN_AVX2_FILE in written
    assert json.loads((snap / docs_snapshot.FIRST_RUN_AVX2_FILE).read_text())["total_s"] == 590
    stale = _snapshot_with_avx2(tmp_path / "stale", monkeypatch, "def" + "0" * 37)
    docs_snapshot.snapshot(tmp_path / "stale" / "results" / "synth", stale)
    assert not (stale / docs_snapshot.FIRST_RUN_AVX2_FILE).exists() and (stale / docs_snapshot.FIRST_RUN_FILE).exists()


def test_a_snapshot_does_not_take_an_emulated_first_run_for_the_native_one(tmp_path, monkeypatch):
    """results/first_run.json of an emulated run (the clone kept with --keep, then snapshotted by hand) is not
    copied as the run's native first run.  Kills: an emulated time rendered as a fresh clone's."""
    monkeypatch.setattr(docs_snapshot, "commit", lambda where: {"commit": "abc1234567", "dirty": False})
    results = _results(tmp_path, FIGURES["commit"])
    first = tmp_path / "results" / docs_snapshot.FIRST_RUN_FILE
    first.write_text(json.dumps({**json.loads(first.read_text()), "emulation": {"isa": "avx2", "cpu_share": 0.6}}))
    docs_snapshot.snapshot(results, tmp_path / "snap")
    assert not (tmp_path / "snap" / docs_snapshot.FIRST_RUN_FILE).exists()
