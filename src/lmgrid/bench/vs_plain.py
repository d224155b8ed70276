"""python -m lmgrid.bench vs-plain: `lmgrid train` against a plain PyTorch script, as whole processes.

The job: LSTM 2x200, embedding 200, bptt 35, batch 20, SGD lr 20, clip 0.25, no dropout; one epoch over the first
`--lines` lines of PTB train, then valid and test scored. Both run as fresh processes on `--threads` threads, in
alternating pairs (plain first in odd pairs, lmgrid first in even ones) so that drifting machine load hits both
alike. Figures per process: whole-process wall (start-up, data, training, evaluation, writing), the training
tokens/s each reports, and peak RSS (the child's ru_maxrss from wait4). The plain script is
lmgrid/bench/plain_lstm.py. Printed, never asserted; the targets are those of docs/benchmarks.md.

`lmgrid train` runs in its own process (as on a cluster node, where no warm server answers) on the corpus and vocabulary the
`corpus` and `vocab` stages write, prepared once beforehand and not timed. Its run writes what a grid cell writes:
checkpoints, the model and metrics, but no gate statistics (train.gate_stats false: nothing reads them here, and the
plain script has none).  Each row also prints its valid PPL. Both sides train the same model (same shapes, full
softmax, no tying, no dropout, lmgrid's initialisation) with the same recipe (as many SGD steps, give or take one, at a
constant lr 20, each clipped to 0.25 over every parameter, state carried); what differs by design:
  * the batch layout: lmgrid's 20 rows hold whole sentences, start from a zero state and end in tail padding (the
    tail chunks' few targets weigh as in a full chunk: lmgrid.neural.module); the plain rows are contiguous cuts
    of the text, whose last, narrower chunk is averaged on its own, as pytorch/examples does;
  * the draws: pair k seeds both sides with k, but the two programs draw their weights from it in another order
    (the same distributions, not the same numbers);
  * the vocabulary: lmgrid's holds <s> and <pad> too (10,002 entries against 10,000), never targets;
  * bf16: lmgrid runs the recurrence in float32 (lmgrid.models.common.fp32_recurrence), the plain nn.LSTM in bf16;
  * scoring: lmgrid scores every target of valid and test (the shared convention); the plain script's contiguous
    rows skip each row's first token and the tokens past the last whole column.
One epoch at lr 20 ends early in training, where the seed alone moves valid PPL by several percent, more than one
seed pair can tell apart from the differences above (at a0360bf, one AMD EPYC seed pair differed by about a sixth on
2026-11-28, where an Intel Xeon's had agreed within 0.5% under the AVX2 emulation). So the pairs are seeds: the
summary prints each row's valid PPL mean and sd over them, and lmgrid's mean minus the plain script's at the same
precision with its 95% Welch t interval (gap_text), "separated" only when the interval excludes 0. The speed rows do
not depend on the seed (the same shapes and as many steps). Over 4 seeds lmgrid's fp32 figure is the lower,
separated; the plain script trained on lmgrid's rows (`plain_lstm --layout sentences --tail full-chunk`) is not
separated from it, so the gap is the first difference above, the batch layout (docs/benchmarks.md has the round).
Until lmgrid weighed a tail chunk's targets as a full chunk's, the last step (6 targets at 5,000 lines) took a
whole clipped step and lmgrid's valid PPL was 960.5 against the plain 754.8 (fp32).

`--clock cpu` compares CPU time instead of wall: user + system seconds of each process and of the processes it
waited for (wait4's rusage), so on a machine other jobs share, at one thread, the figure stands for what an idle
machine's wall clock would show (as `lmgrid.bench archs --clock cpu`).  `--warm` adds rows where `lmgrid train`
is a job of a warm server (lmgrid.orchestration.warm), as a local workflow runs it: the imports of torch and
Lightning are paid once by the server, not by the job; its time is the thin client's plus the forked child's
(wall: the client's; CPU: the client's rusage plus the child's own `cpu_s` in metrics.json).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmgrid.data.corpus import SPLITS
from lmgrid.neural.precision import native_cpu_bf16
from lmgrid.orchestration.warm import SOCKET_ENV
from lmgrid.run.record import RECORD_FILE, RunRecord



def at_least_one(text: str) -> int:
    """argparse type of a count that the medians need at least one of (--pairs, --rounds, --cores)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be at least 1")
    return n


def exit_if_failed(bench: str, cmd: list[str], returncode: int, output: str) -> None:
    """Stop the benchmark on a child that failed: its figures would be a failed run's."""
    if returncode != 0:
        raise SystemExit(f"{bench}: {' '.join(cmd[:4])} ... failed (exit {returncode}):\n{output[-2000:]}")


