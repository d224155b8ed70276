"""The suite's tiers (tests/tiers.py): the guard that fails a fast-tier test which starts Snakemake, uses a fixture
that did, or reads the Penn Treebank; and `-m "not full"` leaving out `full`, `slow` and `ptb` tests.  Each check
runs a small suite in a child pytest (pytester), so the guard's state is that suite's own."""
from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from tiers import starts_snakemake

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# A suite whose Snakemake is a stand-in program of that name (the guard reads the command line; nothing runs)
SUITE = '''
import os, subprocess, sys
import pytest

SNAKEMAKE = os.environ["FAKE_SNAKEMAKE"]

@pytest.fixture(scope="module")
def tier_guard_grid():
    subprocess.run([SNAKEMAKE, "-n"], check=True)
    return "a finished grid"

@pytest.fixture
def ptb_dir(tmp_path):
    return tmp_path

def test_unmarked_runs_snakemake():
    subprocess.run([SNAKEMAKE, "--cores", "2"], check=True)

def test_unmarked_runs_lmgrid_plan():
    subprocess.run([sys.executable, "-c", "pass", "-m", "lmgrid", "plan"], check=True)

@pytest.mark.full
def test_marked_runs_snakemake():
    subprocess.run([SNAKEMAKE, "--cores", "2"], check=True)

@pytest.mark.full
def test_marked_uses_the_grid(tier_guard_grid):
    pass

def test_unmarked_uses_the_grid(tier_guard_grid):
    pass

def test_unmarked_reads_ptb(ptb_dir):
    pass

@pytest.mark.ptb
def test_ptb_marked_reads_ptb(ptb_dir):
    pass

@pytest.mark.slow
def test_slow_runs_snakemake():
    subprocess.run([SNAKEMAKE], check=True)

def test_unmarked_plain():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''
CAUGHT = {"test_unmarked_runs_snakemake", "test_unmarked_runs_lmgrid_plan", "test_unmarked_uses_the_grid",
          "test_unmarked_reads_ptb"}
FINE = {"test_marked_runs_snakemake", "test_marked_uses_the_grid", "test_ptb_marked_reads_ptb",
        "test_slow_runs_snakemake", "test_unmarked_plain"}


@pytest.fixture
def suite(pytester, monkeypatch):
    fake = pytester.path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_SNAKEMAKE", str(fake))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def outcomes(result) -> dict[str, set[str]]:
    """{outcome: test names} from -v lines, pytest's own (`test_suite.py::name PASSED`) or an xdist worker's
    (`[gw0] [ 10%] PASSED test_suite.py::name`)."""
    found: dict[str, set[str]] = {}
    for line in result.outlines:
        m = (re.match(r"^test_suite\.py::(?P<name>\w+) (?P<outcome>PASSED|FAILED|SKIPPED|ERROR)", line)
             or re.match(r"^\[gw\d+\].* (?P<outcome>PASSED|FAILED|SKIPPED|ERROR) test_suite\.py::(?P<name>\w+)", line))
        if m:
            found.setdefault(m["outcome"], set()).add(m["name"])
    return found


def make_test_options() -> list[str]:
    """The pytest options of `make test` after its `-m "not full"`, as make would run them (`make -n`; the
    install stamps taken as made), so this checks what the Makefile runs, not a copy of it."""
    venv = REPO / ".venv"
    dry = subprocess.run(["make", "-n", "-s", "-o", f"{venv}/.installed-stamp", "-o", f"{venv}/.installed-test-stamp",
                          "TEST_JOBS=2", "test"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    words = shlex.split(dry.split("-m pytest", 1)[1].split(";", 1)[0])
    assert words[:2] == ["-m", "not full"], dry
    return words[2:]


@pytest.mark.parametrize("runner", ["one process", "make test's workers"])
def test_the_guard_fails_fast_tier_tests_that_run_snakemake_or_read_ptb(suite, runner):
    """Kills a guard that sees nothing: the same suite without the plugin (the negative control, run here) passes
    every test, so the failures come from tests/tiers.py; and a guard that forgets fixtures (a test that only uses
    the grid a fixture built with Snakemake would pass).  `make test` and `make test-full` run the tests in
    pytest-xdist worker processes (Makefile, TEST_JOBS), so the suite runs a second time with `make test`'s own
    options: the guard must patch Popen and judge reports in each worker, not only in the controller, which runs no
    test.  That run kills a guard whose pytest_configure skips the workers (`if hasattr(config, "workerinput"):
    return`; seen failing on it: the Snakemake cases pass)."""
    options = make_test_options() if runner == "make test's workers" else []
    if options:
        assert options[:2] == ["-n", "2"], options  # TEST_JOBS reaches pytest
    guarded = suite.runpytest_subprocess("-p", "tiers", "-v", "-p", "no:cacheprovider", *options)
    found = outcomes(guarded)
    assert found.get("FAILED") == CAUGHT and found.get("PASSED") == FINE, guarded.outlines[-40:]
    if options:
        assert any(re.match(r"^\[gw[01]\]", line) for line in guarded.outlines), "no worker ran a test"
    why = [line for line in guarded.outlines if "but it is in the fast tier" in line]
    assert any("test_unmarked_reads_ptb uses the fixture 'ptb_dir', which reads the Penn Treebank" in line
               for line in why), why
    plain = suite.runpytest_subprocess("-v", "-p", "no:cacheprovider", *options)
    assert outcomes(plain) == {"PASSED": CAUGHT | FINE}, plain.outlines[-40:]


def test_the_fast_tier_leaves_out_full_slow_and_ptb_tests(suite):
    """`make test`'s selection.  Kills "slow or ptb not implying full" (those tests would run in the fast tier)."""
    fast = suite.runpytest_subprocess("-p", "tiers", "-v", "-p", "no:cacheprovider", "-m", "not full")
    found = outcomes(fast)
    ran = set().union(*found.values())
    assert ran == {"test_unmarked_runs_snakemake", "test_unmarked_runs_lmgrid_plan", "test_unmarked_uses_the_grid",
                   "test_unmarked_reads_ptb", "test_unmarked_plain"}, fast.outlines[-40:]


@pytest.mark.parametrize("line, runs", [
    (["/x/.venv/bin/snakemake", "-n"], True),
    ("cd /w && /x/.venv/bin/snakemake --dry-run --cores 2", True),
    (["python", "-m", "snakemake", "-n"], True),
    (["python", "-m", "lmgrid", "status"], True),
    (["lmgrid", "scales-run", "--", "snakemake"], True),
    (["python", "-m", "lmgrid", "train", "--arch", "lstm"], False),
    (["make", "-n", "dry"], False),
    ("pdflatex table.tex", False),
])
def test_what_counts_as_starting_snakemake(line, runs):
    assert starts_snakemake(line) is runs


def test_a_clone_folder_named_lmgrid_or_snakemake_starts_nothing(tmp_path):
    """`git -C <clone> status` where the clone is named as `git clone` names it (lmgrid/) is not `lmgrid status`:
    tools/gpu_check's commit lookup failed `make test` in a fresh `git clone .../lmgrid` for it.  Kills: naming
    every word by its last path part, folders included (the control: the same line seen as starting Snakemake when
    the folder does not exist, i.e. could be a program); the real programs by path are still seen."""
    for name in ("lmgrid", "snakemake"):
        clone = tmp_path / name
        line = ["git", "-C", str(clone), "status", "--porcelain"]
        assert starts_snakemake(line) is True, "control: a path that is no folder may be the program itself"
        clone.mkdir()
        assert starts_snakemake(line) is False
        assert starts_snakemake(f"cd {clone} && git -C {clone} status") is False
    assert starts_snakemake([str(tmp_path / "lmgrid" / "lmgrid"), "status"]) is True
    # A `python -c` script is a word too, and may be longer than a path may be (test_mlflow_lock's is).
    script = "from pathlib import Path\n" + "x = Path('a') / 'b'\n" * 300
    assert starts_snakemake(["python", "-c", script]) is False
    assert starts_snakemake(f"cd {tmp_path / 'snakemake'} && snakemake -n") is True


def test_entering_snakemakes_api_in_process_is_seen(monkeypatch):
    """lmgrid plan and status build the DAG through Snakemake's API, in-process where a test calls them.  Kills
    "the API left unwatched": entered before the patch (the negative control, run first) nothing is seen."""
    import types

    import tiers

    class Api:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    seen: list[str] = []
    monkeypatch.setattr(tiers._WATCH, "saw", seen.append)
    with Api():
        pass
    assert seen == []
    tiers._patch_api(types.SimpleNamespace(SnakemakeApi=Api))
    with Api():
        pass
    assert seen == ["enters Snakemake's API in the test process"]
