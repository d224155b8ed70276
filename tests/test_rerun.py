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
    own = "    input:\n        COMBINE_JOBS.inputs,\n"
    assert rules.read_text().count(own) == 1
    every = ("    input:\n        lambda w: sorted(set().union(*(COMBINE_JOBS.inputs(\n"
             "            __import__('types').SimpleNamespace(corpus=w.corpus, combo=c)) for c in COMBINE))),\n")
    rules.write_text(rules.read_text().replace(own, every))
    grid = copy_grid(finished, tmp_path / "grid")
    targets = [COMBINED.format(name) for name in CONFIG["combine"]]
    r = snakemake(grid, mutant, *targets)  # the mutant's inputs differ: both combinations rerun once, nothing else
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert planned_combinations(grid, mutant, rnn_changed, *targets) == {"kn_rnn", "kn_gru"}


# -- the run spec's rerun triggers (lmgrid.run.spec.RunSpec.trigger_params; workflow/rules/common.smk) -------------

# The train rule's params of every grid finished before the run spec (common.smk's SETTING_PARAMS then): run_dir,
# ckpt_dir, the placement and one "key=<json>" per setting of this list, in Snakemake's records as repr() strings.
TODAYS_SETTING_PARAMS = [
    "epochs", "batch_size", "stream_batch_size", "eval_batch_size", "stream_eval_batch_size", "bptt",
    "max_train_tokens", "optimizer", "lr", "momentum", "weight_decay", "clip", "lr_decay", "lr_decays",
    "plateau_patience", "plateau_min_delta", "lr_decay_from_epoch", "average_from_epoch", "min_lr", "emb_dim",
    "hidden_dim", "dropout", "tie_weights", "weight_drop", "activation", "direct", "heads", "output_layer",
    "init_range", "residual", "precision", "deterministic"]


def _train_records(grid: Path):
    """(output path, record file) of every train/train_gated output in Snakemake's metadata (persistence/file.py:
    the path urlsafe-base64 encoded, long ones cut into folders whose names start with '@')."""
    import base64
    import os

    meta = grid / ".snakemake" / "metadata"
    for root, _, files in os.walk(meta):
        for f in files:
            parts = Path(root, f).relative_to(meta).parts
            path = base64.urlsafe_b64decode("".join(p.lstrip("@") for p in parts)).decode()
            # A run folder also holds the reset pass's file (rule reset_scores, its own params): not a training record.
            if path.startswith("results/tiny/runs/") and path.split("/")[3] in ("ffnn", "rnn", "gru") \
                    and not path.endswith("/reset_scores.json"):
                yield path, Path(root, f)


def _todays_params(path: str) -> list[str]:
    import json

    from lmgrid.run.settings import resolve_hparams
    from lmgrid.run.key import beside_runs

    run_dir = str(Path(path).parent)
    arch = run_dir.split("/")[3]
    hp = resolve_hparams(CONFIG["train"], arch)
    ckpt_dir = run_dir.replace("results/tiny/runs/", "results/tiny/ckpt/runs/")
    assert beside_runs("ckpt/runs").startswith("results/{corpus}/ckpt/runs/")
    return sorted(repr(p) for p in [run_dir, ckpt_dir, "placement=cpu 32-true",
                                    *(f"{k}={json.dumps(hp[k])}" for k in TODAYS_SETTING_PARAMS)])


# The train rule's command before the run spec (its settings as 32 --set flags), as Snakemake recorded it.
COMMAND_BEFORE_THE_RUN_SPEC = (
    "lmgrid train --arch {wildcards.arch} --impl {wildcards.impl} --n-step {wildcards.n_step} --layers "
    "{wildcards.layers} --regime {wildcards.regime} --seed {wildcards.seed} --train {input.train} --valid "
    "{input.valid} --test {input.test} --vocab {input.vocab} --run-dir {params.run_dir} --ckpt-dir "
    "{params.ckpt_dir} --set {params.epochs:q} --set {params.lr:q} --set {params.placement:q} --threads {threads} "
    "> {log} 2>&1 && tail -n 1 {log}")


