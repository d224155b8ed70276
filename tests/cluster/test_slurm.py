"""The pipeline on a real single-node SLURM, through the shipped profile (profiles/slurm).

Run with `make test-cluster`: tests/cluster/with_slurm.sh starts the cluster, runs these tests and
stops every daemon it started. Outside it these tests skip with the reason (fail when
LMGRID_REQUIRE_CLUSTER=1, as .ci/run sets).

Three Snakemake runs go at once, since they mostly wait on SLURM's status polling: the tiny
config through SLURM, the same config locally, and a config whose corpus job fails on the cluster.
"""
from __future__ import annotations

import csv
import fnmatch
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.full  # a real SLURM and Snakemake runs (tests/tiers.py)

REPO = Path(__file__).resolve().parents[2]
TINY = Path(__file__).with_name("tiny.yaml")
SLURM_PROFILE = REPO / "profiles/slurm"
LOCAL_PROFILE = REPO / "profiles/default"
# What the runs build: [] = the tiny config's `rule all` (every stage, training included).
TARGETS: list[str] = []
RUN_TIMEOUT_S = 900
# Keys and CSV columns ending in "_s" are wall times, CPU times and speeds, "_mib" memory peaks (lmgrid names
# units): they differ by run.
VOLATILE_SUFFIX = ("_s", "_mib")
# Not compared between the runs: logs and benchmark files (timings), and the MLflow store with what points into it
# (MLflow run ids are random), and the Snakemake report (it records the jobs' times and hosts).
NOT_COMPARED = ("logs/", "benchmarks/", "*.log", "mlflow.db", "mlartifacts/", "*/mlflow_cells.json",
                "*/mlflow_sync.json", "report.html", "report_workflow.html", "report.pdf")  # the reports hold dates
FLOAT_REL_TOL = 1e-6  # thread counts may reorder float sums; any real difference is far larger


def _skip_or_fail(reason: str):
    if os.environ.get("LMGRID_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"cluster test required (LMGRID_REQUIRE_CLUSTER=1) but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster() -> Path:
    if os.environ.get("LMGRID_SLURM_SKIP"):
        _skip_or_fail(os.environ["LMGRID_SLURM_SKIP"])
    state = os.environ.get("LMGRID_SLURM_CLUSTER")
    if not state:
        _skip_or_fail("no SLURM test cluster: run `make test-cluster` (tests/cluster/with_slurm.sh starts one)")
    return Path(state)


def _snakemake_cmd(workdir: Path, profile: Path, targets: list[str], *extra: str) -> list[str]:
    exe = Path(sys.executable).with_name("snakemake")
    return ["timeout", "--kill-after=20", str(RUN_TIMEOUT_S), str(exe), *targets, "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(workdir), "--workflow-profile", str(profile), "--configfile", "config.yaml",
            *extra]


class Run:
    """One Snakemake process in its own folder, started now, waited for later."""

    def __init__(self, workdir: Path, config: dict, targets: list[str], profile: Path, extra: list[str],
                 files: dict | None = None):
        workdir.mkdir(parents=True)
        (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        for name, text in (files or {}).items():
            (workdir / name).write_text(text)
        self.workdir = workdir
        self.log = workdir / "snakemake.out"
        with open(self.log, "w") as out:
            # LMGRID_VERBOSE=1: Snakemake's job blocks (rule, jobid) that the checks below read, not the rules'
            # one-line messages
            self.proc = subprocess.Popen(_snakemake_cmd(workdir, profile, targets, *extra), cwd=workdir,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, "LMGRID_VERBOSE": "1"})
        self.rc: int | None = None

    def wait(self) -> "Run":
        if self.rc is None:
            self.rc = self.proc.wait()
        return self

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-n:])


SLURM_FLAGS = ["--slurm-init-seconds-before-status-checks", "2"]


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    tiny = yaml.safe_load(TINY.read_text())
    broken = {**tiny, "corpus": {"name": "broken", "kind": "text", "text": {"path": "empty.txt"}},
              "cluster": {"local_rules": []}}
    started = {
        "slurm": Run(base / "slurm", tiny, TARGETS, SLURM_PROFILE, SLURM_FLAGS),
        # Its one job also asks for a GPU the way the profile's training jobs do (gpu + gpu_model; the
        # test node has one GPU slot of type testgpu), so the GPU request path is exercised today.
        "failing": Run(base / "failing", broken, ["results/broken/vocab.json"], SLURM_PROFILE,
                       SLURM_FLAGS + ["--set-resources", "corpus:gpu=1", "corpus:gpu_model=testgpu",
                                      "--retries", "0"],  # the profile's retries would submit it three times
                       files={"empty.txt": ""}),
    }
    started["local"] = Run(base / "local", tiny, TARGETS, LOCAL_PROFILE, [])
    try:
        yield {name: run.wait() for name, run in started.items()}
    finally:
        for run in started.values():
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()


