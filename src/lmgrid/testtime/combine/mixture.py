"""Linear interpolation of language models with weights fitted by EM on valid (SRILM's compute-best-mix).

p_mix(t) = sum_k w_k p_k(t), w on the simplex.  EM for mixture weights of fixed components: the E-step gives each
component its share r_kt = w_k p_k(t) / p_mix(t) of every valid token, the M-step sets w_k to the mean share.  Each
step raises the valid log-likelihood (it is concave in w, so EM converges to its maximum); iteration stops when a
step gains less than `tol` nats per token.

The fit only ever sees valid: `fit_weights` refuses scores of any other split, so test-set choice cannot leak into
the weights; `combine` fits on valid and applies the weights once to test.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.special import logsumexp

from lmgrid.common.errors import LmgridError

from lmgrid.testtime.combine.scorefile import Scores, stack

TOL_NATS = 1e-9     # stop when an EM step gains less than this (mean log-likelihood per valid token, nats)
MAX_ITER = 10_000
FIT_SPLIT = "valid"


def mixture_logprob(log_w: np.ndarray, lp: np.ndarray) -> np.ndarray:
    """log p_mix per token: lp [K, N] component log-probs, log_w [K] log-weights."""
    with np.errstate(divide="ignore"):
        return logsumexp(log_w[:, None] + lp, axis=0)


def em_step(w: np.ndarray, lp: np.ndarray) -> tuple[float, np.ndarray]:
    """(the mixture's mean log-likelihood per token with weights w, EM's update of w: the mean over tokens of each
    component's posterior share).  One logsumexp gives both: the fit's time is almost all in it, thousands of steps
    when a component's weight goes to 0."""
    with np.errstate(divide="ignore"):
        joint = np.log(w)[:, None] + lp
    log_mix = logsumexp(joint, axis=0)  # mixture_logprob(np.log(w), lp), the same numbers
    return float(np.mean(log_mix)), np.exp(joint - log_mix).mean(axis=1)


def ppl(log_p: np.ndarray) -> float:
    return math.exp(-float(np.mean(log_p)))


def fit_weights(valid: list[Scores], tol: float = TOL_NATS, max_iter: int = MAX_ITER) -> tuple[np.ndarray, int]:
    """(weights, EM iterations) maximising the valid log-likelihood of the mixture of `valid` (valid scores only)."""
    for s in valid:
        if s.split != FIT_SPLIT:
            raise LmgridError(f"{s.path or s.run_dir}: mixture weights are fitted on {FIT_SPLIT} only, "
                              f"not on {s.split}")
    if not valid:
        raise LmgridError("a combination needs at least one component")
    lp = stack(valid)
    w = np.full(len(valid), 1.0 / len(valid))
    ll, update = em_step(w, lp)
    it = 0
    for it in range(1, max_iter + 1):
        w = update / update.sum()  # against drift of the sum in floating point
        new, update = em_step(w, lp)  # w's likelihood, and the next step's weights should it go on
        gain, ll = new - ll, new
        if gain < tol:
            break
    # Near a vertex (one component alone is best) EM approaches it slowly and stops just short; the vertex itself
    # is then taken, so the mixture is never worse on valid than its best component.
    alone = lp.mean(axis=1)
    best = int(np.argmax(alone))
    if alone[best] >= ll:
        w = np.zeros(len(valid))
        w[best] = 1.0
    return w, it


@dataclass
class Mixture:
    """A fitted combination: weights (fitted on valid), its valid and test PPL, each component's."""
    labels: list[str]
    weights: list[float]
    valid_ppl: float
    test_ppl: float
    component_valid_ppl: list[float]
    component_test_ppl: list[float]
    iterations: int
    tokens: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def combine(labels: list[str], valid: list[Scores], test: list[Scores], tol: float = TOL_NATS) -> Mixture:
    """Fit the weights on `valid`, then score valid and test with them."""
    if len(labels) != len(valid) or len(valid) != len(test):
        raise LmgridError(f"combination: {len(labels)} labels, {len(valid)} valid and {len(test)} test score files")
    w, iterations = fit_weights(valid, tol)
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    lp_valid, lp_test = stack(valid), stack(test)
    return Mixture(labels=list(labels), weights=[float(x) for x in w],
                   valid_ppl=ppl(mixture_logprob(log_w, lp_valid)), test_ppl=ppl(mixture_logprob(log_w, lp_test)),
                   component_valid_ppl=[s.file_ppl() for s in valid], component_test_ppl=[s.file_ppl() for s in test],
                   iterations=iterations, tokens={"valid": valid[0].count, "test": test[0].count})