def timed(cmd: list[str], cwd: Path, bench: str = "vs-plain", env: dict | None = None,
          cpu: list | None = None) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, stdout) of one child process run to its end; its CPU seconds (user + system, its own
    and its waited-for children's) appended to `cpu` when given."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    exit_if_failed(bench, cmd, os.waitstatus_to_exitcode(status), out)
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return wall, usage.ru_maxrss / 1024, out


def prepare(ptb_dir: Path, work: Path, lines: int) -> dict[str, Path]:
    """The corpus and vocab stages' outputs for PTB, train cut to its first `lines` lines (vocab from all of it)."""
    lmgrid = str(Path(sys.executable).with_name("lmgrid"))
    corpus = work / "corpus"
    inputs = [a for s in SPLITS for a in ("--input", f"{s}={ptb_dir / f'ptb.{s}.txt'}")]
    subprocess.run([lmgrid, "corpus", "--kind", "ptb", *inputs, "--out-dir", str(corpus), "--max-len", "0"],
                   check=True, capture_output=True)
    subprocess.run([lmgrid, "vocab", *[a for s in SPLITS for a in (f"--{s}", str(corpus / f"{s}.txt"))],
                    "--out", str(work / "vocab.json"), "--report", str(work / "vocab_report.json"),
                    "--min-count", "1", "--max-size", "0"], check=True, capture_output=True)
    head = work / "train_head.txt"
    with open(corpus / "train.txt") as src, open(head, "w") as dst:
        for i, line in enumerate(src):
            if lines and i >= lines:
                break
            dst.write(line)
    return {"train": head, "valid": corpus / "valid.txt", "test": corpus / "test.txt", "vocab": work / "vocab.json"}


def lmgrid_cmd(files: dict[str, Path], run: Path, threads: int, precision: str, seed: int = 1) -> list[str]:
    # No gate statistics: nothing here reads them, and the plain script has none (the workflow's gated runs keep
    # them: train.gate_stats).
    hp = {"epochs": 1, "optimizer": "sgd", "lr": 20.0, "clip": 0.25, "dropout": 0.0, "emb_dim": 200,
          "hidden_dim": 200, "bptt": 35, "stream_batch_size": 20, "precision": precision, "log_every": 0,
          "gate_stats": False}
    return [str(Path(sys.executable).with_name("lmgrid")), "train", "--arch", "lstm", "--n-step", "0",
            "--layers", "2", "--regime", "stream", *[a for k in ("train", "valid", "test", "vocab")
                                                      for a in (f"--{k}", str(files[k]))],
            "--run-dir", str(run / "run"), "--ckpt-dir", str(run / "ckpt"), "--hparams", json.dumps(hp),
            "--threads", str(threads), "--seed", str(seed)]


def plain_cmd(ptb_dir: Path, lines: int, threads: int, bf16: bool, seed: int = 0) -> list[str]:
    return [sys.executable, "-m", "lmgrid.bench.plain_lstm", *[a for s in SPLITS for a in
                                                                (f"--{s}", str(ptb_dir / f"ptb.{s}.txt"))],
            "--lines", str(lines), "--threads", str(threads), "--seed", str(seed), *(["--bf16"] if bf16 else [])]


def gap_text(values: list[float], base: list[float]) -> str:
    """mean(values) - mean(base) over each side's seeds with its 95% Welch t interval (lmgrid.analysis.effects.welch:
    the two programs need not spread alike), and whether the interval excludes 0."""
    from lmgrid.analysis.effects import welch  # pandas and scipy: only for the summary

    gap, low, high = welch(base, values)[:3]
    if math.isnan(low):
        return f"{gap:+.1f} (no interval: fewer than two seeds a side)"
    verdict = "separated" if low > 0 or high < 0 else "not separated"
    return f"{gap:+.1f} [{low:+.1f}, {high:+.1f}] (95% Welch t over {len(values)} and {len(base)} seeds): {verdict}"


def parse_job_args(p: argparse.ArgumentParser, argv: list[str], precision_help: str) -> argparse.Namespace:
    """The job's own options (where PTB is, how much of train, which precisions), shared with bench cores."""
    p.add_argument("--ptb-dir", default=os.environ.get("LMGRID_PTB_DIR", "/work/shared/data/ptb"))
    p.add_argument("--lines", type=int, default=10000, help="first N lines of PTB train")
    p.add_argument("--precision", nargs="+", default=["32-true", "bf16-mixed"], choices=["32-true", "bf16-mixed"],
                   help=f"lmgrid's precisions to run; {precision_help}")
    a = p.parse_args(argv)
    if not (Path(a.ptb_dir) / "ptb.train.txt").is_file():
        p.error(f"{a.ptb_dir}/ptb.train.txt not found (set LMGRID_PTB_DIR or --ptb-dir)")
    return a


WARM_IDLE_S = 7 * 24 * 3600.0  # the bench ends the server itself


def warm_server(work: Path) -> tuple[subprocess.Popen, dict]:
    """A `lmgrid warm-server` for the bench's lifetime, and the environment whose `lmgrid train` runs as its job."""
    sock = str(work / "warm.sock")
    # No idle exit: a pair's other rows take longer than the server's default idle time, and a job that finds no
    # server runs in its own process, silently (the row would time the own-process job twice over).
    server = subprocess.Popen([sys.executable, "-m", "lmgrid", "warm-server", "--socket", sock, "--parent-pid",
                               str(os.getpid()), "--idle-s", str(WARM_IDLE_S)], stdout=subprocess.DEVNULL)
    while not os.path.exists(sock):
        if server.poll() is not None:
            raise SystemExit(f"vs-plain: the warm server exited ({server.returncode}) before it listened")
        time.sleep(0.2)
    return server, {**os.environ, SOCKET_ENV: sock}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench vs-plain", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=at_least_one, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="compare whole-process wall time (default) or CPU time (user + system; a shared machine)")
    p.add_argument("--warm", action="store_true", help="also run lmgrid train as a warm server's job")
    a = parse_job_args(p, argv, "each is compared with the plain script's fp32 (and bf16) run")
    ptb = Path(a.ptb_dir).resolve()  # the children run in the work folder
    import torch

    print(f"LSTM 2x200, first {a.lines} lines of PTB train, 1 epoch + valid + test; {a.pairs} alternating pairs; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, {a.threads} threads, torch {torch.__version__}, "
          f"{a.clock} clock, load average {os.getloadavg()[0]:.1f}")
    work = Path(tempfile.mkdtemp(prefix="lmgrid-vs-plain-"))
    server, warm_env = None, None
    try:
        files = prepare(ptb, work, a.lines)
        if a.warm:
            server, warm_env = warm_server(work)
        rows, ppls = {}, {}
        plain_bf16 = "bf16-mixed" in a.precision and bool(native_cpu_bf16())
        if "bf16-mixed" in a.precision and not plain_bf16:
            print("no plain bf16 row: this CPU has no native bf16, and the plain script's nn.LSTM needs it")
        variants = [("plain fp32", False, None, None)] + [("plain bf16", True, None, None)] * plain_bf16 + [
            (f"lmgrid {prec}", None, prec, None) for prec in a.precision] + [
            (f"lmgrid {prec} warm", None, prec, warm_env) for prec in a.precision if a.warm]
        for pair in range(a.pairs):
            order = variants if pair % 2 == 0 else variants[::-1]
            seed = pair + 1
            for name, bf16, prec, env in order:
                cpu = []
                if prec is None:
                    wall, rss, out = timed(plain_cmd(ptb, a.lines, a.threads, bf16, seed), work, cpu=cpu)
                    figures = json.loads(out.strip().splitlines()[-1])
                    tps, valid_ppl = figures["train_tokens_per_s"], figures["valid_ppl"]
                else:
                    run = work / f"lmgrid-{pair}-{prec}"
                    wall, rss, _ = timed(lmgrid_cmd(files, run, a.threads, prec, seed), work, env=env, cpu=cpu)
                    record = RunRecord.read(run / "run" / RECORD_FILE)
                    tps, valid_ppl = record.get("train_tokens_per_s"), record.valid.ppl
                    if env is not None:  # the forked child's own figures: the client only waited for it
                        if server.poll() is not None:
                            raise SystemExit(f"vs-plain: the warm server exited ({server.returncode}); "
                                             f"{name} ran in its own process")
                        cpu[0] += record.get("cpu_s")
                        rss = record.get("max_rss_mib")
                    shutil.rmtree(run)
                time_s = wall if a.clock == "wall" else cpu[0]
                rows.setdefault(name, []).append((time_s, tps, rss))
                ppls.setdefault(name, []).append(valid_ppl)
                print(f"pair {pair + 1} (seed {seed}): {name:23s} wall {wall:6.1f} s, CPU {cpu[0]:6.1f} s, train "
                      f"{tps:7.0f} tokens/s, peak RSS {rss:5.0f} MiB, valid PPL {valid_ppl:6.1f}", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
    med = {name: [statistics.median(col) for col in zip(*vals)] for name, vals in rows.items()}
    base = med["plain fp32"]
    bf16_base = med.get("plain bf16")
    print(f"\nmedians ({a.clock})        {a.clock} s   train tokens/s   peak RSS MiB   {a.clock} / plain fp32   "
          f"{a.clock} / plain same precision   tokens/s / plain fp32")
    for name, (time_s, tps, rss) in med.items():
        same = bf16_base if ("bf16" in name and bf16_base) else base
        print(f"{name:27s} {time_s:7.1f}   {tps:14.0f}   {rss:12.0f}   {time_s / base[0]:16.2f}   "
              f"{time_s / same[0]:29.2f}   {tps / base[1]:20.2f}")
    print(f"\nvalid PPL over the pairs' seeds 1-{a.pairs}: mean, sd; lmgrid's mean minus the plain script's at the "
          f"same precision")
    for name, values in ppls.items():
        sd = statistics.stdev(values) if len(values) > 1 else math.nan
        line = f"  {name:25s} {statistics.fmean(values):7.1f} {sd:6.1f}"
        if name.startswith("lmgrid"):
            base_name = "plain bf16" if ("bf16" in name and "plain bf16" in ppls) else "plain fp32"
            line += f"   vs {base_name}: {gap_text(values, ppls[base_name])}"
        print(line)
    print(f"load average now {os.getloadavg()[0]:.1f}")
    return 0
