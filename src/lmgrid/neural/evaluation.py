"""A model's NLL over batches, without Lightning: the evaluation passes that run from a saved model (lmgrid.testtime:
reset scores, per-token scores, test-time modes) import this, not lmgrid.neural.module, whose Lightning import costs
about 3 CPU-seconds a job (docs/benchmarks.md, "Per-job overhead").  lmgrid.neural.module trains with the same
functions."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lmgrid.neural.data import IGNORE


def batch_nll(model, x: torch.Tensor, y: torch.Tensor, regime: str, state=None, gate_stats=None,
              token_nll: list | None = None):
    """(sum of NLL in nats over the counted targets, their count, the model's new state).

    window: x [B, n_step-1], y [B]; the target is predicted at the last position of its window (state None:
    every window starts from zero). stream: x, y [B, T]; every non-IGNORE position is a target.
    gate_stats (gates.GateStats): the same forward also returns the gates, which are added to it.
    token_nll (a list): the same forward's NLL of each position is appended to it, as (nll [like y], y), 0 at
    IGNORE positions; computed beside the sum, which stays the very number it is without the list.
    """
    # In a window only the last position is a target: the output layer (the costliest part of a small model
    # with a large vocabulary) runs on that position alone.
    last_only, return_gates = regime == "window", gate_stats is not None
    if model.cfg.output_layer == "adaptive":
        # The adaptive softmax's own loss: the exact NLL of its distribution (the same as cross_entropy over its
        # log-probabilities), without computing the tail clusters no target falls in.
        hidden, new_state, gates = model.features(x, state, return_gates=return_gates, last_only=last_only)
        nll = model.head.nll(hidden[:, -1] if last_only else hidden, y, ignore_index=IGNORE)
        if token_nll is not None:
            token_nll.append((model.head.token_nll(hidden[:, -1] if last_only else hidden, y, IGNORE), y))
    else:
        logits, new_state, gates = model(x, state, last_only=last_only, return_gates=return_gates)
        if last_only:
            logits = logits[:, -1]
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                              ignore_index=IGNORE, reduction="sum")
        if token_nll is not None:
            per = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                                  ignore_index=IGNORE, reduction="none")
            token_nll.append((per.view(y.shape), y))
    if gate_stats is not None:
        gate_stats.add(x, y, gates, from_zero_state=regime == "window" or state is None)
    return nll, (y != IGNORE).sum(), new_state


@torch.no_grad()
def evaluate(model, batches, regime: str, device, gate_stats=None, token_nll: list | None = None) -> tuple[float, int]:
    """Total NLL (nats) and counted tokens over a split's batches, in order, state carried in stream mode.
    The sums stay on the device until the end: no host synchronisation per batch.  With gate_stats
    (gates.GateStats) the same pass also gathers the gate statistics; with token_nll (a list) each batch's
    per-position NLL (batch_nll; `corpus_order` puts them in corpus order)."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    state = None
    for x, y in batches:
        nll, n, state = batch_nll(model, x.to(device), y.to(device), regime, state if regime == "stream" else None,
                                  gate_stats, token_nll)
        total += nll
        count += n
    model.train(was_training)
    return float(total), int(count)


def corpus_order(token_nll: list, regime: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(NLL [N] float32, target ids [N] int64) in corpus order from evaluate's token_nll over a whole split: window
    batches follow each other; stream chunks are columns of sentence-aligned rows, which hold consecutive
    sentences, so row 0 is read first, then row 1, ...; padded targets (IGNORE) are dropped."""
    if not token_nll:
        return torch.zeros(0), torch.zeros(0, dtype=torch.long)
    dim = 0 if regime == "window" else 1
    nll = torch.cat([n.detach().float().cpu() for n, _ in token_nll], dim).reshape(-1)
    y = torch.cat([t.cpu() for _, t in token_nll], dim).reshape(-1)
    keep = y != IGNORE
    return nll[keep], y[keep]
