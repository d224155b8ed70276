"""Only computation reruns: settings that change how a run is executed or watched reschedule nothing; a setting
that changes what a run computes reschedules exactly the runs it affects, and the dry run names it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tinygrid import COMBINED, GRID as CONFIG, copy_grid, planned_jobs, snakemake

pytestmark = pytest.mark.full  # dry runs of a finished grid (tests/tiers.py)


# Snakemake's job blocks with their reasons (profiles/default hides both: VERBOSE=1 in the Makefile brings them back)
VERBOSE = ("--quiet", "host")


@pytest.fixture(autouse=True)
def verbose(monkeypatch):
    monkeypatch.setenv("LMGRID_VERBOSE", "1")


def planned(workdir: Path, repo: Path, *config: str) -> tuple[dict[str, int], str]:
    r = snakemake(workdir, repo, "-n", *VERBOSE, "--config", *config)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return planned_jobs(r), r.stdout + r.stderr


@pytest.fixture
def finished(tiny_pipeline):
    """The session's finished tiny grid (tests/tinygrid.py: two RNN cells, window and stream, one GRU, one FFNN)."""
    return tiny_pipeline


@pytest.mark.parametrize("assignments", [
    "train.log_every=50",
    "train.accelerator=cpu train.compile=true",
    "train.threads=2",
    "train.per_arch.rnn.log_every=7",
    "ngram.memory_mb=256",
    "mlflow.live=false",
])
def test_execution_settings_reschedule_nothing(finished, repo, assignments):
    jobs, out = planned(finished, repo, f"set={assignments}")
    assert jobs == {}, out[-3000:]


def test_a_computing_setting_reruns_exactly_its_runs_and_is_named(finished, repo):
    jobs, out = planned(finished, repo, "set=train.per_arch.rnn.lr=0.02")
    assert jobs.get("train") == 2 and "train_gated" not in jobs and "ngram" not in jobs, jobs
    assert "now: 'lr=0.02'" in out and "before: 'lr=0.003'" in out, out[-3000:]
    # The reason is short: the changed setting, not every setting of the run.
    reason = next(line for line in out.splitlines() if "Params have changed" in line)
    assert len(reason) < 300, reason

    jobs, _ = planned(finished, repo, "set=train.hidden_dim=12")
    assert jobs.get("train") == 3 and jobs.get("train_gated") == 1 and "ngram" not in jobs, jobs
    jobs, _ = planned(finished, repo, "set=ngram.addk_k=0.5")
    assert jobs.get("ngram") == 2 and "train" not in jobs and "train_gated" not in jobs, jobs  # the two addk cells


def test_a_cell_trained_on_the_cpu_is_not_done_on_a_gpu(finished, repo):
    """The finished grid was trained on this CPU; the same config where a GPU is visible (faked: FAKE_GPU first on
    PYTHONPATH) reruns every neural cell there, and the dry run names the reason.  Kills: a placement param that
    ignores the device (the negative control: placement.plan patched to always answer "cpu" plans nothing)."""
    import os
    import subprocess
    import sys

    from test_gpu_workflow import FAKE_GPU

    def dry_run(inject: str) -> tuple[dict[str, int], str]:
        folder = finished.parent / f"inject{abs(hash(inject))}"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(inject)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(repo / "src"),
                                                            os.environ.get("PYTHONPATH", "")])}
        cmd = [str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d", str(finished),
               "--cores", "2", "-n", *VERBOSE]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        return planned_jobs(r), r.stdout + r.stderr

    jobs, out = dry_run(FAKE_GPU)
    assert jobs.get("train") == 3 and jobs.get("train_gated") == 1 and "ngram" not in jobs, jobs
    assert "now: 'placement=cuda 32-true'" in out and "before: 'placement=cpu 32-true'" in out, out[-3000:]

    device_blind = FAKE_GPU + "_plan = p.plan\np.plan = lambda *a, **k: ('cpu', _plan(*a, **k)[1])\n"
    assert dry_run(device_blind)[0] == {}


