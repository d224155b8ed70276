"""A split read as ONE stream: batch 1, state carried from segment to segment, float32.

Both test-time adaptations (cache.py, dynamic.py) read the text this way.  `token_ids` is the split's stream as
`lmgrid.neural.data.stream_tokens` builds it: </s> w1 .. </s> w1 .. </s>, whose first token is context only, so
position t reads token_ids[t] and predicts token_ids[t + 1]; there are len(token_ids) - 1 counted targets, the
shared convention's (words and one </s> per sentence).  This is `sentence_rows` with one row, so the base PPL of
these functions is what `lmgrid.neural.module.evaluate` gives with a batch of one row (tests/test_adapt.py).

Full-vocabulary log-probabilities come from the model's own forward, `head(features(x))`, through log_softmax in
float32, as `lmgrid score` computes them (lmgrid.neural.model_io.NeuralLM._logprobs): exact for the full softmax
(logits) and for the adaptive softmax (whose forward already returns normalised log-probabilities; log_softmax
leaves them as they are up to rounding).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from lmgrid.common.errors import LmgridError


def stream_segment(model, segment: int | None, bptt: int) -> int:
    """The segment length a stream model is read in; refuses window models with one line.

    Recurrent models carry their state exactly, so any segment scores the same text; the transformer's context is
    its chunking (each chunk attends to the context_len tokens before it), so it is read in chunks of its
    context_len, as its run was trained and scored."""
    cfg = model.cfg
    if cfg.arch == "ffnn":
        raise LmgridError("adapt: arch ffnn is a window model; the cache and dynamic evaluation read a stream "
                          "(rnn, lstm, gru or a stream-regime transformer)")
    if cfg.arch == "transformer":
        if cfg.context_len == 0:
            raise LmgridError("adapt: a window-regime transformer (context_len 0) has no stream state to carry")
        if segment not in (None, cfg.context_len):
            raise LmgridError(f"adapt: segment {segment} does not fit the transformer, which reads a stream in "
                              f"chunks of its context_len={cfg.context_len}")
        return cfg.context_len
    segment = bptt if segment is None else segment
    if isinstance(segment, bool) or not isinstance(segment, int) or segment < 1:
        raise LmgridError(f"adapt: segment {segment!r} is not a whole number >= 1")
    return segment


def as_stream(token_ids: Sequence[int] | np.ndarray | torch.Tensor) -> torch.Tensor:
    ids = torch.as_tensor(np.asarray(token_ids), dtype=torch.long).reshape(-1)
    if len(ids) < 2:
        raise LmgridError(f"adapt: a stream of {len(ids)} token(s) has no target to score")
    return ids


def segments(ids: torch.Tensor, segment: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs [1, T], targets [1, T]) for consecutive segments of the stream; T = segment except the last."""
    n = len(ids) - 1
    for start in range(0, n, segment):
        stop = min(start + segment, n)
        yield ids[None, start:stop], ids[None, start + 1:stop + 1]


def full_log_probs(model, hidden: torch.Tensor) -> torch.Tensor:
    """hidden [.., H] -> log p(. | hidden) [.., V] in float32, for either output layer (see the module docstring)."""
    return torch.log_softmax(model.head(hidden).float(), -1)


@torch.no_grad()
def stream_states(model, token_ids, *, segment: int | None = None, bptt: int = 35):
    """One pass over the stream: (hidden [N, H], log p_model(target) [N], targets [N]), float32, in corpus order.

    hidden[t] is the top layer's state at position t (after reading token_ids[t]; the transformer's final-LayerNorm
    output within its context), the vector the output layer turns into the prediction of targets[t]."""
    segment = stream_segment(model, segment, bptt)
    ids = as_stream(token_ids)
    was_training = model.training
    model.eval()
    hidden, logp, state = [], [], None
    with torch.autocast(device_type="cpu", enabled=False):  # float32, whatever precision the run trained in
        for x, y in segments(ids, segment):
            h, state, _ = model.features(x, state)
            hidden.append(h[0].float())
            logp.append(full_log_probs(model, h[0]).gather(1, y[0, :, None])[:, 0])
    model.train(was_training)
    return torch.cat(hidden), torch.cat(logp), ids[1:]


def perplexity_of(log_probs) -> float:
    """exp(-mean) of per-token natural-log probabilities, summed in float64 (lmgrid.data.ppl.perplexity)."""
    from lmgrid.data.ppl import perplexity

    lp = np.asarray(log_probs, dtype=np.float64)
    return perplexity(-float(lp.sum()), len(lp))
