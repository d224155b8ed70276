"""python -m lmgrid.bench ngram: the PTB n-gram job as whole processes, timed and measured.

The job is the pipeline's own two commands, each a fresh Python process (like `lmplz` then `query`):
  1. `lmgrid ngram-counts`  count orders 1..5 of PTB train (reads the text, writes counts.npz)
  2. `lmgrid ngram`         estimate modified KN 5-gram, write model.arpa (`--write-arpa`, default
                            auto: models up to 10 M n-grams), score valid and test
Per process: wall time, CPU time (user+sys) and peak resident memory (ru_maxrss from wait4).  The
vocabulary stage runs first and is reported apart (it is the pipeline's shared stage, not n-gram work).
Each repeat runs the whole job again; on a shared machine wall time varies, so every repeat is shown.

`--scale K [K ...]`: the same job on K x PTB train, built here: copy 0 is PTB train as is, copy c >= 1
has every word (`<unk>` too) suffixed with `_c`, so each copy brings its own words and n-grams (the
vocabulary grows K-fold; valid and test stay PTB's and are scored with copy 0's words).  The
vocabulary is written directly (PTB's words, then each copy's), not by the vocab stage, whose Python
lists would need ~5 GiB at 100 x.  KenLM's `lmplz -o N -S <budget>` + `query` runs beside ours on
the same files when both are on the PATH.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmgrid.run.record import RECORD_FILE, RunRecord

KENLM = ("lmplz", "query")
SHARED_PTB = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ptb"


def _run(args: list[str], stdin=None, stdout=None) -> dict:
    """Run `python -m lmgrid ARGS` (or a program, when ARGS starts with one) and measure that process alone."""
    cmd = args if shutil.which(args[0]) and args[0] in KENLM else [sys.executable, "-m", "lmgrid", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout or subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode(errors="replace") if stdout is None else ""
    if stdout is None:
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
    from lmgrid.data.corpus import load_split
    from lmgrid.ngram.counts import count_file
    from lmgrid.ngram.estimate import estimate
    from lmgrid.ngram.model import NgramModel
    from lmgrid.data.ppl import BOS, PAD
    from lmgrid.data.vocab import build

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


def _scaled(ptb: Path, k: int, folder: Path) -> tuple[Path, Path]:
    """K x PTB train (copy c >= 1 with every word suffixed _c) and its vocabulary, written into `folder`."""
    from lmgrid.data.corpus import load_split
    from lmgrid.common.fileio import write_json
    from lmgrid.data.ppl import UNK
    from lmgrid.data.vocab import SPECIALS, Vocab, build

    base = build(load_split(ptb / "ptb.train.txt"))
    words = base.tokens[len(SPECIALS):] + [UNK]
    tokens = list(base.tokens) + [f"{w}_{c}" for c in range(1, k) for w in words]
    counts = {**base.counts, **{f"{w}_{c}": base.counts.get(w, 0) for c in range(1, k) for w in words}}
    write_json(folder / "vocab.json", Vocab(tokens, counts).to_json())
    text = (ptb / "ptb.train.txt").read_text(encoding="utf-8")
    train = folder / "train.txt"
    with open(train, "w", encoding="utf-8") as fh:
        fh.write(text)
        word = re.compile(r"(\S+)")
        for c in range(1, k):
            fh.write(word.sub(rf"\1_{c}", text))
    return train, folder / "vocab.json"


def _job(t: Path, train, vocab, split: dict, a) -> tuple[dict, dict]:
    mem = [] if a.memory_mb is None else ["--memory-mb", str(a.memory_mb)]
    c = _run(["ngram-counts", "--train", str(train), "--vocab", str(vocab), "--max-order", str(a.order),
              "--out", f"{t}/counts.npz", *mem])
    e = _run(["ngram", "--counts", f"{t}/counts.npz", "--vocab", str(vocab), "--valid", split["valid"],
              "--test", split["test"], "--arch", a.arch, "--order", str(a.order), "--arpa", f"{t}/model.arpa",
              "--metrics", f"{t}/{RECORD_FILE}", "--write-arpa", a.write_arpa, *mem])
    return c, e


def _kenlm(t: Path, train: Path, split: dict, a) -> dict | None:
    """lmplz + query on the same files, when both are installed; None otherwise."""
    if not all(shutil.which(x) for x in KENLM):
        return None
    budget = f"{a.memory_mb or 512}M"
    with open(train, "rb") as src:
        # --arpa: the model to its own file (_run merges lmplz's progress lines, on stderr, into its stdout).
        # --skip_symbols: lmplz refuses PTB's <unk> in its input; this reads it as a blank (about 5% fewer tokens for
        # KenLM than for us: a timing column, not a model comparison, which is tests/test_ngram_kenlm.py's)
        build = _run(["lmplz", "-o", str(a.order), "-S", budget, "-T", f"{t}/", "--discount_fallback",
                      "--skip_symbols", "--arpa", str(t / "kenlm.arpa")], src)
    rss, wall = build["rss_mib"], build["wall_s"]
    for s in ("valid", "test"):
        with open(split[s], "rb") as src, open(t / f"kenlm.{s}.out", "wb") as dst:
            q = _run(["query", str(t / "kenlm.arpa")], src, dst)
        rss, wall = max(rss, q["rss_mib"]), wall + q["wall_s"]
    (t / "kenlm.arpa").unlink()
    return {"wall_s": wall, "rss_mib": rss}


def scale_table(ptb: Path, split: dict, a) -> int:
    print(f"machine: {_machine()}; load average at start {os.getloadavg()[0]:.2f} (shared machines vary)")
    print(f"{a.arch} {a.order}-gram, count + estimate + score valid and test (+ ARPA when written); "
          f"memory budget {a.memory_mb or 'default'} MiB")
    print("| scale | train tokens | n-grams | ARPA | count wall s / RSS MiB | estimate+score wall s / RSS MiB "
          "| job wall s | peak RSS MiB | test PPL | KenLM wall s | KenLM peak MiB | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in a.scale:
        with tempfile.TemporaryDirectory(prefix=f"bench-ngram-x{k}-", dir=a.tmp_dir) as tmp:
            t = Path(tmp)
            train, vocab = _scaled(ptb, k, t)
            load = os.getloadavg()[0]
            for _ in range(a.repeat or 1):
                c, e = _job(t, train, vocab, split, a)
                m = RunRecord.read(t / RECORD_FILE)
                ken = _kenlm(t, train, split, a)
                ken_wall, ken_rss = (f"{ken['wall_s']:.1f}", f"{ken['rss_mib']:.0f}") if ken else ("n/a", "n/a")
                print(f"| {k} x | {_train_tokens(t / 'counts.npz')} | {m.params:,} | "
                      f"{'written' if m.get('arpa_written') else 'off'} | {c['wall_s']:.1f} / {c['rss_mib']:.0f} | "
                      f"{e['wall_s']:.1f} / {e['rss_mib']:.0f} | {c['wall_s'] + e['wall_s']:.1f} | "
                      f"{max(c['rss_mib'], e['rss_mib']):.0f} | {m.test.ppl:.2f} | "
                      f"{ken_wall} | {ken_rss} | {load:.2f} |", flush=True)
    return 0


def _train_tokens(counts: Path) -> str:
    """Train tokens by the shared convention: words and one </s> per sentence (<s> not counted)."""
    import numpy as np

    from lmgrid.data.ppl import BOS
    from lmgrid.data.vocab import SPECIALS

    with np.load(counts) as z:
        c = z["count1"]
    return f"{int(c.sum() - c[SPECIALS.index(BOS)]):,}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench ngram", description=__doc__.splitlines()[0])
    p.add_argument("--ptb-dir", default=os.environ.get("LMGRID_PTB_DIR", str(SHARED_PTB)),
                   help="folder with ptb.{train,valid,test}.txt (default: $LMGRID_PTB_DIR, else ../shared/data/ptb "
                        "beside the repository, as .ci/run)")
    p.add_argument("--order", type=int, default=5)
    p.add_argument("--arch", default="mkn", choices=["addk", "katz", "kn", "mkn"])
    p.add_argument("--repeat", type=int, default=None, help="repeats (default 3; 1 per scale with --scale)")
    p.add_argument("--scale", type=int, nargs="+", metavar="K",
                   help="instead: the job on K x PTB train for each K (e.g. 1 4 10 100), one table row each")
    p.add_argument("--memory-mb", type=float, default=None, help="ngram.memory_mb (default: the schema's)")
    p.add_argument("--write-arpa", default="auto", choices=["auto", "true", "false"])
    p.add_argument("--tmp-dir", default=None, help="where the scaled corpora and tables go (default: $TMPDIR)")
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
    if a.scale:
        return scale_table(ptb, split, a)
    print(f"machine: {_machine()}; load average at start {os.getloadavg()[0]:.2f} (shared machines vary)")
    with tempfile.TemporaryDirectory(prefix="bench-ngram-", dir=a.tmp_dir) as tmp:
        t = Path(tmp)
        vocab = _run(["vocab", "--train", split["train"], "--valid", split["valid"], "--test", split["test"],
                      "--out", f"{t}/vocab.json", "--report", f"{t}/vocab_report.json"])
        print(f"vocab stage (shared, not in the job): wall {vocab['wall_s']:.2f} s, "
              f"peak RSS {vocab['rss_mib']:.0f} MiB")
        print(f"{'repeat':>6} | {'count wall':>10} {'cpu':>6} {'RSS MiB':>8} | {'estimate+arpa+score wall':>24} "
              f"{'cpu':>6} {'RSS MiB':>8} | {'job wall s':>10} {'peak MiB':>8}")
        jobs = []
        for r in range(a.repeat or 3):
            c, e = _job(t, split["train"], f"{t}/vocab.json", split, a)
            job = {"wall_s": c["wall_s"] + e["wall_s"], "rss_mib": max(c["rss_mib"], e["rss_mib"])}
            jobs.append(job)
            print(f"{r + 1:>6} | {c['wall_s']:>10.2f} {c['cpu_s']:>6.2f} {c['rss_mib']:>8.0f} | {e['wall_s']:>24.2f} "
                  f"{e['cpu_s']:>6.2f} {e['rss_mib']:>8.0f} | {job['wall_s']:>10.2f} {job['rss_mib']:>8.0f}")
        m = RunRecord.read(t / RECORD_FILE)
        arpa_mib = (t / "model.arpa").stat().st_size / 2**20
    walls = sorted(j["wall_s"] for j in jobs)
    print(f"in-process phases of the last `ngram` run (s): {m.get('timing')}")
    print(f"{a.arch} order {a.order}: {m.params} n-grams, ARPA {arpa_mib:.0f} MiB, "
          f"valid PPL {m.valid.ppl:.2f}, test PPL {m.test.ppl:.2f}")
    print(f"whole job (count + estimate + ARPA + score valid/test): best {walls[0]:.2f} s, "
          f"median {walls[len(walls) // 2]:.2f} s wall; peak RSS {max(j['rss_mib'] for j in jobs):.0f} MiB "
          f"(target: < 6 s, < 1024 MiB)")
    return 0
