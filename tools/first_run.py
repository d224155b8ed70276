#!/usr/bin/env python3
"""A new user's first run, timed: the README's quick start on a fresh clone with empty package caches.

    python3 tools/first_run.py [--repo .] [--parent DIR] [--keep] [--json PATH] [--snapshot DIR]
                               [--avx2-emulation SHARE]                                          # make first-run

It clones the repository's HEAD into a new folder under --parent (default: the folder beside the repository, whose
disk already holds one virtual environment), links `shared/` beside the clone when the repository has `../shared`,
points uv's cache at a new empty folder and turns pip's off (`PIP_NO_CACHE_DIR=1`), then runs `make setup` and
`make run` there, each timed by its wall clock.  It prints the two times, their sum and the machine (the CPU model,
its vector ISA, whether it has avx512_bf16, its cores), and writes the same as one JSON object to
`results/first_run.json` in the clone (and to --json).  --snapshot DIR then takes the docs snapshot of the clone's
run (`lmgrid docs --from results/<corpus> --snapshot DIR`, the clone's lmgrid), which carries those figures, so the
docs render the install-included time of the very run they show.

--avx2-emulation SHARE times it as an AVX2-only CPU would, by emulation, on a machine with AVX-512: both steps run
with the kernels capped at AVX2 (lmgrid.neural.precision.avx2_emulation_env: oneDNN, ATen and MKL at AVX2, lmgrid
told an AVX2-only CPU's flags, as `make test-avx2` runs) and in a new cgroup whose CPU quota is SHARE times the
machine's cores, so that each core gives SHARE of its time, as a slower CPU would (cgroup v2 `cpu.max` or v1
`cpu.cfs_quota_us`, a period of CGROUP_PERIOD_US; the group is removed at the end).  SHARE is 0 < SHARE <= 1 and
should come from a calibration against a real AVX2-only CPU (docs/benchmarks.md, "An AVX2-only CPU, emulated").
The JSON's `emulation` says so (`null` for a native run), while `isa`, `cpu` and `cores` stay this machine's.  It is
an emulation, not an AVX2 machine: its figures are written with --json, never as a docs snapshot's run (--snapshot
is refused with it).  It needs a writable cgroup cpu controller (as root); $LMGRID_CGROUP_ROOT replaces
/sys/fs/cgroup (the tests point it at a folder of plain files in the v1 layout).

This is the measurement the project's target for the quick start is read from (at most 8 minutes, install included, on
a 2-core AVX2-only CPU): one command on the machine in question, so nobody times it by hand. It prints figures and
asserts nothing; the network's speed, the load and the CPU all enter them. Only the committed HEAD is measured:
uncommitted changes are named in a warning and left out.

It runs before any virtual environment exists, so it uses the standard library and lmgrid's own modules that need
nothing else (the machine, the CPU flags, the ISA ranking), from this source tree's src/. Exit status: 0 when both
steps passed (the clone is removed unless --keep), 1 when one failed (the clone and its logs are kept; one line names
the step and its log), 2 on bad arguments (or no writable cgroup cpu controller for --avx2-emulation).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# lmgrid's own standard-library modules, from the source tree this tool sits in (no venv needed).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from lmgrid.bench.peak import fp32_lanes  # noqa: E402
from lmgrid.common.gitinfo import UNKNOWN, commit  # noqa: E402
from lmgrid.common.machine import machine  # noqa: E402
from lmgrid.neural.precision import avx2_emulation_env, cpu_flags  # noqa: E402

# fp32_lanes' ISA -> the name this tool records (first_run.json's `isa`; lmgrid.analysis.docs_tables.first_run).
ISA_NAMES = {"avx512f": "avx512", "avx2+fma": "avx2-only", "sse": "older"}
# The README's quick start, in order: the install, then the default pipeline with its report.
STEPS = ("setup", "run")
# The quick start's target (seconds), install included, on a 2-core AVX2-only CPU.
TARGET_S = 8 * 60
# --avx2-emulation's CPU quota: where the cgroup file systems are (replaced by $LMGRID_CGROUP_ROOT in the tests), the
# period (microseconds; a short one throttles smoothly, a step at a time, rather than in 100 ms stalls) and the
# kernel's smallest quota.
CGROUP_ROOT_ENV = "LMGRID_CGROUP_ROOT"
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PERIOD_US = 10_000
CGROUP_MIN_QUOTA_US = 1_000
CGROUP_PREFIX = "lmgrid-first-run."


def cpu() -> dict:
    """The machine as a docs snapshot names it (lmgrid.common.machine: CPU model, avx512_bf16, cores) and its vector
    ISA (isa) from the flags lmgrid reads (lmgrid.neural.precision.cpu_flags)."""
    return {**machine(), "isa": isa(cpu_flags())}


def isa(flags: set[str]) -> str:
    """The widest fp32 SIMD of the flags, as lmgrid.bench.peak.fp32_lanes ranks them: `avx512` (AVX-512 Foundation),
    `avx2-only` (AVX2 and FMA, no AVX-512), `older`; `unknown` with no flags at all."""
    return ISA_NAMES[fp32_lanes(flags)[0]] if flags else "unknown"


def fresh_env(caches: Path) -> dict:
    """The environment of a new machine's install: uv's cache a new empty folder, pip's cache off."""
    caches.mkdir(parents=True)
    return {**os.environ, "UV_CACHE_DIR": str(caches), "PIP_NO_CACHE_DIR": "1"}


