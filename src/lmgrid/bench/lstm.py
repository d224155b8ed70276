"""python -m lmgrid.bench lstm: training tokens/s of the Lightning path against a plain PyTorch loop.

Both train the same model (lstm/torch, 2 layers x 200, no dropout) on the same batches (PTB train as one stream,
20 parallel rows, bptt 35, stateful truncated BPTT) with the same optimizer, gradient clipping and loss
(lmgrid.neural.module.batch_nll), for a fixed number of steps. The Lightning path is the module, callbacks and
Trainer settings `lmgrid train` uses; the plain loop is what one would write by hand (as in pytorch/examples'
word_language_model). Steps after the warm-up are timed; rounds alternate the two so that load from other
processes on the machine hits both alike. Figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from lmgrid.data.corpus import load_split
from lmgrid.models import build_model
from lmgrid.neural.callbacks import Progress
from lmgrid.neural.data import StreamChunks, batchify, loader, stream_tokens
from lmgrid.neural.module import LMModule, batch_nll
from lmgrid.neural.train import FILL_UNINITIALIZED_MEMORY
from lmgrid.data.ppl import EOS, PAD
from lmgrid.data.vocab import build


class StepTimer(pl.Callback):
    """Wall time of training steps warmup+1 .. end, measured at batch boundaries like the plain loop's."""

    def __init__(self, warmup: int):
        self.warmup, self.t0, self.t1, self.tokens = warmup, None, None, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx + 1 == self.warmup:
            self.t0 = time.perf_counter()
        elif batch_idx + 1 > self.warmup:
            self.tokens += int(batch[1].numel())
            self.t1 = time.perf_counter()


def model_config(vocab_size: int, args) -> dict:
    return {"arch": "lstm", "vocab_size": vocab_size, "impl": "torch", "layers": args.layers,
            "emb_dim": args.hidden, "hidden_dim": args.hidden, "dropout": 0.0, "n_step": 2}


def run_lightning(chunks, vocab_size: int, args) -> float:
    torch.manual_seed(0)
    module = LMModule(model_config(vocab_size, args), "stream", optimizer="sgd", lr=args.lr)
    timer = StepTimer(args.warmup)
    trainer = pl.Trainer(max_steps=args.warmup + args.steps, limit_val_batches=0, accelerator="cpu", devices=1,
                         precision=args.precision, deterministic=args.deterministic, gradient_clip_val=args.clip,
                         gradient_clip_algorithm="norm", callbacks=[timer, Progress(0)], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, use_distributed_sampler=False)
    trainer.fit(module, train_dataloaders=loader(chunks))
    return timer.tokens / (timer.t1 - timer.t0)


def run_plain(chunks, vocab_size: int, args) -> float:
    from lmgrid.run.spec import model_config_defaults

    torch.manual_seed(0)
    model = build_model(model_config_defaults(**model_config(vocab_size, args)))
    model.train()
    torch.use_deterministic_algorithms(args.deterministic)  # the same kernels as the Lightning path
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    state, tokens, t0 = None, 0, None
    for step in range(args.warmup + args.steps):
        x, y = chunks[step % len(chunks)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed"):
            nll, n, state = batch_nll(model, x, y, "stream", state)
        state = model.detach_state(state)
        loss = nll / n
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        float(loss.detach())  # reading the loss each step, as any training loop that logs it does
        if step + 1 == args.warmup:
            t0 = time.perf_counter()
        elif step + 1 > args.warmup:
            tokens += int(y.numel())
    return tokens / (time.perf_counter() - t0)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench lstm", description=__doc__.splitlines()[0])
    p.add_argument("--ptb-dir", default=os.environ.get("LMGRID_PTB_DIR", "/work/shared/data/ptb"))
    p.add_argument("--steps", type=int, default=100, help="timed steps per path and round")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=200)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="32-true",
                   help="bf16-mixed: Lightning's, and torch.autocast(cpu, bfloat16) around the plain loop's forward")
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True,
                   help="Lightning path with deterministic algorithms, as `lmgrid train` defaults to")
    args = p.parse_args(argv)
    train_path = Path(args.ptb_dir) / "ptb.train.txt"
    if not train_path.is_file():
        print(f"lstm bench: {train_path} not found (set LMGRID_PTB_DIR or --ptb-dir)")
        return 2
    torch.set_num_threads(args.threads)
    torch.utils.deterministic.fill_uninitialized_memory = FILL_UNINITIALIZED_MEMORY  # as `lmgrid train` sets it
    sents = load_split(train_path)
    vocab = build(sents)
    stream = stream_tokens([vocab.encode(s) for s in sents], vocab.index[EOS])
    chunks = StreamChunks(*batchify(stream, args.batch, vocab.index[PAD]), args.bptt)
    print(f"lstm/torch {args.layers}x{args.hidden}, V={len(vocab)}, batch {args.batch}, bptt {args.bptt}, "
          f"{args.precision}, {args.steps} timed steps after {args.warmup} warm-up, {args.rounds} rounds; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.1f}, torch {torch.__version__}, lightning {pl.__version__}")
    plain, light = [], []
    for r in range(args.rounds):
        # Alternate which path goes first, so a drift in machine load does not favour one.
        for path in ((run_plain, run_lightning) if r % 2 == 0 else (run_lightning, run_plain)):
            (plain if path is run_plain else light).append(path(chunks, len(vocab), args))
        print(f"round {r + 1}: plain loop {plain[-1]:.0f} tokens/s, Lightning {light[-1]:.0f} tokens/s, "
              f"ratio {light[-1] / plain[-1]:.3f}", flush=True)
    mp, ml = statistics.median(plain), statistics.median(light)
    print(f"median: plain loop {mp:.0f} tokens/s, Lightning {ml:.0f} tokens/s, ratio {ml / mp:.3f} "
          f"(target >= 0.9); load average now {os.getloadavg()[0]:.1f}")
    return 0