def sacct(job_ids) -> dict[str, dict]:
    fields = ["JobID", "JobName", "Partition", "State", "ExitCode", "Elapsed", "AllocTRES", "Comment"]
    out = subprocess.run(["sacct", "-X", "--parsable2", "--noheader", "-j", ",".join(job_ids),
                          f"--format={','.join(fields)}"], capture_output=True, text=True, timeout=30, check=True)
    print("\n" + "|".join(fields))
    rows = {}
    for line in out.stdout.splitlines():
        print(line)
        row = dict(zip(fields, line.split("|")))
        rows[row["JobID"]] = row
    return rows


def job_blocks(output: str) -> list[tuple[str, str, str]]:
    """(kind, rule, snakemake jobid) of every job Snakemake started: kind is 'rule' (a cluster job) or
    'localrule' (run on the submit host)."""
    return re.findall(r"^(rule|localrule) (\w+):\n(?:    .*\n)*?    jobid: (\d+)$", output, flags=re.M)


def submissions(output: str) -> dict[str, tuple[str, Path]]:
    """Snakemake jobid -> (SLURM job id, plugin log file), from the plugin's submission lines."""
    found = re.findall(r"^Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+)\)\.$", output, flags=re.M)
    return {jid: (sid, Path(log)) for jid, sid, log in found}


def test_every_cluster_job_ran_through_slurm(runs):
    run = runs["slurm"]
    assert run.rc == 0, f"SLURM run failed (exit {run.rc}):\n{run.tail()}"
    jobs = job_blocks(run.output)
    # `all` has no action, so Snakemake always runs it locally.
    tiny_local = set(yaml.safe_load(TINY.read_text())["cluster"]["local_rules"]) | {"all"}
    remote = {jid: rule for kind, rule, jid in jobs if kind == "rule"}
    local = {jid: rule for kind, rule, jid in jobs if kind == "localrule"}
    assert remote, f"no job went to SLURM:\n{run.tail()}"
    assert set(local.values()) <= tiny_local, f"jobs ran locally that should be SLURM jobs: {local}"
    assert not set(remote.values()) & tiny_local, f"local rules were submitted: {remote}"

    subs = submissions(run.output)
    assert set(subs) == set(remote), f"cluster jobs {remote} vs submitted {subs}"
    rows = sacct(sid for sid, _ in subs.values())
    profile = yaml.safe_load((SLURM_PROFILE / "profile.yaml").read_text())
    gpu_requests = {rule: res["gpu"] for rule, res in profile["set-resources"].items() if "gpu" in res}
    for jid, (sid, log) in subs.items():
        rule = remote[jid]
        row = rows.get(sid)
        assert row is not None, f"sacct has no record of SLURM job {sid} (rule {rule})"
        assert (row["State"], row["ExitCode"]) == ("COMPLETED", "0:0"), f"rule {rule}: {row}"
        assert row["Comment"].startswith(f"rule_{rule}_"), f"SLURM job {sid} is not rule {rule}: {row}"
        gpus = int(gpu_requests.get(rule, 0))
        if gpus:  # the profile's `gpu` resource reached SLURM as a GPU allocation
            assert f"gres/gpu={gpus}" in row["AllocTRES"], f"rule {rule} asked for {gpus} GPU(s): {row}"
        assert log.is_file(), f"plugin log missing for SLURM job {sid} (rule {rule}): {log}"
        assert log.is_relative_to(run.workdir / ".snakemake/slurm_logs")
        text = log.read_text(errors="replace")
        assert re.search(rf"^rule {rule}:$", text, flags=re.M), f"{log} does not show rule {rule} running:\n{text}"
        assert f"Finished jobid: 0 (Rule: {rule})" in text, f"{log} does not show rule {rule} finishing:\n{text}"
    print(f"{len(subs)} SLURM jobs, {len(local)} local jobs; targets: {TARGETS or 'rule all'}")


def _load(path: Path):
    """A result file's comparable content: timings dropped, floats kept as floats."""
    if path.suffix == ".json":
        return _drop_volatile(json.loads(path.read_text()))
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        return [{k: _number(v) for k, v in r.items() if not k.endswith(VOLATILE_SUFFIX)} for r in rows]
    if path.suffix == ".npz":
        with np.load(path) as z:
            return {k: z[k].tolist() for k in sorted(z.files)}
    if path.suffix == ".ckpt":  # pickled with run-specific metadata; the PPLs in metrics.json decide
        return None
    return path.read_bytes()


def _number(v: str):
    try:
        return float(v)
    except ValueError:
        return v