def cpu_share(text: str) -> float:
    """--avx2-emulation's SHARE: a number over 0 and at most 1 (argparse names the option and the value)."""
    try:
        share = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (SHARE: 0 < SHARE <= 1)") from None
    if not 0 < share <= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not over 0 and at most 1 (SHARE: 0 < SHARE <= 1)")
    return share


class CpuGroup:
    """A new cgroup under the cpu controller whose quota is `share` x `cores` x the period: the processes put in it
    (and their children, which inherit it) get together at most that much CPU time, each core SHARE of its time.
    cgroup v2 (`cpu.max`, where cgroup.controllers lists cpu; +cpu enabled in the parent's cgroup.subtree_control
    if needed) or v1 (`cpu/cpu.cfs_period_us`, `cpu/cpu.cfs_quota_us`).  create() raises OSError saying what it
    looked for and what failed; remove() moves processes still alive back to the parent and removes the group."""

    def __init__(self, share: float, cores: int, root: str | Path | None = None):
        self.root = Path(root or os.environ.get(CGROUP_ROOT_ENV) or CGROUP_ROOT)
        self.quota_us = round(share * cores * CGROUP_PERIOD_US)
        self.path: Path | None = None

    def looked_for(self) -> str:
        return (f"cgroup v2: {self.root}/cgroup.controllers listing cpu; cgroup v1: "
                f"{self.root}/cpu/cpu.cfs_quota_us")

    def create(self) -> Path:
        if self.quota_us < CGROUP_MIN_QUOTA_US:
            raise OSError(f"a quota of {self.quota_us} us per {CGROUP_PERIOD_US} us is under the kernel's "
                          f"{CGROUP_MIN_QUOTA_US} us: SHARE is too small")
        controllers = self.root / "cgroup.controllers"
        if controllers.is_file() and "cpu" in controllers.read_text().split():
            parent, v2 = self.root, True
        elif (self.root / "cpu" / "cpu.cfs_quota_us").is_file():
            parent, v2 = self.root / "cpu", False
        else:
            raise OSError(f"neither is there under {self.root}")
        if v2 and "cpu" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+cpu")
        self.path = parent / f"{CGROUP_PREFIX}{os.getpid()}"
        self.path.mkdir()
        try:
            if v2:
                (self.path / "cpu.max").write_text(f"{self.quota_us} {CGROUP_PERIOD_US}")
            else:
                (self.path / "cpu.cfs_period_us").write_text(str(CGROUP_PERIOD_US))
                (self.path / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        except OSError:
            self.remove()
            raise
        return self.path

    def enter(self) -> None:
        """Put this process in the group (a subprocess's preexec_fn: the step's make, before it execs)."""
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    def remove(self) -> None:
        """Move what still runs in the group (a step's leftover background process) to the parent, then remove it;
        a folder of plain files (a stand-in root) has its files removed first."""
        if self.path is None or not self.path.exists():
            return
        group, self.path = self.path, None
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), 0)
                except (OSError, ValueError):
                    continue  # ended (a stand-in root keeps the pid of the step that ran)
                (group.parent / "cgroup.procs").write_text(pid)
        except OSError:
            pass
        for attempt in range(50):
            try:
                group.rmdir()
                return
            except OSError:
                for f in group.iterdir():
                    if f.is_file() and not f.is_symlink():
                        try:
                            f.unlink()  # plain files of a stand-in; a real cgroup's refuse and go with it
                        except OSError:
                            pass
                time.sleep(0.1)  # a process in it still ending
        group.rmdir()


