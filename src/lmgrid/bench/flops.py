"""python -m lmgrid.bench flops: FLOPs per training and per evaluation token of every architecture and output layer
of `python -m lmgrid.bench archs` (its sizes and its Zipf targets), counted analytically (lmgrid.models.flops), and
with --check cross-checked against torch.utils.flop_counter.FlopCounterMode on a real forward and backward pass.
No timing.

FlopCounterMode counts matrix products only (mm, addmm, bmm, the attention kernels, convolutions), as the analytic
count does.  Two kernels hide their products from it, so `counted_flops` switches them off for the count: oneDNN's
fused LSTM (torch.backends.mkldnn off: nn.LSTM then runs as addmm per step; nn.GRU and nn.RNN already do) and the
CPU's fused attention kernel (the math kernel instead, which computes all L x L scores: compared with
dense_attention=True).  The forward counts agree to the FLOP; training agrees with TRAIN_FACTOR x forward to within
2/bptt of the hidden-to-hidden products (the first step's state gradient, which nothing needs: models/flops.py).
"""
from __future__ import annotations

import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from lmgrid.bench.archs import MODELS, add_size_args, batches_of, bench_cutoffs, bench_fractions, model_config
from lmgrid.models import build_model
from lmgrid.models.flops import GATES, TRAIN_FACTOR, cluster_fractions, flops_per_token
from lmgrid.neural.module import batch_nll


def counted_flops(model, x, y, regime: str, state=None, train: bool = True) -> tuple[int, int, object]:
    """(forward FLOPs, backward FLOPs (0 unless train), the new state) of one batch_nll step, as FlopCounterMode
    counts them, with the fused LSTM and attention kernels swapped for ones it sees (see the module's docstring)."""
    model.train(train)
    with torch.backends.mkldnn.flags(enabled=False), sdpa_kernel(SDPBackend.MATH):
        with torch.set_grad_enabled(train), FlopCounterMode(display=False) as counter:
            nll, _, state = batch_nll(model, x, y, regime, state)
        forward = counter.get_total_flops()
        backward = 0
        if train:
            with FlopCounterMode(display=False) as counter:
                nll.backward()
            backward = counter.get_total_flops()
    return forward, backward, state


def training_tolerance(cfg, rows: int) -> float:
    """How far FlopCounterMode's backward may fall below (TRAIN_FACTOR - 1) x its forward, in FLOPs, for one batch
    of `rows` rows (or windows): per layer and row the first step's dL/dh_0 product (gates x hidden x hidden x 2),
    which the backward skips (the window regime starts every target's steps from a zero state)."""
    if cfg.arch not in GATES:
        return 0.0
    return float(rows * cfg.layers * 2 * GATES[cfg.arch] * cfg.hidden_dim ** 2)


def check_row(cfg, regime: str, bptt: int, rows: int, seed: int = 0) -> dict:
    """Analytic against FlopCounterMode for one model on one random batch (the second chunk of a stream, so that a
    Transformer reads a full context): per-token forward FLOPs each way and the training totals."""
    torch.manual_seed(seed)
    model = build_model(cfg)
    regime = "window" if cfg.arch == "ffnn" else regime
    (x0, y0), (x, y) = batches_of(regime, rows, bptt, cfg.vocab_size, 2, n_context=cfg.n_step - 1, seed=seed)
    state = None
    if regime == "stream":
        _, _, state = counted_flops(model, x0, y0, regime, None, train=False)
        state = model.detach_state(state)
    fractions = None
    if cfg.output_layer == "adaptive":  # this batch's own shares of targets per tail cluster
        fractions = cluster_fractions(torch.bincount(y.reshape(-1), minlength=cfg.vocab_size).tolist(), cfg.cutoffs)
    analytic = flops_per_token(cfg, regime, bptt, fractions, dense_attention=True)
    forward, backward, _ = counted_flops(model, x, y, regime, state, train=True)
    tokens = y.numel()
    return {"tokens": tokens, "analytic_forward": analytic.forward * tokens, "counted_forward": forward,
            "analytic_train": analytic.train * tokens, "counted_train": forward + backward,
            "train_tolerance": training_tolerance(cfg, rows)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench flops", description=__doc__.splitlines()[0])
    add_size_args(p)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--output-layers", nargs="+", default=["full", "adaptive"], choices=["full", "adaptive"])
    p.add_argument("--check", action="store_true", help="also count each model's products with FlopCounterMode "
                                                        "(one batch of --check-rows x bptt, forward and backward)")
    p.add_argument("--check-rows", type=int, default=2)
    a = p.parse_args(argv)
    cutoffs = bench_cutoffs(a.vocab)
    print(f"V={a.vocab}, width {a.width}, bptt {a.bptt}; adaptive cutoffs {cutoffs}, tail fractions "
          f"{[round(f, 4) for f in bench_fractions(a.vocab, cutoffs)]} (the bench's Zipf law); a multiply-add is 2 "
          f"FLOPs, matrix products only; training = {TRAIN_FACTOR} x forward\n")
    head = "| model | output layer | MFLOP/token eval | MFLOP/token train | parts (forward, MFLOP/token) |"
    print(head + (" FlopCounterMode forward / analytic | train / analytic |" if a.check else ""))
    print("|---" * (5 + 2 * a.check) + "|")
    for name in a.models:
        for output_layer in a.output_layers:
            cfg = model_config(name, output_layer, a, cutoffs)
            regime = MODELS[name][3]
            count = flops_per_token(cfg, regime, a.bptt, bench_fractions(a.vocab, cutoffs)
                                    if output_layer == "adaptive" else None)
            parts = ", ".join(f"{k} {v / 1e6:.3f}" for k, v in count.parts.items())
            row = f"| {name} | {output_layer} | {count.eval / 1e6:.3f} | {count.train / 1e6:.3f} | {parts} |"
            if a.check:
                c = check_row(cfg, regime, a.bptt, a.check_rows)
                row += (f" {c['counted_forward'] / c['analytic_forward']:.4f} | "
                        f"{c['counted_train'] / c['analytic_train']:.4f} |")
            print(row, flush=True)
    return 0
