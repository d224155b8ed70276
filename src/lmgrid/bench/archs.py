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
around the forward, as Lightning's; recurrences stay float32 (lmgrid.models.common.fp32_recurrence). Prints one
Markdown table.  `--clock cpu` times by this process's CPU time instead of the wall clock: on a machine other jobs
share, at one thread, it stands for what an idle machine's wall clock would show.
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


ZIPF_EXPONENT = 1.05


def zipf_law(vocab: int) -> torch.Tensor:
    p = torch.arange(1, vocab + 1, dtype=torch.float64) ** -ZIPF_EXPONENT
    return p / p.sum()


def batches(regime: str, rows: int, args, n: int):
    g, law = torch.Generator().manual_seed(0), zipf_law(args.vocab)

    def draw(*shape):
        return torch.multinomial(law, math.prod(shape), replacement=True, generator=g).view(*shape)

    if regime == "window":
        return [(draw(rows, 4), draw(rows)) for _ in range(n)]
    return [(draw(rows, args.bptt), draw(rows, args.bptt)) for _ in range(n)]


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
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--width", type=int, default=200)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: tokens per CPU-second of this process (all its threads), for a machine other jobs share")
    p.add_argument("--output-layers", nargs="+", default=["full", "adaptive"], choices=["full", "adaptive"])
    a = p.parse_args(argv)
    clock = time.perf_counter if a.clock == "wall" else time.process_time
    cutoffs = adaptive_cutoffs((zipf_law(a.vocab) * 1e9).round().tolist())
    torch.set_num_threads(a.threads)
    tuned = keep_freed_blocks()  # as `lmgrid train` does (lmgrid.neural.allocator)
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {a.threads}, torch {torch.__version__}, "
          f"V={a.vocab}, width {a.width}, {a.steps} timed steps after {a.warmup}, {a.clock} clock; "
          f"malloc tuned: {tuned}; load average {os.getloadavg()[0]:.1f}; adaptive cutoffs {cutoffs}\n")
    print("| model | output layer | params | train fp32 | train bf16 | eval fp32 | eval bf16 | bf16/fp32 (train) | "
          "x full: train fp32 | train bf16 | eval fp32 | eval bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in a.models:
        arch, impl, layers, regime = MODELS[name]
        ffnn = arch == "ffnn"
        full = None
        for output_layer in a.output_layers:
            cfg = model_config_defaults(arch=arch, impl=impl, vocab_size=a.vocab, layers=layers, n_step=5,
                              emb_dim=100 if ffnn else a.width, hidden_dim=a.width, heads=4,
                              context_len=a.bptt if arch == "transformer" else 0, output_layer=output_layer,
                              cutoffs=cutoffs if output_layer == "adaptive" else [])
            torch.manual_seed(0)
            model = build_model(cfg)
            params = sum(q.numel() for q in model.parameters())
            train_rows, eval_rows = (256, 512) if ffnn else (20, 10)
            n = a.warmup + a.steps
            figures = {}
            for bf16 in (False, True):
                figures["train", bf16] = tokens_per_s(model, batches(regime, train_rows, a, n), regime, bf16, True,
                                                      a.warmup, clock)
                # Evaluation steps carry fewer tokens (10 rows, or one 512 batch): time as many tokens as training.
                eval_n = a.warmup + max(a.steps * train_rows // eval_rows, 5)
                figures["eval", bf16] = tokens_per_s(model, batches(regime, eval_rows, a, eval_n), regime, bf16,
                                                     False, a.warmup, clock)
            order = [("train", False), ("train", True), ("eval", False), ("eval", True)]
            full = full or (figures if output_layer == "full" else None)
            gains = " | ".join(f"{figures[k] / full[k]:.2f}" if full and output_layer != "full" else ""
                               for k in order)
            print(f"| {name} | {output_layer} | {params / 1e6:.2f} M | "
                  + " | ".join(f"{figures[k]:,.0f}" for k in order)
                  + f" | {figures['train', True] / figures['train', False]:.2f} | {gains} |", flush=True)
    print(f"\nload average now {os.getloadavg()[0]:.1f}")
    return 0