def _drop_volatile(obj):
    if isinstance(obj, dict):
        return {k: _drop_volatile(v) for k, v in obj.items() if not k.endswith(VOLATILE_SUFFIX)}
    if isinstance(obj, list):
        return [_drop_volatile(v) for v in obj]
    return obj


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=FLOAT_REL_TOL, abs_tol=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _ppls(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "ppl" and isinstance(v, (int, float)):
                yield path + "/ppl", v
            else:
                yield from _ppls(v, f"{path}/{k}")


def _compared(rel: str) -> bool:
    for pattern in NOT_COMPARED:
        if pattern.endswith("/"):
            if f"/{pattern}" in f"/{rel}":
                return False
        elif fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, f"*/{pattern}"):
            return False
    return True


def _result_files(workdir: Path) -> dict[str, Path]:
    root = workdir / "results"
    files = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}
    return {rel: p for rel, p in files.items() if _compared(rel)}


def test_slurm_results_equal_local_run(runs):
    slurm, local = runs["slurm"], runs["local"]
    assert slurm.rc == 0, f"SLURM run failed (exit {slurm.rc}):\n{slurm.tail()}"
    assert local.rc == 0, f"local run failed (exit {local.rc}):\n{local.tail()}"
    a, b = _result_files(slurm.workdir), _result_files(local.workdir)
    assert a.keys() == b.keys(), f"different result files: only SLURM {a.keys() - b.keys()}, " \
                                 f"only local {b.keys() - a.keys()}"
    differ = [name for name in a if not _same(_load(a[name]), _load(b[name]))]
    assert not differ, f"results differ between the SLURM and the local run: {differ}"
    ppls = {(name, key): v for name, p in a.items() if p.suffix == ".json"
            for key, v in _ppls(json.loads(p.read_text()))}
    assert ppls, "no perplexity found in the results to compare"
    for (name, key), v in ppls.items():
        other = dict(_ppls(json.loads(b[name].read_text())))[key]
        print(f"{name}{key}: SLURM {v!r} local {other!r}")
        assert math.isfinite(v) and v > 1


def test_failing_job_is_reported(runs):
    run = runs["failing"]
    assert run.rc not in (0, 124, 137), f"expected a failure exit, got {run.rc}:\n{run.tail()}"
    out = run.output
    assert re.search(r"^Error in rule corpus:", out, flags=re.M), f"Snakemake did not report the failure:\n{run.tail()}"
    subs = submissions(out)
    assert len(subs) == 1, f"expected exactly the corpus job to be submitted: {subs}"
    (sid, log), = subs.values()
    assert f"SLURM-job '{sid}' failed" in out, run.tail()
    row = sacct([sid])[sid]
    assert row["State"] == "FAILED" and row["ExitCode"] != "0:0", row
    assert row["Comment"].startswith("rule_corpus_"), row
    assert "gres/gpu=1" in row["AllocTRES"], f"the job's gpu/gpu_model request did not reach SLURM: {row}"
    # The job's own log names the bad input, and Snakemake shows it (show-failed-logs).
    assert "empty.txt: file is empty" in (run.workdir / "results/broken/logs/corpus.log").read_text()
    assert "empty.txt: file is empty" in out
    assert log.is_file(), f"plugin log of the failed job missing: {log}"
    assert not (run.workdir / "results/broken/vocab.json").exists()


def test_runs_leave_no_job_behind(runs, cluster):
    """Every job of these runs has finished: nothing is left queued or running on the cluster."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T %k"], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "", f"jobs still in the queue:\n{out.stdout}"


def test_profile_requests_gpus_through_the_gpu_resource():
    """Training asks for GPUs the way the plugin accepts (it rejects --gres/--gpus in slurm_extra), through the
    rule's `gpu` resource: the profile sets no gpu, mem_mb or runtime for it, which would replace the rule's sizing
    by train.devices and attempt (tests/test_gpu_workflow.py checks the sizes in dry runs)."""
    profile = yaml.safe_load((SLURM_PROFILE / "profile.yaml").read_text())
    assert profile["executor"] == "slurm"
    for rule in ("train", "train_gated"):
        assert not {"gpu", "mem_mb", "runtime"} & set(profile["set-resources"][rule]), rule
    for rule, res in {"*": profile["default-resources"], **profile["set-resources"]}.items():
        extra = str(res.get("slurm_extra", ""))
        assert not re.search(r"--(gres|gpus)\b", extra), f"{rule}: slurm_extra must not request GPUs: {extra}"


@pytest.mark.skipif("LMGRID_SLURM_CLUSTER" in os.environ, reason="the real runs above cover it")
def test_profile_plans_the_tiny_pipeline(tmp_path):
    """Without a cluster: the profile parses and Snakemake plans the tiny pipeline with it (dry run)."""
    (tmp_path / "config.yaml").write_text(TINY.read_text())
    cmd = _snakemake_cmd(tmp_path, SLURM_PROFILE, TARGETS, "--dry-run")
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "This was a dry-run" in out.stdout + out.stderr
