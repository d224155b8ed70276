"""What training jobs ask for, read from Snakemake dry runs (issue 30): the local GPU limit, and the SLURM profile
leaving gpu, mem_mb and runtime to the rule, which sizes them by train.devices and by the attempt.

A GPU is faked by a sitecustomize.py first on the dry run's PYTHONPATH: lmgrid.neural.placement then counts one
GPU here and answers the bf16 probe as an A100 would.  Nothing trains: dry runs only.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tinygrid import TINY

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("snakemake") is None, reason="snakemake is not installed"),
              pytest.mark.full]  # dry runs (tests/tiers.py)

FAKE_GPU = '''
import lmgrid.neural.placement as p
p.visible_gpus = lambda env=None, dev="/dev": 1
p.probe_gpu_bf16 = lambda timeout_s=120.0: (True, "Fake A100 (compute capability 8.0)")
'''
CONFIG = {**TINY, "studies": {"s": {"arch": ["kn", "rnn", "lstm", "gru"], "n_step": [3]}},
          "train": {"epochs": 1, "emb_dim": 8, "hidden_dim": 8}}
# The profile lmgrid shipped before issue 30: fixed training resources that replaced the rule's functions.
OLD_SLURM_TRAIN = {"gpu": 1, "nodes": 1, "mem_mb": 8000, "runtime": 240}


def dry_run(workdir: Path, snakefile: Path, *args: str, inject: str | None = None, config: dict = CONFIG,
            profile: Path | None = None) -> dict[str, list[dict]]:
    """rule -> its jobs, each {"resources": {name: value}, "shell": the command}, from `snakemake -n -p`."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    paths = [str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
    if inject is not None:
        (workdir / "inject").mkdir(exist_ok=True)
        (workdir / "inject" / "sitecustomize.py").write_text(inject)
        paths.insert(0, str(workdir / "inject"))
    # LMGRID_VERBOSE=1: Snakemake's job blocks (resources, shell command), not the rules' one-line messages
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "LMGRID_VERBOSE": "1"}
    where = ["--workflow-profile", str(profile), "--jobs", "10"] if profile else ["--cores", "2"]
    cmd = [str(Path(sys.executable).with_name("snakemake")), "-s", str(snakefile), "-d", str(workdir),
           "--configfile", "config.yaml", "-n", "-p", *where, *args]
    out = subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    jobs: dict[str, list[dict]] = {}
    for block in re.split(r"^(?:local)?rule ", out.stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        resources = dict(kv.split("=", 1) for kv in res[1].split(", ")) if res else {}
        shell = re.search(r"^Shell command: (.*)$", block, re.M)
        jobs.setdefault(rule, []).append({"resources": resources, "shell": shell[1] if shell else ""})
    return jobs


def training_jobs(jobs: dict) -> list[dict]:
    found = jobs.get("train", []) + jobs.get("train_gated", [])
    assert len(found) == 3, jobs.keys()  # rnn, lstm, gru
    return found


def mutant_workflow(tmp_path: Path, repo: Path, old: str, new: str) -> Path:
    """A copy of the workflow with one piece of common.smk replaced; returns its Snakefile."""
    root = tmp_path / "mutant_workflow"
    root.mkdir(parents=True)
    shutil.copy(repo / "Snakefile", root / "Snakefile")
    shutil.copytree(repo / "workflow", root / "workflow")
    shutil.copytree(repo / "profiles", root / "profiles")
    common = root / "workflow/rules/common.smk"
    text = common.read_text()
    assert text.count(old) == 1, old
    common.write_text(text.replace(old, new))
    return root / "Snakefile"


def local_gpu_problems(snakefile: Path, workdir: Path) -> list[str]:
    """With one (faked) GPU and accelerator auto: every training job asks for it (gpu=1, placement cuda), and the
    run offers one GPU in all, so a job of 2 DDP processes is cut to the one there is (Snakemake caps a request at
    what the run provides)."""
    problems = []
    for devices in (1, 2):
        config = {**CONFIG, "train": {**CONFIG["train"], "devices": devices, "precision": "auto"}}
        jobs = dry_run(workdir / f"d{devices}", snakefile, inject=FAKE_GPU, config=config)
        for job in training_jobs(jobs):
            if job["resources"].get("gpu") != "1":
                problems.append(f"devices {devices}: gpu={job['resources'].get('gpu')}")
            if "'placement=cuda bf16-mixed'" not in job["shell"]:
                problems.append(f"devices {devices}: {job['shell'][-80:]}")
        problems += [f"n-gram job asks for a GPU: {j}" for j in jobs.get("ngram", []) if j["resources"].get("gpu", "0") != "0"]
    return problems


def test_local_runs_give_gpu_jobs_the_gpus_there_are(tmp_path, repo):
    """Kills: `auto` not counting as asking for a GPU (the first negative control: train_gpu as before issue 30,
    gpu only for accelerator gpu/cuda, gives gpu=0 and three jobs at once on cuda:0) and no limit on a local run
    (the second: without the registered gpu resource a 2-process job asks for gpu=2 of a machine with one)."""
    assert local_gpu_problems(repo / "Snakefile", tmp_path / "real") == []

    old_ask = mutant_workflow(tmp_path / "m1", repo, 'return asks_for_gpus(cell_spec(wildcards).placement["device"], _devices(wildcards))',
                              'return _devices(wildcards) if cell_spec(wildcards).hparams["accelerator"] in ("gpu", "cuda") '
                              'else 0')
    assert any("gpu=0" in p for p in local_gpu_problems(old_ask, tmp_path / "m1"))
    no_limit = mutant_workflow(tmp_path / "m2", repo, 'workflow.register_resource("gpu", GPUS_HERE)', "pass")
    assert "devices 2: gpu=2" in local_gpu_problems(no_limit, tmp_path / "m2")


def test_no_gpu_here_means_no_gpu_requests_and_placement_cpu(tmp_path, repo):
    jobs = dry_run(tmp_path, repo / "Snakefile")  # this machine: no GPU device files (or torch sees none)
    for job in training_jobs(jobs):
        assert job["resources"].get("gpu") == "0" and "'placement=cpu 32-true'" in job["shell"], job


def slurm_problems(snakefile: Path, profile: Path, workdir: Path, schema: dict,
                   cases=((1, 1), (1, 2), (4, 1), (4, 2))) -> list[str]:
    """Under the SLURM profile, at devices 1 and 4 and attempts 1 and 2: gpu = devices, mem_mb = the per-process
    default x devices x attempt, runtime = the default x attempt (defaults read from the schema)."""
    cluster = schema["properties"]["cluster"]["properties"]
    mem_mb, runtime = cluster["train_mem_mb"]["default"], cluster["train_runtime_min"]["default"]
    problems = []
    for devices, attempt in cases:
        config = {**CONFIG, "train": {**CONFIG["train"], "devices": devices}}
        jobs = dry_run(workdir / f"d{devices}a{attempt}", snakefile, "--attempt", str(attempt), config=config,
                       profile=profile)
        want = {"gpu": str(devices), "mem_mb": str(mem_mb * devices * attempt), "runtime": str(runtime * attempt)}
        for job in training_jobs(jobs):
            got = {k: job["resources"].get(k) for k in want}
            if got != want:
                problems.append(f"devices {devices}, attempt {attempt}: {got} != {want}")
            if "'placement=cuda 32-true'" not in job["shell"]:
                problems.append(f"devices {devices}: not planned on cuda: {job['shell'][-60:]}")
    return problems


def test_slurm_profile_lets_the_rule_size_training_jobs(tmp_path, repo):
    """Kills: the profile's fixed `gpu: 1`, `mem_mb: 8000`, `runtime: 240` replacing the rule's functions (the
    negative control: that profile asks for 1 GPU, 8000 MB and 240 min at 4 devices and on every attempt)."""
    profile = yaml.safe_load((repo / "profiles/slurm/profile.yaml").read_text())
    assert profile["retries"] >= 1
    for rule in ("train", "train_gated"):
        assert not {"gpu", "mem_mb", "runtime"} & set(profile["set-resources"][rule]), rule
    schema = yaml.safe_load((repo / "workflow/schemas/config.schema.yaml").read_text())
    assert slurm_problems(repo / "Snakefile", repo / "profiles/slurm", tmp_path / "real", schema) == []

    old = tmp_path / "old_profile"
    old.mkdir()
    profile["set-resources"]["train"] = profile["set-resources"]["train_gated"] = OLD_SLURM_TRAIN
    (old / "profile.yaml").write_text(yaml.safe_dump(profile))
    problems = slurm_problems(repo / "Snakefile", old, tmp_path / "old", schema, cases=[(4, 2)])
    assert any(p.startswith("devices 4, attempt 2: {'gpu': '1', 'mem_mb': '8000', 'runtime': '240'}") for p in problems)
