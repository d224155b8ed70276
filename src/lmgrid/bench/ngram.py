"""python -m lmgrid.bench ngram: the PTB n-gram job as whole processes, timed and measured.

The job is the pipeline's own two commands, each a fresh Python process (like `lmplz` then `query`):
  1. `lmgrid ngram-counts`  count orders 1..5 of PTB train (reads the text, writes counts.npz)
  2. `lmgrid ngram`         estimate modified KN 5-gram, write model.arpa, score valid and test
Per process: wall time, CPU time (user+sys) and peak resident memory (ru_maxrss from wait4).  The
vocabulary stage runs first and is reported apart (it is the pipeline's shared stage, not n-gram work).
Each repeat runs the whole job again; on a shared machine wall time varies, so every repeat is shown.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


SHARED_PTB = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ptb"


def _run(args: list[str]) -> dict:
    """Run `python -m lmgrid ARGS` and measure that process alone."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "lmgrid", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode(errors="replace")
    proc.stdout.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"lmgrid {' '.join(args)} failed:\n{out}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {cores} cores available, {mem:.0f} GiB RAM, Python {platform.python_version()}"


def ppl_table(ptb: Path) -> int:
    from ..corpus import load_split
    from ..ngram.counts import count_file
    from ..ngram.estimate import estimate
    from ..ngram.model import NgramModel
    from ..ppl import BOS, PAD
    from ..vocab import build

    train = load_split(ptb / "ptb.train.txt")
    vocab = build(train)
    counts = count_file(ptb / "ptb.train.txt", vocab, 5)
    evals = {s: load_split(ptb / f"ptb.{s}.txt") for s in ("valid", "test")}
    print("| method | order | valid PPL | test PPL | n-grams |")
    print("|---|---|---|---|---|")
    for method in ("mkn", "kn", "katz", "addk"):
        for order in range(1, 6):
            bo = estimate(counts, method, order, vocab.index[BOS], vocab.index[PAD])
            model = NgramModel(bo, vocab)
            r = {s: model.evaluate(sents) for s, sents in evals.items()}
            print(f"| {method} | {order} | {r['valid']['ppl']:.2f} | {r['test']['ppl']:.2f} | {bo.entries()} |")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench ngram", description=__doc__.splitlines()[0])
    p.add_argument("--ptb-dir", default=os.environ.get("LMGRID_PTB_DIR", str(SHARED_PTB)),
                   help="folder with ptb.{train,valid,test}.txt (default: $LMGRID_PTB_DIR, else ../shared/data/ptb "
                        "beside the repository, as .ci/run)")
    p.add_argument("--order", type=int, default=5)
    p.add_argument("--arch", default="mkn", choices=["addk", "katz", "kn", "mkn"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--ppl-table", action="store_true",
                   help="instead: valid/test PPL of every method at orders 1-5 (the table in docs/benchmarks.md)")
    a = p.parse_args(argv)
    if not a.ptb_dir or not all((Path(a.ptb_dir) / f"ptb.{s}.txt").is_file() for s in ("train", "valid", "test")):
        print("bench ngram: needs the Penn Treebank: --ptb-dir or LMGRID_PTB_DIR (ptb.{train,valid,test}.txt)",
              file=sys.stderr)
        return 2
    ptb = Path(a.ptb_dir)
    if a.ppl_table:
        return ppl_table(ptb)
    split = {s: str(ptb / f"ptb.{s}.txt") for s in ("train", "valid", "test")}
    print(f"machine: {_machine()}; load average at start {os.getloadavg()[0]:.2f} (shared machines vary)")
    with tempfile.TemporaryDirectory(prefix="bench-ngram-") as tmp:
        t = Path(tmp)
        vocab = _run(["vocab", "--train", split["train"], "--valid", split["valid"], "--test", split["test"],
                      "--out", f"{t}/vocab.json", "--report", f"{t}/vocab_report.json"])
        print(f"vocab stage (shared, not in the job): wall {vocab['wall_s']:.2f} s, "
              f"peak RSS {vocab['rss_mib']:.0f} MiB")
        print(f"{'repeat':>6} | {'count wall':>10} {'cpu':>6} {'RSS MiB':>8} | {'estimate+arpa+score wall':>24} "
              f"{'cpu':>6} {'RSS MiB':>8} | {'job wall s':>10} {'peak MiB':>8}")
        jobs = []
        for r in range(a.repeat):
            c = _run(["ngram-counts", "--train", split["train"], "--vocab", f"{t}/vocab.json",
                      "--max-order", str(a.order), "--out", f"{t}/counts.npz"])
            e = _run(["ngram", "--counts", f"{t}/counts.npz", "--vocab", f"{t}/vocab.json", "--valid", split["valid"],
                      "--test", split["test"], "--arch", a.arch, "--order", str(a.order),
                      "--arpa", f"{t}/model.arpa", "--metrics", f"{t}/metrics.json"])
            job = {"wall_s": c["wall_s"] + e["wall_s"], "rss_mib": max(c["rss_mib"], e["rss_mib"])}
            jobs.append(job)
            print(f"{r + 1:>6} | {c['wall_s']:>10.2f} {c['cpu_s']:>6.2f} {c['rss_mib']:>8.0f} | {e['wall_s']:>24.2f} "
                  f"{e['cpu_s']:>6.2f} {e['rss_mib']:>8.0f} | {job['wall_s']:>10.2f} {job['rss_mib']:>8.0f}")
        m = json.loads((t / "metrics.json").read_text())
        arpa_mib = (t / "model.arpa").stat().st_size / 2**20
    walls = sorted(j["wall_s"] for j in jobs)
    print(f"in-process phases of the last `ngram` run (s): {m['timing']}")
    print(f"{a.arch} order {a.order}: {m['params']} n-grams, ARPA {arpa_mib:.0f} MiB, "
          f"valid PPL {m['valid']['ppl']:.2f}, test PPL {m['test']['ppl']:.2f}")
    print(f"whole job (count + estimate + ARPA + score valid/test): best {walls[0]:.2f} s, "
          f"median {walls[len(walls) // 2]:.2f} s wall; peak RSS {max(j['rss_mib'] for j in jobs):.0f} MiB "
          f"(target: < 6 s, < 1024 MiB)")
    return 0
