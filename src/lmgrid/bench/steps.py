"""python -m lmgrid.bench steps: training tokens per CPU-second of the models a workflow wrote specs for.

Each argument is a run spec the workflow wrote (results/<corpus>/specs/runs/<arch>/<impl>/<cell>.json), so the
model, its optimizer and its precision are the ones `lmgrid train` builds for that cell (lmgrid.neural.train.build:
the same ModelConfig from the spec and its vocabulary, the same LMModule and configure_optimizers, the precision
`auto` resolves to here).  Each timed step is what a training step does: batch_nll under that precision's autocast,
backward, the gradient-norm clip at the spec's `clip`, the optimizer step.  The batches are the spec's shape (stream:
stream_batch_size rows of bptt tokens, the state carried; window: batch_size windows) with ids drawn from the
vocabulary's own training counts, so the adaptive softmax's tails are hit as often as in the corpus.

Why a bench of its own: `bench archs` times every architecture at one shared size with SGD and untied weights, the
same for every model; a preset's recipes differ in width, tying, dropout and optimizer, and what a change to the
training step buys a preset shows only on those.  Run it at two commits to compare them (docs/benchmarks.md).
Figures depend on the machine and its load: print them, never assert them.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from lmgrid.common.gitinfo import commit
from lmgrid.common.errors import LmgridError


def _batches(spec, counts, n: int, seed: int = 0):
    """n batches of the spec's training shape, ids drawn from the vocabulary's training counts."""
    import torch

    from lmgrid.bench.archs import batches_of

    hp = spec.hparams
    law = torch.tensor(counts, dtype=torch.float64).clamp(min=0)
    if float(law.sum()) <= 0:
        raise LmgridError(f"{spec.vocab}: the vocabulary has no training counts to draw batch ids from")
    rows = hp["batch_size"] if spec.regime == "window" else hp["stream_batch_size"]
    return batches_of(spec.regime, rows, hp.get("bptt", 0), len(counts), n, n_context=max(spec.n_step, 2) - 1,
                      seed=seed, law=law / law.sum())


def tokens_per_cpu_s(spec_path: str, steps: int, warmup: int, root: Path) -> dict:
    """Train `warmup` then `steps` steps of the spec's model; its training tokens per CPU-second of this process."""
    import torch

    from lmgrid.data.vocab import Vocab
    from lmgrid.neural.evaluation import batch_nll
    from lmgrid.neural.module import LMModule
    from lmgrid.neural.precision import autocast, resolve_precision
    from lmgrid.run.spec import RunSpec

    spec = RunSpec.read(spec_path)
    vocab_path = Path(spec.vocab) if Path(spec.vocab).is_absolute() else root / spec.vocab
    if not vocab_path.is_file():
        raise LmgridError(f"{spec_path}: its vocabulary {vocab_path} is missing (pass --root, the folder the "
                          f"workflow ran in)")
    vocab = Vocab.load(str(vocab_path))
    hp = spec.hparams
    precision, _ = resolve_precision(hp["precision"], cuda=False)
    torch.manual_seed(spec.seed)
    module = LMModule(spec.model_config(vocab), spec.regime, optimizer=hp["optimizer"], lr=hp["lr"],
                      momentum=hp["momentum"], weight_decay=hp["weight_decay"], seed=spec.seed)
    model, opt = module.model.train(), module.configure_optimizers()
    params = [p for group in opt.param_groups for p in group["params"]]
    state, tokens, t0 = None, 0, 0.0
    for i, (x, y) in enumerate(_batches(spec, [vocab.counts.get(t, 0) for t in vocab.tokens], warmup + steps)):
        if i == warmup:
            t0, tokens = time.process_time(), 0
        with autocast(precision, "cpu"):
            nll, n, state = batch_nll(model, x, y, spec.regime, state if spec.regime == "stream" else None)
        if spec.regime == "stream":
            state = model.detach_state(state)
        opt.zero_grad()
        (nll / n).backward()
        if hp["clip"]:
            torch.nn.utils.clip_grad_norm_(params, hp["clip"])
        opt.step()
        tokens += int(n)
    fused = bool(opt.defaults.get("fused"))
    return {"spec": spec_path, "model": spec.key.name, "params": sum(p.numel() for p in params),
            "optimizer": f"{hp['optimizer']}{' (fused)' if fused else ''}", "precision": precision,
            "train_tokens_per_cpu_s": tokens / (time.process_time() - t0)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m lmgrid.bench steps", description=__doc__.splitlines()[0])
    p.add_argument("specs", nargs="+", help="run specs the workflow wrote (results/<corpus>/specs/runs/...json)")
    p.add_argument("--root", default=".", help="the folder the workflow ran in (the specs' paths are relative to it)")
    p.add_argument("--steps", type=int, default=40, help="timed training steps per model")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    import torch

    from lmgrid.neural.allocator import keep_freed_blocks

    keep_freed_blocks()  # as a training process does (lmgrid.neural.cli)
    torch.set_num_threads(a.threads)
    for path in a.specs:
        if not Path(path).is_file():
            raise SystemExit(f"python -m lmgrid.bench steps: {path}: no such run spec")
    print(f"lmgrid.bench steps at {commit(Path(__file__).parent)['commit']}: {a.steps} timed steps after {a.warmup}, {a.threads} thread(s), "
          f"torch {torch.__version__}")
    print("| model | params | optimizer | precision | train tokens per CPU-second |")
    print("|---|---|---|---|---|")
    for path in a.specs:
        try:
            r = tokens_per_cpu_s(path, a.steps, a.warmup, Path(a.root))
        except LmgridError as e:
            raise SystemExit(f"python -m lmgrid.bench steps: {e}") from None
        print(f"| {r['model']} | {r['params']:,} | {r['optimizer']} | {r['precision']} | "
              f"{r['train_tokens_per_cpu_s']:,.0f} |", flush=True)
    return 0