def test_an_input_copied_anew_with_the_same_bytes_reruns_nothing(finished, repo):
    """A corpus copied or mounted anew (new mtime, same bytes: ../shared is mounted afresh each session) must not
    rerun the corpus stage and, after it, every finished run: Snakemake compares the recorded input checksums first.
    Kills a rerun decided by file times alone (the negative control passes a 1-byte checksum limit and sees the whole
    grid planned again).  The tiny corpus is under Snakemake's 1 MB default, so a profile without
    max-checksum-file-size passes here (seen: the mutation re-run for issue 42); the next test kills that one."""
    import os
    import time

    def dry_run(*args: str) -> dict[str, int]:
        r = snakemake(finished, repo, "-n", *args)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        return planned_jobs(r)

    raw = sorted((finished / "results" / "tiny" / "raw").glob("*.txt"))
    assert raw
    stamps = {p: p.stat() for p in raw}
    later = time.time() + 60
    try:
        for p in raw:
            os.utime(p, (later, later))
        assert dry_run() == {}
        jobs = dry_run("--max-checksum-file-size", "1")
        assert {"corpus", "vocab", "train", "train_gated", "ngram"} <= set(jobs), jobs
    finally:
        for p, st in stamps.items():
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("profile", ["default", "slurm"])
def test_the_profiles_checksum_the_ptb_train_split(repo, profile):
    """The previous test runs on a corpus of a few KB, which Snakemake's default (1 MB) already checksums; PTB's
    train split is 5 MB.  Kills: a profile without max-checksum-file-size, or with a limit below PTB's train split."""
    from snakemake.cli import parse_size_in_bytes

    settings = yaml.safe_load((repo / "profiles" / profile / "profile.yaml").read_text())
    limit = parse_size_in_bytes(str(settings.get("max-checksum-file-size", "1MB")))
    ptb_train_bytes = 5_101_618  # ptb.train.txt in ../shared/data/ptb
    assert limit > ptb_train_bytes
    assert not parse_size_in_bytes("1MB") > ptb_train_bytes  # the negative control: Snakemake's default


def test_a_changed_component_reruns_only_the_combinations_that_use_it(finished, repo, tmp_path):
    """A combination's inputs are its components' score files (combine.smk), so a setting that changes the RNN
    reruns the RNN, its scores and kn_rnn, not kn_gru.  Kills: a combination that waits on every cell's scores (the
    negative control: a copy of the workflow whose combine rule takes every combination's files, settled once on a
    copy of the finished grid, then plans kn_gru as well for the same change)."""
    import shutil

    def planned_combinations(workdir: Path, workflow: Path, assignment: str, *targets: str) -> set[str]:
        r = snakemake(workdir, workflow, *targets, "-n", *VERBOSE, "--config", assignment)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        # Each planned combine job's block names its combination on its wildcards line.
        return set(re.findall(r"^rule combine:\n(?:    .*\n)*?    wildcards: corpus=tiny, combo=(\w+)$",
                              r.stdout + r.stderr, re.M))

    rnn_changed = "set=train.per_arch.rnn.lr=0.02"
    assert planned_combinations(finished, repo, rnn_changed) == {"kn_rnn"}
    assert planned_combinations(finished, repo, "set=train.per_arch.gru.lr=0.02") == {"kn_gru"}

    mutant = tmp_path / "mutant"
    mutant.mkdir()
    shutil.copy(repo / "Snakefile", mutant / "Snakefile")
    shutil.copytree(repo / "workflow", mutant / "workflow")
    rules = mutant / "workflow" / "rules" / "combine.smk"
    own = "for key, mode in COMBINE[w.combo]\n            for f in"
    assert rules.read_text().count(own) == 1
    rules.write_text(rules.read_text().replace(own, "for key, mode in sorted(set().union(*COMBINE.values()))\n"
                                                     "            for f in"))
    grid = copy_grid(finished, tmp_path / "grid")
    targets = [COMBINED.format(name) for name in CONFIG["combine"]]
    r = snakemake(grid, mutant, *targets)  # the mutant's inputs differ: both combinations rerun once, nothing else
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert planned_combinations(grid, mutant, rnn_changed, *targets) == {"kn_rnn", "kn_gru"}
