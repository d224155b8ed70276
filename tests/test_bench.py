"""Cheap smoke runs of the benchmarks that print the figures of docs/benchmarks.md (tiny sizes: they check that
each benchmark runs and reports every row, never a speed)."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from lmgrid.bench import archs

SENTENCES = ["the cat sat on the mat", "a dog sat on a log", "the dog saw the cat"]


def tiny_ptb(folder, repeat: int) -> None:
    """ptb.{train,valid,test}.txt in `folder`, each SENTENCES `repeat` times: PTB's file names, a 7-word corpus."""
    for split in ("train", "valid", "test"):
        (folder / f"ptb.{split}.txt").write_text("".join(f" {s} \n" for s in SENTENCES * repeat))


def test_archs_bench_reports_every_architecture(capsys):
    """`python -m lmgrid.bench archs` prints a row per architecture and output layer, each with finite positive
    tokens/s (no speed is asserted: that is the benchmark's to print), and a row per timed precision and phase in
    its FLOPs table.  bf16 is `skipped` exactly where the CPU has no native bf16.  Kills: an architecture or the
    adaptive layer left out of the table, or a column that is 0 or nan (a timer never started)."""
    from lmgrid.neural.precision import native_cpu_bf16

    assert archs.main(["--vocab", "50", "--width", "8", "--steps", "1", "--warmup", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    speed_table, flops_table = out.split("\n\n")[1:3]
    rows = [line for line in speed_table.splitlines() if line.startswith("| ") and "---" not in line]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows[1:]]
    assert [(c[0], c[1]) for c in cells] == [(m, o) for m in archs.MODELS for o in ("full", "adaptive")]
    bf16 = bool(native_cpu_bf16())
    for row in cells:
        figures = row[3:7] + (row[8:12] if row[1] == "adaptive" else [])
        assert (figures.count("skipped") == 0) if bf16 else (figures.count("skipped") == len(figures) // 2), row
        speeds = [float(c.replace(",", "")) for c in figures if c != "skipped"]
        assert all(s > 0 and math.isfinite(s) for s in speeds), row
    flops_rows = [line for line in flops_table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(flops_rows) == len(cells) * (4 if bf16 else 2)
    for row in flops_rows:
        c = [x.strip() for x in row.strip("|").split("|")]
        assert float(c[5]) > 0 and float(c[6]) >= 0 and (c[7] == "n/a" or float(c[7]) >= 0), row


def test_plain_script_trains_and_scores(tmp_path):
    tiny_ptb(tmp_path, 60)
    r = subprocess.run([sys.executable, "-m", "lmgrid.bench.plain_lstm", "--lines", "0", "--width", "8",
                        "--layers", "1", "--batch", "4", "--bptt", "5", "--lr", "20", "--threads", "1",
                        *[a for s in ("train", "valid", "test") for a in (f"--{s}", str(tmp_path / f"ptb.{s}.txt"))]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # 7 words + </s> + <unk>: an untrained model is near PPL 9; one epoch on this repetitive text must beat it
    assert out["train_tokens"] > 0 and 1 < out["test_ppl"] < 9, out
    assert re.fullmatch(r"\d+(\.\d+)?", str(out["train_tokens_per_s"]))


def plain_run(tmp_path, capsys, *args: str) -> dict:
    """The plain script's figures on a tiny corpus (200 tokens: 4 rows of 50, whose 49 input columns make 7 chunks of
    bptt 7, or 8 of bptt 6 and a short one of 1), run in this process."""
    import torch

    from lmgrid.bench import plain_lstm

    tiny_ptb(tmp_path, 10)
    threads = torch.get_num_threads()
    assert plain_lstm.main(["--lines", "0", "--width", "8", "--layers", "1", "--batch", "4", "--threads", "1", *args,
                            *[a for s in ("train", "valid", "test")
                              for a in (f"--{s}", str(tmp_path / f"ptb.{s}.txt"))]]) == 0
    torch.set_num_threads(threads)
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_plain_script_seed_sets_its_weights(tmp_path, capsys, monkeypatch):
    """`plain_lstm --seed K` trains from K's draws: the same seed repeats the figures to the bit, another seed moves
    them (vs-plain's pairs are seeds of both sides).  Kills: the seed parsed and not used (torch seeded with a
    constant, as before --seed: run here, where seeds 1 and 2 then give one figure)."""
    import torch

    def valid_ppl(seed: int) -> float:
        return plain_run(tmp_path, capsys, "--bptt", "5", "--seed", str(seed))["valid_ppl"]

    assert valid_ppl(1) == valid_ppl(1)
    assert valid_ppl(1) != valid_ppl(2)
    real_seed = torch.manual_seed
    monkeypatch.setattr(torch, "manual_seed", lambda seed: real_seed(0))  # the mutation: the seed ignored
    assert valid_ppl(1) == valid_ppl(2)


def test_plain_script_tail_weighs_only_a_short_last_chunk(tmp_path, capsys):
    """`--tail full-chunk` weighs a short last chunk's targets as in a full chunk: with a short last chunk (bptt 6:
    one column, weighed 1/6) training ends elsewhere than with its own mean, a whole clipped step; where every chunk
    is full (bptt 7) the two are one computation.  Kills: the option not reaching the loss (the bptt-6 figures would
    be equal), and a weight that changes full chunks too (the bptt-7 figures would differ)."""
    def valid_ppl(bptt: str, tail: str) -> float:
        return plain_run(tmp_path, capsys, "--bptt", bptt, "--tail", tail)["valid_ppl"]

    assert valid_ppl("6", "full-chunk") != pytest.approx(valid_ppl("6", "own-mean"), rel=0.01)
    assert valid_ppl("7", "full-chunk") == pytest.approx(valid_ppl("7", "own-mean"), rel=1e-6)


def test_plain_script_sentence_layout_is_lmgrids_rows(tmp_path, capsys):
    """`--layout sentences` trains on lmgrid's stream rows: each row starts at a sentence (its first input </s>) and
    the rows' counted targets are every token of the text in order, </s> included (no token dropped at the rows'
    cuts, as the contiguous layout drops the text's tail); the run trains on all of them.  Kills: the option falling
    back to the contiguous cut (the counts differ: 196 targets there against 200)."""
    from lmgrid.bench import plain_lstm

    lines = [line.split() + ["</s>"] for line in SENTENCES] * 10
    words = sorted({w for line in lines for w in line} | {"<unk>"})
    index = {w: i for i, w in enumerate(words)}
    x, y = plain_lstm.sentence_rows(lines, index, 4)
    assert x.shape[0] == 4 and (x[:, 0] == index["</s>"]).all()
    assert y[y != plain_lstm.IGNORE].tolist() == [index[w] for line in lines for w in line]
    assert plain_run(tmp_path, capsys, "--bptt", "5", "--layout", "sentences")["train_tokens"] == 200
    assert plain_run(tmp_path, capsys, "--bptt", "5")["train_tokens"] == 196  # the control: the contiguous cut


def test_seed_gap_is_welchs_interval_and_says_separated_only_when_it_excludes_zero():
    """vs-plain's verdict on the two sides' valid PPL: lmgrid's mean minus the plain script's with the 95% Welch t
    interval (lmgrid.analysis.effects.welch, which gap_text calls), checked against the hand formula (unequal
    variances, Welch-Satterthwaite degrees of freedom).  Kills: the pooled-variance interval (it differs here, seen
    below), a verdict from the gap of the means alone (two overlapping samples whose means differ are "not
    separated"), and an interval from one seed a side."""
    from scipy import stats

    from lmgrid.analysis.effects import welch
    from lmgrid.bench import vs_plain

    values, base = [10.0, 12.0, 14.0], [20.0, 21.0]
    va, vb = 4.0 / 3, 0.5 / 2  # each sample variance over its n
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    gap, low, high = welch(base, values)[:3]
    assert gap == pytest.approx(-8.5) and (low, high) == pytest.approx((-8.5 - half, -8.5 + half), rel=1e-9)
    pooled = stats.ttest_ind(values, base, equal_var=True).confidence_interval(0.95)
    assert abs(pooled.low - low) > 0.1, "the control: the pooled interval differs, so the check above tells them apart"
    assert vs_plain.gap_text(values, base).endswith(": separated")

    overlapping = [680.0, 760.0, 700.0], [790.0, 690.0, 765.0]
    assert welch(*overlapping[::-1])[0] < 0  # a gap of the means, which alone would read as a verdict
    assert vs_plain.gap_text(*overlapping).endswith(": not separated")
    assert math.isnan(welch(base, [680.0])[1]) and "no interval" in vs_plain.gap_text([680.0], base)


def test_cores_bench_times_both_ways(tmp_path, capsys):
    """Both ways run their two jobs to the end and each gets a median; a job that fails stops the bench with its
    command named (the mutation it kills: a failed child's wall taken as a finished job's)."""
    from lmgrid.bench import cores

    tiny_ptb(tmp_path, 20)
    assert cores.main(["--ptb-dir", str(tmp_path), "--lines", "0", "--rounds", "1", "--cores", "1",
                       "--precision", "32-true"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"32-true +sequential +two jobs in +\d+\.\d s", out), out
    assert re.search(r"32-true +concurrent +two jobs in +\d+\.\d s", out), out
    assert re.search(r"^32-true +\d+\.\d s +\d+\.\d s +\d+\.\d\d$", out, re.M), out
    try:
        cores.concurrent([[sys.executable, "-c", "pass"], [sys.executable, "-c", "raise SystemExit(3)"]], tmp_path)
    except SystemExit as e:
        assert "failed (exit 3)" in str(e)
    else:
        raise AssertionError("a failed job went unnoticed")


def test_counts_below_one_are_one_line_errors(tmp_path, capsys):
    """--rounds / --pairs / --cores 0 stop at parsing with the option named, before any job runs. Mutation killed:
    at_least_one without its bound (a count of 0 got through and the medians failed on an empty list after
    the jobs had run)."""
    from lmgrid.bench import cores, vs_plain

    (tmp_path / "ptb.train.txt").write_text(" a b \n")
    for main, option in ((cores.main, "--rounds"), (cores.main, "--cores"), (vs_plain.main, "--pairs")):
        with pytest.raises(SystemExit) as stop:
            main(["--ptb-dir", str(tmp_path), option, "0"])
        assert stop.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"argument {option}: 0: must be at least 1")
    assert vs_plain.at_least_one("1") == 1


def test_vs_plain_cpu_clock_counts_the_whole_process_tree(tmp_path):
    """`timed(..., cpu=...)` records the CPU seconds of the child and of the processes it waited for: a child that
    only sleeps while its own child burns CPU is charged that CPU (lmgrid train's warm-less process tree, the
    plain script alike).  Kills: the CPU taken from the bench's own clock or the child's own user time alone
    (a 0-ish figure here)."""
    from lmgrid.bench import vs_plain

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    child = f"import subprocess, sys, time; time.sleep(0.2); subprocess.run([sys.executable, '-c', {burn!r}])"
    cpu = []
    wall, _, _ = vs_plain.timed([sys.executable, "-c", child], tmp_path, cpu=cpu)
    assert len(cpu) == 1 and cpu[0] >= 0.6, (cpu, wall)


@pytest.mark.full  # starts a warm server
def test_vs_plain_cpu_clock_and_warm_rows(tmp_path, capsys):
    """`vs-plain --clock cpu --warm` runs every row (plain, lmgrid's own process, lmgrid as a warm server's job)
    and its table of medians holds each row's CPU seconds, not its wall; pair k seeds every row with k, so the
    pairs' valid PPL differ, lmgrid's two ways of running agree at each seed, and the summary gives each lmgrid row
    an interval over the seeds.  Kills: the table filled from the wall clock under --clock cpu, the warm row left
    out, and one seed for every pair (the pairs' figures then repeat)."""
    from lmgrid.bench import vs_plain

    tiny_ptb(tmp_path, 20)
    assert vs_plain.main(["--ptb-dir", str(tmp_path), "--lines", "0", "--pairs", "2", "--threads", "1",
                          "--clock", "cpu", "--warm", "--precision", "32-true"]) == 0
    out = capsys.readouterr().out
    lines = re.findall(r"^pair (\d) \(seed (\d)\): (.+?) +wall +[\d.]+ s, CPU +([\d.]+) s.*valid PPL +([\d.]+)$", out,
                       re.M)
    assert all(pair == seed for pair, seed, *_ in lines), out
    cpu = {name: sorted(float(c) for p, _, n, c, _ in lines if n == name) for _, _, name, _, _ in lines}
    assert set(cpu) == {"plain fp32", "lmgrid 32-true", "lmgrid 32-true warm"}, out
    table = dict(re.findall(r"^(plain fp32|lmgrid 32-true warm|lmgrid 32-true) +([\d.]+) ", out, re.M))
    assert {n: float(v) for n, v in table.items()} == pytest.approx({n: sum(c) / 2 for n, c in cpu.items()},
                                                                     abs=0.06), out
    ppl = {(name, pair): v for pair, _, name, _, v in lines}
    for name in cpu:
        assert ppl[name, "1"] != ppl[name, "2"], out
    assert all(ppl["lmgrid 32-true", k] == ppl["lmgrid 32-true warm", k] for k in "12"), out
    interval = r"^  lmgrid 32-true.*vs plain fp32: [+-][\d.]+ \[.*\] \(95% Welch t over 2 and 2 seeds\)"
    assert len(re.findall(interval, out, re.M)) == 2, out


def test_steps_bench_times_the_optimizer_train_builds(tmp_path, capsys, monkeypatch):
    """`python -m lmgrid.bench steps SPEC..` prints one row per run spec, with the optimizer lmgrid train builds for
    it (fused Adam on the CPU, SGD as it is) and finite positive tokens per CPU-second (no speed is asserted).  Kills:
    the optimizer column read from the spec instead of the module (run here: with the fused kernel turned off the
    Adam row must say so), and a missing spec passing silently (it exits naming the file)."""
    from lmgrid.bench import steps
    from lmgrid.neural import module as module_mod
    from lmgrid.run.spec import hand_spec

    from test_neural_support import tiny_corpus

    c = tiny_corpus(tmp_path)
    specs = []
    for arch, regime, optimizer in (("rnn", "stream", "adam"), ("ffnn", "window", "sgd")):
        spec = hand_spec(arch=arch, n_step=3, regime=regime, paths=c["paths"], vocab_path=c["vocab_path"],
                         run_dir=str(tmp_path / arch), ckpt_dir=str(tmp_path / "ckpt" / arch),
                         hp={"optimizer": optimizer, "emb_dim": 8, "hidden_dim": 8, "stream_batch_size": 4,
                             "bptt": 5, "batch_size": 8, "tie_weights": arch == "rnn", "output_layer": "adaptive"})
        spec.write(tmp_path / f"{arch}.json")
        specs.append(str(tmp_path / f"{arch}.json"))

    def rows() -> dict[str, list[str]]:
        assert steps.main([*specs, "--steps", "2", "--warmup", "1"]) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
        cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
        for c in cells:
            assert math.isfinite(float(c[4].replace(",", ""))) and float(c[4].replace(",", "")) > 0
        return {c[0].split()[0]: c for c in cells}

    got = rows()
    assert got["rnn"][2] == "adam (fused)" and got["ffnn"][2] == "sgd"
    monkeypatch.setattr(module_mod, "fused_adam_applies", lambda params: False)  # the mutation
    assert rows()["rnn"][2] == "adam"
    with pytest.raises(SystemExit, match="nowhere.json: no such run spec"):
        steps.main([str(tmp_path / "nowhere.json")])
