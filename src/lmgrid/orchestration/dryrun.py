"""What a run would do, and why: the jobs `snakemake -n` schedules, from Snakemake's own DAG.

`lmgrid status` and `lmgrid plan` ask Snakemake (its Python API, in this process: ~2 s for the default config)
which jobs the workflow as configured would run, so a cell is pending for every reason Snakemake has: a missing
or incomplete output, changed params, changed code, a changed set of inputs, an input newer than the output or
rebuilt by another pending job.  Each job comes with a short reason ("params changed: lr"), its threads, the
pending jobs it waits for, and how long its last run took by Snakemake's metadata (a fallback for estimates).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.data.rawdata import PTB_DIR_ENV
from lmgrid.run.key import CELL_RULES, RunKey

# The workflow of the folder a user runs `lmgrid status` or `plan` in, as `snakemake` itself finds it: not the
# Snakefile beside the installed package, which belongs to another checkout when lmgrid is installed elsewhere.
SNAKEFILE = "Snakefile"


@dataclass
class Job:
    rule: str
    wildcards: dict
    reason: str
    threads: int = 1
    deps: list[int] = field(default_factory=list)  # indices, in Plan.jobs, of the pending jobs it waits for
    last_s: float | None = None  # wall seconds of its outputs' last run (Snakemake metadata), when recorded

    @property
    def key(self) -> RunKey | None:
        return RunKey.from_wildcards(self.wildcards) if self.rule in CELL_RULES else None


@dataclass
class Plan:
    jobs: list[Job]
    dag_s: float = 0.0  # how long building the DAG took (a run spends as much before its first job)

    def cells(self) -> dict[RunKey, Job]:
        return {j.key: j for j in self.jobs if j.key is not None}

    def others(self) -> list[Job]:
        return [j for j in self.jobs if j.key is None]


def _params_changed(job, change, persistence) -> str:
    """Names of the changed params: 'lr' for a 'lr=0.02' setting param, else the param's name in the rule."""
    changed = change.only_old | change.only_new
    names = []
    for name, value in job.params.items():
        serialized = persistence._serialize_param(value)
        if serialized in changed:
            # "lr=0.02" (a training setting) names lr; "--addk-k 0.5" names addk-k; else the param's name.
            m = re.match(r"^([A-Za-z_][\w.]*)=", str(value)) or re.match(r"^--([\w-]+)[ =]", str(value))
            names.append(m[1] if m else name)
    return ", ".join(sorted(set(names))) or "unnamed"


def reason_text(job, reason, persistence) -> str:
    """Snakemake's reason for a job, short: 'missing output', 'params changed: lr', 'code changed', ..."""
    parts = []
    if reason.forced:  # nothing is forced but what the profile's rerun-incomplete forces
        parts.append("incomplete output (interrupted, or running now)")
    if reason.noio or reason.nooutput:
        parts.append("always runs")
    if reason._missing_output:
        parts.append("missing output")
    if reason._incomplete_output:
        parts.append("incomplete output (interrupted)")
    if reason._updated_input:
        newer = sorted(Path(f).name for f in reason.updated_input - reason.updated_input_run)
        if newer:
            parts.append("newer input: " + ", ".join(newer[:3]) + (" ..." if len(newer) > 3 else ""))
    if reason._updated_input_run:
        parts.append("input rebuilt first")
    if reason.input_changed:
        parts.append("set of inputs changed")
    if reason.code_changed:
        parts.append("code changed")
    if reason.params_changed:
        parts.append("params changed: " + _params_changed(job, reason.params_changed, persistence))
    if reason.software_stack_changed:
        parts.append("software environment changed")
    return "; ".join(parts) or "scheduled"


def _last_s(job, persistence) -> float | None:
    for f in job.output:
        try:
            record = persistence.metadata(f)
        except Exception:  # an unreadable record is no estimate, not an error
            continue
        if record and record.get("starttime") and record.get("endtime"):
            return max(record["endtime"] - record["starttime"], 0.0)
    return None


def explain(message: str) -> str:
    """Snakemake's first error line, with the way out when it is an unreachable download (corpus.download): the
    http storage plugin asks the server about every URL while planning, so with no network even a dry run stops."""
    if message.startswith("Failed to check existence of http"):
        return (f"{message} (no network, or the server is down: point ${PTB_DIR_ENV} or corpus.files at local "
                "copies of the files)")
    return message


def snakefile_path(given: str | Path | None = None) -> Path:
    """The Snakefile to plan with: `given` (--snakefile), else ./Snakefile of the current folder; one line when
    there is none."""
    path = Path(given or SNAKEFILE)
    if not path.is_file():
        where = f"{path}: file not found" if given else f"no Snakefile in {Path.cwd()}"
        raise LmgridError(f"{where} (run lmgrid status or plan in the folder holding the Snakefile, or give "
                          "--snakefile)")
    return path.resolve()


def dry_run(configfiles=(), assignments: str = "", cores: int = 1, snakefile: str | Path | None = None,
            workdir: str | Path = ".") -> Plan:
    """The jobs `snakemake -n --cores CORES [--configfile F]... [--config set=ASSIGNMENTS]` would run, by the
    Snakefile `snakefile` (default: ./Snakefile, snakefile_path)."""
    snakefile = snakefile_path(snakefile)
    started = time.time()
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, Quietness, ResourceSettings

    config = ConfigSettings(config={"set": assignments} if assignments else {},
                            configfiles=[Path(f) for f in configfiles])
    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow_api = api.workflow(ResourceSettings(cores=max(cores, 1)), config, snakefile=Path(snakefile),
                                        workdir=Path(workdir))
            # profiles/default sets rerun-incomplete: interrupted outputs are rerun, not an error.
            workflow_api.dag(DAGSettings(force_incomplete=True))
            workflow = workflow_api._workflow
            # No lock: a run may hold it, and a dry run changes nothing.
            workflow._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True, nolock=True)
            workflow._build_dag()
            dag, persistence = workflow.dag, workflow.persistence
            pending = [job for job in dag.needrun_jobs() if not job.rule.norun]
            index = {job: i for i, job in enumerate(pending)}
            jobs = [Job(job.rule.name, dict(job.wildcards), reason_text(job, dag.reason(job), persistence),
                        threads=int(job.threads), deps=sorted(index[d] for d in dag.dependencies[job] if d in index),
                        last_s=_last_s(job, persistence))
                    for job in pending]
    except SystemExit as e:  # the Snakefile stops on a bad config with one line
        raise LmgridError(str(e.code).removeprefix("lmgrid: error: ")) from None
    except LmgridError:
        raise
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise LmgridError(f"{snakefile}: the dry run failed: {explain(first)}") from None
    return Plan(jobs, time.time() - started)