def clone(repo: Path, parent: Path, at: str | None = None,
          prefix: str = "lmgrid-first-run.") -> tuple[Path, str, bool]:
    """A fresh clone of `repo`'s HEAD (or of the commit `at`) in a new folder `prefix`... under `parent`, with
    `shared` linked beside it when the repo has `../shared`; its path, the commit and whether `repo` had uncommitted
    changes to tracked files."""
    head = commit(repo, short=None) if at is None else {"commit": at, "dirty": False}
    if head["commit"] == UNKNOWN:
        raise OSError(f"git finds no HEAD in {repo}")
    top = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    work = top / repo.resolve().name
    try:
        subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
        subprocess.run(["git", "-C", str(work), "checkout", "-q", head["commit"]], check=True)
    except (OSError, subprocess.CalledProcessError):
        shutil.rmtree(top)  # no half-made clone left behind
        raise
    if (repo.resolve().parent / "shared").is_dir():
        (top / "shared").symlink_to(repo.resolve().parent / "shared")
    return work, head["commit"], head["dirty"]


def repo_and_parent(ap: argparse.ArgumentParser, args) -> tuple[Path, Path]:
    """--repo and --parent resolved (--parent: beside the repository by default); argparse's one-line error, exit 2,
    where --repo is no git repository or --parent no folder."""
    repo = args.repo.resolve()
    if not (repo / ".git").exists():
        ap.error(f"--repo {args.repo}: not a git repository")
    parent = (args.parent or repo.parent).resolve()
    if not parent.is_dir():
        ap.error(f"--parent {parent}: no such folder")
    return repo, parent


def timed(step: str, work: Path, env: dict, group: CpuGroup | None = None) -> tuple[int, int]:
    """`make <step>` in `work` (in `group` when one is given), its output in `work/first_run.<step>.log`: wall
    seconds and exit status.  Whole seconds: a step takes minutes, and the sum of the shown parts then equals the
    shown total."""
    with open(work / f"first_run.{step}.log", "w") as log:
        start = time.monotonic()
        rc = subprocess.run(["make", step], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=group.enter if group else None).returncode
    return round(time.monotonic() - start), rc


