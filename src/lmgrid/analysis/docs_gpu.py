"""The GPU check's figures in the docs (docs/gpu/README.md): a snapshot of one `make gpu-check` output folder and the
blocks rendered from it, so no figure of a GPU run is typed by hand (lmgrid.analysis.docs_render).

`lmgrid docs --from results/gpu-check --snapshot docs/results/gpu_check [--commit REV]` copies the check's
gpu-check.json, gpu-check.log and pytest.xml and writes run.json (the commit, date and the GPU, its driver, torch and
CUDA); `make docs` then renders the blocks `gpu_steps`, `gpu_medium`, `gpu_archs` and `gpu_resume`.  The borrowed GPU
machine has no git history, so the commit the check ran at is given with --commit when gpu-check.json does not
record it (tools/gpu_check.py records it where it can).
"""
from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json, write_json
from lmgrid.common.units import duration_text, markdown_table

FILES = ("gpu-check.json", "gpu-check.log", "pytest.xml")
REPORT = "gpu-check.json"


def is_gpu_check(folder: Path) -> bool:
    return (Path(folder) / REPORT).is_file()


def snapshot(source: str | Path, out: str | Path, commit: str | None = None) -> list[Path]:
    """Copy one GPU check's output into `out` (replacing what was there) and write run.json."""
    source, out = Path(source), Path(out)
    report = read_json(source / REPORT)
    if report.get("dry"):
        raise LmgridError(f"--from {source}: a --dry check (it stopped before the GPU); snapshot a GPU run's folder")
    if "gpu" not in report:
        raise LmgridError(f"--from {source}/{REPORT}: no 'gpu' figures (the check found no GPU)")
    # --commit states the commit the check ran at: the report's "dirty" describes the tree git saw there, which
    # may be another commit's (a stale .git on the borrowed machine), so it is kept only when the two agree.
    dirty = bool(report.get("dirty", False)) and (not commit or str(report.get("commit", "")).startswith(commit[:7]))
    commit = commit or report.get("commit")
    if not commit:
        raise LmgridError(f"--from {source}/{REPORT}: no commit recorded; give --commit REV (the commit it ran at)")
    gpu = report["gpu"]
    stamp = dt.datetime.fromtimestamp((source / REPORT).stat().st_mtime, dt.timezone.utc).date().isoformat()
    run = {"name": out.name, "corpus": "ptb", "kind": "gpu-check", "commit": str(commit)[:10],
           "dirty": dirty, "date": report.get("date", stamp), "wall_s": report["wall_s"],
           "ok": report["ok"], "machine": {"gpu": gpu["name"], "memory_mib": gpu["memory_mib"],
                                           "driver": gpu["driver"], "torch": gpu["torch"], "cuda": gpu["cuda"]}}
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    written = []
    for name in FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
            written.append(out / name)
    write_json(out / "run.json", run)
    return [*written, out / "run.json"]


def provenance(run: dict, src: str) -> str:
    m = run["machine"]
    dirty = " with uncommitted changes" if run.get("dirty") else ""
    return (f"<sub>Rendered by `lmgrid docs` from `{src}`: `make gpu-check` at commit {run['commit']}{dirty}, "
            f"{run['date']}, on one {m['gpu']} ({m['memory_mib']:,} MiB; driver {m['driver']}, torch {m['torch']}, "
            f"CUDA {m['cuda']}).</sub>")


def _report(snap: Path) -> dict:
    path = snap / REPORT
    if not path.is_file():
        raise LmgridError(f"{path}: not in the snapshot (give a GPU check's snapshot)")
    return read_json(path)


def gpu_steps(snap: Path, _arg: str = "") -> str:
    """The verdict line and each step's outcome and seconds."""
    r = _report(snap)
    failed = {f["step"]: f["error"] for f in r["failures"]}
    rows = [{"step": step, "result": f"failed: {failed[step]}" if step in failed else "passed",
             "seconds": f"{seconds:.1f}"} for step, seconds in r["step_s"].items()]
    t = r.get("tests", {}).get("run", {})
    verdict = (f"**Every step passed** in {duration_text(r['wall_s'])} of wall time" if r["ok"] else
               f"**{len(failed)} step(s) failed** ({', '.join(failed)}) in {duration_text(r['wall_s'])}")
    tests = (f"; the GPU-path tests: {t['passed']} passed, {t['skipped']} skipped, {t['failures']} failed, "
             f"{t['errors']} errors" if t else "")
    return f"{verdict}{tests}.\n\n{markdown_table(rows)}"


def gpu_medium(snap: Path, _arg: str = "") -> str:
    """The medium cell's runs: tokens, throughput, peak memory and valid PPL, per precision."""
    r = _report(snap)
    rows = [{"precision": p, "train tokens": f"{m['train_tokens']:,}", "train tokens/s": f"{m['train_tokens_per_s']:,}",
             "eval tokens/s": f"{m['eval_tokens_per_s']:,}", "peak GPU MiB": f"{m['peak_mib']:,}",
             "valid PPL": f"{m['valid_ppl']:.2f}", "wall": duration_text(m["wall_s"]),
             "parameters": f"{m['params']:,}"} for p, m in r.get("medium", {}).items()]
    return markdown_table(rows) if rows else "No medium-cell run in this check."


def gpu_archs(snap: Path, _arg: str = "") -> str:
    """Every arch, impl, output layer and precision: train and eval tokens/s and peak memory."""
    rows = [{"arch": a["arch"], "impl": a["impl"], "output layer": a["output_layer"], "precision": a["precision"],
             "train tokens/s": f"{a['train_tokens_per_s']:,}", "eval tokens/s": f"{a['eval_tokens_per_s']:,}",
             "peak GPU MiB": f"{a['peak_mib']:,}"} for a in _report(snap).get("archs", [])]
    return markdown_table(rows) if rows else "No arch runs in this check."


def gpu_resume(snap: Path, _arg: str = "") -> str:
    """One line: the resumed run's valid PPL against the uninterrupted one's."""
    f = _report(snap).get("resume")
    if not f:
        return "The resume step did not run."
    same = ("bit for bit the same as" if f["bit_equal"] else
            f"within {f['epoch2_rel_diff']:.1e} (relative; tolerance {f['tolerance']:g}) of")
    return (f"Killed with SIGKILL at the start of epoch 2 and resumed from its checkpoint, the run's valid PPL after "
            f"epochs 1 and 2 ({', '.join(f'{v:.2f}' for v in f['resumed'])}) was {same} the uninterrupted run's.")


TABLES = {"gpu_steps": gpu_steps, "gpu_medium": gpu_medium, "gpu_archs": gpu_archs, "gpu_resume": gpu_resume}
