"""python -m lmgrid.bench cells: training speed (forward + backward) of the LSTM/GRU implementations (CPU by
default, --device cuda for a GPU).

The setting of the issue: a 2x200 LSTM, bptt 35, batch 20, V = 10000 (PTB-sized vocabulary, random tokens: the
speed does not depend on the data), with the state carried and detached between chunks as in truncated BPTT.
Prints tokens/s of nn.LSTM against the hand-written `cell` and `concat`, eager and torch.compile'd
(ModelConfig.compile), so the default of that flag can be chosen by measurement. Compilation time is excluded
(warm-up steps) and printed separately. Steps of the variants are interleaved and timed one by one; the median and
the fastest step are reported. On a shared machine the figures are still noisy: run it twice, and consider
--threads 1 (OpenMP threads stall each other when other processes hold the cores).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.neural.precision import full_fp32

VARIANTS = ["lstm/torch", "lstm/cell", "lstm/concat", "lstm/cell+compile", "lstm/concat+compile",
            "gru/torch", "gru/cell", "gru/cell+compile"]


class Variant:
    """One model under training: built and warmed up (compiled) once, then timed in interleaved rounds."""

    def __init__(self, name: str, args):
        self.name, self.args = name, args
        arch_impl, _, flag = name.partition("+")
        arch, impl = arch_impl.split("/")
        self.arch = arch
        torch.manual_seed(0)
        cfg = model_config_defaults(arch=arch, impl=impl, vocab_size=args.vocab, layers=args.layers, emb_dim=args.hidden,
                          hidden_dim=args.hidden, compile=(flag == "compile"))
        self.device = torch.device(args.device)
        self.model = build_model(cfg).train().to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        data = torch.randint(0, args.vocab, (args.batch, args.bptt + 1), generator=torch.Generator().manual_seed(1))
        data = data.to(self.device)
        self.x, self.y = data[:, :-1], data[:, 1:]
        self.state = None
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            self.step()
        self.sync()
        self.warmup_s = time.perf_counter() - t0
        self.step_s: list[float] = []

    def step(self):
        logits, state, _ = self.model(self.x, self.state)
        self.state = self.model.detach_state(state)  # carried across chunks, as in truncated BPTT
        loss = F.cross_entropy(logits.reshape(-1, self.args.vocab), self.y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.opt.step()

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def timed_step(self):
        self.sync()
        t0 = time.perf_counter()
        self.step()
        self.sync()
        self.step_s.append(time.perf_counter() - t0)

    def tokens_per_s(self, stat) -> float:
        return self.args.batch * self.args.bptt / stat(self.step_s)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench cells", description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=200, help="hidden and embedding size")
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--steps", type=int, default=20, help="timed training steps per variant (interleaved)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (includes compilation)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:n]")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with full_fp32():  # as training runs: cuDNN's RNNs in IEEE float32, not TF32, like the hand-written cells
        return _measure(args)


def _measure(args) -> int:
    print(f"# {args.layers}x{args.hidden} bptt={args.bptt} batch={args.batch} V={args.vocab}; torch {torch.__version__}"
          f", {torch.get_num_threads()} threads, "
          f"{torch.cuda.get_device_name(args.device) if args.device.startswith('cuda') else platform.machine()}; fwd+bwd+SGD step,"
          f" {args.steps} timed steps per variant, interleaved. Shared machine: figures are noisy.")
    variants = []
    for name in args.variants:
        variants.append(Variant(name, args))
        print(f"# built {name}: warm-up (incl. compilation) {variants[-1].warmup_s:.1f} s", flush=True)
    # Steps interleaved across the variants, each timed alone: load from other processes then hits every variant
    # alike; the median step is the typical speed and the fastest step the least disturbed one.
    for _ in range(args.steps):
        for v in variants:
            v.timed_step()
    print(f"{'variant':<22}{'median tokens/s':>17}{'best tokens/s':>15}{'median vs torch':>17}{'warmup_s':>10}")
    rows, base = [], {}
    for v in variants:
        median, best = v.tokens_per_s(statistics.median), v.tokens_per_s(min)
        if v.name.endswith("/torch"):
            base[v.arch] = median
        ratio = median / base[v.arch] if v.arch in base else float("nan")
        rows.append({"variant": v.name, "median_tokens_per_s": round(median), "best_tokens_per_s": round(best),
                     "median_vs_torch": round(ratio, 2), "warmup_s": round(v.warmup_s, 1)})
        print(f"{v.name:<22}{median:>17.0f}{best:>15.0f}{ratio:>17.2f}{v.warmup_s:>10.1f}")
    if args.json:
        from lmgrid.common.fileio import write_json
        write_json(args.json, {"settings": vars(args), "results": rows, "torch": torch.__version__})
    return 0