def snapshot(work: Path, dest: Path) -> str | None:
    """`lmgrid docs --from results/<corpus> --snapshot dest` with the clone's own lmgrid (the commit measured), so
    the docs snapshot carries results/first_run.json; None when it worked, else why not, in a few words."""
    found = sorted(work.glob("results/*/summary.csv"))
    if len(found) != 1:
        return f"{len(found)} results/<corpus>/summary.csv in {work}, not one"
    cmd = [str(work / ".venv" / "bin" / "lmgrid"), "docs", "--from", str(found[0].parent), "--snapshot", str(dest)]
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    last = (r.stderr.strip().splitlines() or [""])[-1]
    return None if r.returncode == 0 else f"`lmgrid docs --snapshot {dest}` exited {r.returncode}: {last}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/first_run.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Path("."), help="the repository whose HEAD is measured")
    ap.add_argument("--parent", type=Path, help="where the fresh clone goes (default: beside the repository)")
    ap.add_argument("--keep", action="store_true", help="keep the clone, its venv, cache and logs")
    ap.add_argument("--json", type=Path, help="also write the figures here as one JSON object")
    ap.add_argument("--snapshot", type=Path, metavar="DIR",
                    help="then snapshot the clone's run into DIR (docs/results/<name>) with the figures in it")
    ap.add_argument("--avx2-emulation", type=cpu_share, metavar="SHARE",
                    help="time it as an AVX2-only CPU would, by emulation: the kernels capped at AVX2 and each core "
                         "at SHARE (0 < SHARE <= 1, from a calibration) of its time, by a cgroup CPU quota (as root)")
    args = ap.parse_args(argv)
    repo, parent = repo_and_parent(ap, args)
    if args.json and not args.json.resolve().parent.is_dir():
        ap.error(f"--json {args.json}: its folder {args.json.resolve().parent} does not exist")
    share = args.avx2_emulation
    if share is not None and args.snapshot:
        print("first-run: error: --avx2-emulation with --snapshot: an emulated run's results and timings are not "
              "the docs' run; write its figures with --json beside the snapshot instead", file=sys.stderr)
        return 2
    machine_now = cpu()
    group = None
    if share is not None:
        group = CpuGroup(share, machine_now["cores"])
        try:
            group.create()
        except OSError as e:
            print(f"first-run: error: --avx2-emulation needs a writable cgroup cpu controller "
                  f"({group.looked_for()}): {e}", file=sys.stderr)
            return 2
    try:
        return measure(args, repo, parent, machine_now, group)
    finally:
        if group:
            try:
                group.remove()
            except OSError as e:
                print(f"first-run: warning: could not remove the cgroup {e.filename}: {e.strerror}", file=sys.stderr)


def measure(args, repo: Path, parent: Path, machine_now: dict, group: CpuGroup | None) -> int:
    """Clone, time both steps (under the emulation when `group`), write and print the figures, snapshot."""
    share = args.avx2_emulation
    try:
        work, head, dirty = clone(repo, parent)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"first-run: error: could not clone {repo} under {parent}: {e}", file=sys.stderr)
        return 1
    if dirty:
        print(f"first-run: warning: {repo} has uncommitted changes; measuring its HEAD {head[:10]} without them")
    env = fresh_env(work.parent / "caches")
    if share is not None:
        env.update(avx2_emulation_env())
    # isa, cpu and cores are this machine's, emulated or not; `emulation` says how the run was made
    out = {"commit": head, "clone": str(work), **machine_now, "target_s": TARGET_S,
           "emulation": None if share is None else {"isa": "avx2", "cpu_share": share}}
    for step in STEPS:
        out[f"{step}_s"], rc = timed(step, work, env, group)
        if rc:
            print(f"first-run: error: `make {step}` exited {rc} after {out[f'{step}_s']} s; its log: "
                  f"{work / f'first_run.{step}.log'} (the clone is kept)", file=sys.stderr)
            return 1
    out["total_s"] = sum(out[f"{s}_s"] for s in STEPS)
    figures = json.dumps(out, indent=2) + "\n"
    # beside the corpora, where a docs snapshot of this run finds it (lmgrid.analysis.docs_snapshot.FIRST_RUN_FILE)
    (work / "results").mkdir(exist_ok=True)
    (work / "results" / "first_run.json").write_text(figures)
    emulated = ("" if share is None else
                f" under the AVX2-only emulation (kernels capped at AVX2, {share:g} of each core's time)")
    print(f"first-run at {head[:10]} on {out['cpu']} ({out['isa']}, avx512_bf16: "
          f"{'yes' if out['avx512_bf16'] else 'no'}, {out['cores']} cores){emulated}: make setup {out['setup_s']} s, "
          f"make run {out['run_s']} s, together {out['total_s']} s (the target: {TARGET_S} s on 2 "
          f"AVX2-only cores)")
    if args.json:
        args.json.write_text(figures)
    if args.snapshot:
        failed = snapshot(work, args.snapshot.resolve())
        if failed:
            print(f"first-run: error: {failed} (the clone is kept)", file=sys.stderr)
            return 1
        print(f"first-run: snapshot of the run in {args.snapshot}")
    if not args.keep:
        shutil.rmtree(work.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
