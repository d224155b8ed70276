"""python -m lmgrid.bench archs: training and evaluation tokens/s of every architecture, fp32 and bf16-mixed, with
the full and the adaptive softmax (`output_layer`).

At the sizes of presets/seed_table.yaml (V = 10,000 as PTB's, width 200; LSTM, GRU and Transformer 2 layers; RNN 1
layer; FFNN n_step 5 with a 100-wide embedding), random tokens drawn from a Zipf law of exponent 1.05 over the ids
(its top 2,000 of 10,000 cover 86.7% of the tokens, PTB's 86.9%): the full softmax's speed does not depend on the
data, but the adaptive one's does, through how many targets fall in each tail cluster.  The adaptive layer's
cutoffs are lmgrid.models.adaptive's rule applied to that law (2100 and 6900 at V = 10,000; PTB's are 2000 and
6200). Stream
models: batch 20 x bptt 35 with the state carried (training), and the evaluation's 10 rows x 35 (its default
`stream_eval_batch_size`); FFNN: windows, batch 256 (training) and 512 (evaluation, presets/seed_table.yaml). A
training step is what `lmgrid train` runs per batch (lmgrid.neural.module.batch_nll, backward, gradient-norm clip,
SGD); evaluation is forward only, as lmgrid.neural.module.evaluate (for the adaptive softmax both use its own exact
loss, no [N, V] matrix). bf16-mixed is torch.autocast(cpu, bfloat16)
around the forward, as Lightning's; recurrences stay float32 (lmgrid.models.common.fp32_recurrence).  On a CPU
without native bf16 (no avx512_bf16 or amx_bf16 in its flags, or in $LMGRID_CPU_FLAGS: lmgrid.neural.precision)
bf16 is emulated, many times slower than fp32 and never what `precision: auto` picks there: it is skipped with a
one-line note (`--emulated-bf16` times it anyway).  `--clock cpu` times by this process's CPU time instead of the
wall clock: on a machine other jobs share, at one thread, it stands for what an idle machine's wall clock would show.

Prints two Markdown tables: tokens/s, and per architecture, output layer, precision and phase the FLOPs per token
(lmgrid.models.flops: analytic, matrix products only, training = 3 x forward), the achieved GFLOP/s and the fraction
of the peak (lmgrid.bench.peak: one core's, from the ISA flags and the clock; times the threads with the wall clock,
one core with `--clock cpu`, whose figures are per CPU-second).  Under bf16-mixed the fraction holds the float32
recurrence to the fp32 peak and the rest to the bf16 one (lmgrid.bench.peak.fraction_of_peak).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import time

import torch

from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.models.adaptive import adaptive_cutoffs
from lmgrid.models.clusters import ZIPF_EXPONENT
from lmgrid.models.flops import TRAIN_FACTOR, cluster_fractions, flops_per_token
from lmgrid.bench.peak import DEFAULT_FMA_UNITS, FMA_UNITS_ENV, core_peak, fraction_of_peak
from lmgrid.common.errors import LmgridError
from lmgrid.neural.precision import NATIVE_CPU_BF16_FLAGS, native_cpu_bf16
from lmgrid.neural.allocator import keep_freed_blocks
from lmgrid.neural.module import batch_nll

# name -> (arch, impl, layers, regime)
MODELS = {
    "FFNN": ("ffnn", "torch", 1, "window"),
    "RNN": ("rnn", "torch", 1, "stream"),
    "LSTM (nn.LSTM)": ("lstm", "torch", 2, "stream"),
    "LSTM (cell)": ("lstm", "cell", 2, "stream"),
    "LSTM (concat)": ("lstm", "concat", 2, "stream"),
    "GRU (nn.GRU)": ("gru", "torch", 2, "stream"),
    "GRU (cell)": ("gru", "cell", 2, "stream"),
    "Transformer": ("transformer", "torch", 2, "stream"),
}




def zipf_law(vocab: int) -> torch.Tensor:
    p = torch.arange(1, vocab + 1, dtype=torch.float64) ** -ZIPF_EXPONENT
    return p / p.sum()


def batches_of(regime: str, rows: int, bptt: int, vocab: int, n: int, n_context: int = 4, seed: int = 0,
               law: torch.Tensor | None = None):
    """n batches of ids drawn from `law` (default: the Zipf law over `vocab`): windows ([rows, n_context], [rows])
    or stream chunks ([rows, bptt] twice)."""
    g = torch.Generator().manual_seed(seed)
    law = zipf_law(vocab) if law is None else law

    def draw(*shape):
        return torch.multinomial(law, math.prod(shape), replacement=True, generator=g).view(*shape)

    if regime == "window":
        return [(draw(rows, n_context), draw(rows)) for _ in range(n)]
    return [(draw(rows, bptt), draw(rows, bptt)) for _ in range(n)]


def batches(regime: str, rows: int, args, n: int):
    return batches_of(regime, rows, args.bptt, args.vocab, n)


def bench_cutoffs(vocab: int) -> list[int]:
    """The adaptive layer's cutoffs: lmgrid.models.adaptive's rule applied to the Zipf law."""
    return adaptive_cutoffs((zipf_law(vocab) * 1e9).round().tolist())


def bench_fractions(vocab: int, cutoffs: list[int]) -> list[float]:
    """The share of the bench's targets in each tail cluster: the Zipf law's mass there (its draws' expectation)."""
    return cluster_fractions(zipf_law(vocab).tolist(), cutoffs)


def model_config(name: str, output_layer: str, a, cutoffs: list[int]):
    """The ModelConfig of MODELS[name] at the bench's sizes (a: add_size_args's vocab, width, bptt)."""
    arch, impl, layers, _ = MODELS[name]
    return model_config_defaults(arch=arch, impl=impl, vocab_size=a.vocab, layers=layers, n_step=5,
                                 emb_dim=100 if arch == "ffnn" else a.width, hidden_dim=a.width, heads=4,
                                 context_len=a.bptt if arch == "transformer" else 0, output_layer=output_layer,
                                 cutoffs=cutoffs if output_layer == "adaptive" else [])


def add_size_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--width", type=int, default=200)
    p.add_argument("--bptt", type=int, default=35)


def tokens_per_s(model, data, regime: str, bf16: bool, train: bool, warmup: int, clock=time.perf_counter) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train(train)
    state, tokens, t0 = None, 0, None
    for i, (x, y) in enumerate(data):
        if i == warmup:
            t0, tokens = clock(), 0
        with torch.set_grad_enabled(train), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            nll, n, state = batch_nll(model, x, y, regime, state if regime == "stream" else None)
        if regime == "stream":
            state = model.detach_state(state)
        if train:
            opt.zero_grad()
            (nll / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            opt.step()
        tokens += int(n)
    return tokens / (clock() - t0)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench archs", description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30, help="timed training steps per model and precision")
    p.add_argument("--warmup", type=int, default=5)
    add_size_args(p)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: tokens per CPU-second of this process (all its threads), for a machine other jobs share")
    p.add_argument("--output-layers", nargs="+", default=["full", "adaptive"], choices=["full", "adaptive"])
    p.add_argument("--fma-units", type=int, default=None,
                   help=f"FMA units per core for the peak (default ${FMA_UNITS_ENV} or {DEFAULT_FMA_UNITS})")
    p.add_argument("--emulated-bf16", action="store_true",
                   help="time bf16 even on a CPU that emulates it (no avx512_bf16/amx_bf16): slow, and not what runs")
    a = p.parse_args(argv)
    clock = time.perf_counter if a.clock == "wall" else time.process_time
    cutoffs = bench_cutoffs(a.vocab)
    peak = core_peak(units=a.fma_units)
    precisions = (False, True) if native_cpu_bf16() or a.emulated_bf16 else (False,)
    cores = 1 if a.clock == "cpu" else a.threads
    torch.set_num_threads(a.threads)
    tuned = keep_freed_blocks()  # as `lmgrid train` does (lmgrid.neural.allocator)
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {a.threads}, torch {torch.__version__}, "
          f"V={a.vocab}, width {a.width}, {a.steps} timed steps after {a.warmup}, {a.clock} clock; "
          f"malloc tuned: {tuned}; load average {os.getloadavg()[0]:.1f}; adaptive cutoffs {cutoffs}")
    print(peak.describe())
    if True not in precisions:
        print(f"bf16 skipped: this CPU has no {' or '.join(NATIVE_CPU_BF16_FLAGS)} (bf16 is emulated there, slower "
              "than fp32; --emulated-bf16 times it anyway)")
    print("\n| model | output layer | params | train fp32 | train bf16 | eval fp32 | eval bf16 | bf16/fp32 (train) | "
          "x full: train fp32 | train bf16 | eval fp32 | eval bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    order = [("train", False), ("train", True), ("eval", False), ("eval", True)]
    rates = []
    for name in a.models:
        regime = MODELS[name][3]
        full = None
        for output_layer in a.output_layers:
            cfg = model_config(name, output_layer, a, cutoffs)
            torch.manual_seed(0)
            model = build_model(cfg)
            params = sum(q.numel() for q in model.parameters())
            train_rows, eval_rows = (256, 512) if regime == "window" else (20, 10)
            n = a.warmup + a.steps
            figures = {}
            for bf16 in precisions:
                figures["train", bf16] = tokens_per_s(model, batches(regime, train_rows, a, n), regime, bf16, True,
                                                      a.warmup, clock)
                # Evaluation steps carry fewer tokens (10 rows, or one 512 batch): time as many tokens as training.
                eval_n = a.warmup + max(a.steps * train_rows // eval_rows, 5)
                figures["eval", bf16] = tokens_per_s(model, batches(regime, eval_rows, a, eval_n), regime, bf16,
                                                     False, a.warmup, clock)
            full = full or (figures if output_layer == "full" else None)

            def cell(k, value):
                return value(k) if k in figures else "skipped"

            gains = " | ".join(cell(k, lambda k: f"{figures[k] / full[k]:.2f}") if full and output_layer != "full"
                               else "" for k in order)
            ratio = cell(("train", True), lambda k: f"{figures[k] / figures['train', False]:.2f}")
            print(f"| {name} | {output_layer} | {params / 1e6:.2f} M | "
                  + " | ".join(cell(k, lambda k: f"{figures[k]:,.0f}") for k in order)
                  + f" | {ratio} | {gains} |", flush=True)
            count = flops_per_token(cfg, regime, a.bptt,
                                    bench_fractions(a.vocab, cutoffs) if output_layer == "adaptive" else None)
            rates += [(name, output_layer, k, figures[k], count) for k in order if k in figures]
    print_peak_table(rates, peak, cores)
    print(f"\nload average now {os.getloadavg()[0]:.1f}")
    return 0


def print_peak_table(rates, peak, cores: int) -> None:
    """FLOPs per token, GFLOP/s and fraction of `cores` cores' peak for each (model, output layer, phase, tokens/s)."""
    print(f"\n| model | output layer | precision | phase | tokens/s | MFLOP/token | GFLOP/s | % of peak ({cores} "
          f"core{'s' * (cores > 1)}) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, output_layer, (phase, bf16), tps, count in rates:
        factor = TRAIN_FACTOR if phase == "train" else 1
        by_dtype = {k: v * factor for k, v in count.by_precision(bf16).items()}
        flops = sum(by_dtype.values())
        try:
            share = f"{100 * fraction_of_peak(by_dtype, tps / cores, peak):.1f}"
        except LmgridError:  # timed emulated bf16 (--emulated-bf16): no native peak to hold it to
            share = "n/a"
        print(f"| {name} | {output_layer} | {'bf16-mixed' if bf16 else 'fp32'} | {phase} | {tps:,.0f} | "
              f"{flops / 1e6:.4g} | {flops * tps / 1e9:.1f} | {share} |")