def test_a_grid_finished_with_todays_params_is_not_retrained(finished, repo, tmp_path):
    """A grid whose training jobs recorded the params of the code before the run spec (written into a copy's
    Snakemake records here, from this test's own frozen list) plans no training job: the spec's trigger params are
    exactly those strings.  Kills: a contract-1 setting dropped from the triggers at its (neutral) default, a value
    written another way, or a param added (e.g. a later setting recorded as 'None').  The negative control: the same
    records with one setting's string missing plan every neural cell again.  Each cell's spec file, written when its
    job started, holds what its params say.

    The records also hold the train rule's command of that code (32 --set flags, not --spec): the profile leaves the
    command's text out of the rerun triggers.  Kills: `code` put back into profiles/default's rerun-triggers (the
    control: with `--rerun-triggers ... code` every neural cell is planned, for the command alone)."""
    import json

    from lmgrid.run.spec import RunSpec

    grid = copy_grid(finished, tmp_path / "grid")
    records = list(_train_records(grid))
    assert len(records) >= 4 * 3, records  # 4 neural cells: metrics.json, log.csv, model.ckpt (+ gates.csv)
    for path, record in records:
        data = json.loads(record.read_text())
        assert sorted(data["params"]) == _todays_params(path), path  # what this code recorded: today's
        spec = RunSpec.read(grid / (str(Path(path).parent).replace("/runs/", "/specs/runs/", 1) + ".json"))
        assert sorted(repr(p) for p in [spec.run_dir, spec.ckpt_dir, spec.placement_param(),
                                        *spec.trigger_params().values()]) == _todays_params(path)
        data["params"] = _todays_params(path)
        data["code"] = COMMAND_BEFORE_THE_RUN_SPEC
        record.write_text(json.dumps(data))
    r = snakemake(grid, repo, "-n")
    assert r.returncode == 0 and planned_jobs(r) == {}, (r.stdout + r.stderr)[-3000:]
    jobs = planned_jobs(snakemake(grid, repo, "-n", "--rerun-triggers", "mtime", "params", "input", "software-env",
                                  "code"))
    assert jobs.get("train") == 3 and jobs.get("train_gated") == 1, jobs  # the command's text alone, as a trigger

    for _, record in records:  # the negative control
        data = json.loads(record.read_text())
        data["params"] = [p for p in data["params"] if p != "'init_range=0.0'"]
        record.write_text(json.dumps(data))
    jobs = planned_jobs(snakemake(grid, repo, "-n"))
    assert jobs.get("train") == 3 and jobs.get("train_gated") == 1, jobs


def test_a_contract_1_setting_off_its_neutral_default_reruns_its_cells_only(finished, repo):
    """weight_drop (x-neutral-default, and a contract-1 trigger) set for the GRU only reruns the GRU cell and names
    the setting.  Kills: triggers read from anything but the cell's own spec (e.g. train: without per_arch)."""
    jobs, out = planned(finished, repo, "set=train.per_arch.gru.weight_drop=0.2")
    assert jobs.get("train_gated") == 1 and "train" not in jobs and "ngram" not in jobs, jobs
    assert "now: 'weight_drop=0.2'" in out and "before: 'weight_drop=0.0'" in out, out[-3000:]


def _with_new_setting(repo: Path, to: Path, mutate_spec: bool = False) -> Path:
    """A copy of the workflow and of lmgrid whose schema has one setting more, `zoneout`, marked x-neutral-default
    (default 0.0), as a later change would add it.  mutate_spec: the triggers ignore x-neutral-default."""
    import shutil

    to.mkdir()
    for name in ("Snakefile", "workflow", "profiles", "src"):
        copy = shutil.copytree if (repo / name).is_dir() else shutil.copy
        copy(repo / name, to / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree
                                        else {}))
    schema = to / "workflow" / "schemas" / "config.schema.yaml"
    text = schema.read_text()
    anchor = next(line for line in text.splitlines(keepends=True) if line.lstrip().startswith("init_range:"))
    indent = anchor[:len(anchor) - len(anchor.lstrip())]
    schema.write_text(text.replace(anchor, anchor + f'{indent}zoneout: {{type: number, minimum: 0, maximum: 1, '
                                                    f'default: 0.0, x-neutral-default: true}}\n', 1))
    if mutate_spec:
        spec = to / "src" / "lmgrid" / "run" / "spec.py"
        own = "[k for k in computing if k not in CONTRACT_1_TRIGGERS]"
        assert spec.read_text().count(own) == 1
        spec.write_text(spec.read_text().replace(
            own, "[k for k in self.hparams if k not in CONTRACT_1_TRIGGERS and k not in NOT_COMPUTING]"))
    return to


def _dry_run_with(workflow: Path, grid: Path, *config: str) -> tuple[dict[str, int], str]:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(workflow / "src"), "LMGRID_VERBOSE": "1"}
    cmd = [str(Path(sys.executable).with_name("snakemake")), "-s", str(workflow / "Snakefile"), "-d", str(grid),
           "--cores", "2", "-n", *VERBOSE, *(("--config", *config) if config else ())]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return planned_jobs(r), r.stdout + r.stderr


def test_a_setting_added_to_the_schema_reruns_nothing_until_it_is_set(finished, repo, tmp_path):
    """A new training setting with x-neutral-default, at its default, plans nothing on a finished grid (no param,
    and the train rule's command names no setting); set for the RNN it reruns the two RNN cells only, naming it.
    Kills: a new setting that is always a param, and a command that lists the settings (Snakemake's code trigger).
    The negative control, run here: with the triggers ignoring x-neutral-default the same grid plans every neural
    cell at the default."""
    workflow = _with_new_setting(repo, tmp_path / "wf")
    assert _dry_run_with(workflow, finished)[0] == {}
    jobs, out = _dry_run_with(workflow, finished, "set=train.per_arch.rnn.zoneout=0.1")
    assert jobs.get("train") == 2 and "train_gated" not in jobs and "ngram" not in jobs, jobs
    assert "now: 'zoneout=0.1'" in out, out[-3000:]

    mutant = _with_new_setting(repo, tmp_path / "mutant", mutate_spec=True)
    jobs, _ = _dry_run_with(mutant, finished)
    assert jobs.get("train") == 3 and jobs.get("train_gated") == 1, jobs
