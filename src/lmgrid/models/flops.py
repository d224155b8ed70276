"""FLOPs per token of every architecture and output layer, counted analytically from its ModelConfig.

Conventions (what the numbers mean):
* A multiply-add is 2 FLOPs, and only matrix products are counted: each one multiplying an [M, K] by a [K, N]
  matrix costs 2 M K N.  Element-wise work (gate non-linearities, bias adds, softmax, LayerNorm, dropout) and the
  embedding lookup are left out: they are O(width) per token against the products' O(width^2), and
  torch.utils.flop_counter.FlopCounterMode, the cross-check (lmgrid.bench.flops), counts the same ops only (mm,
  addmm, bmm, attention, convolutions), so the two agree to the FLOP on a forward pass.
* Evaluation token = one forward pass.  Training token = TRAIN_FACTOR x forward = 3x: the backward of every product
  Y = X W is two products of its size, dL/dX = dL/dY W^T and dL/dW = X^T dL/dY (the forward's 1 + the backward's 2).
  The one exception is small: nothing needs the gradient of the state a chunk starts from (zeros, or carried and
  detached), so the backward skips dL/dh_0 of the first step, 2/bptt of the hidden-to-hidden products; that is the
  tolerance against FlopCounterMode's training count.  The optimiser step and gradient clipping are O(parameters)
  per batch, not per token, and are left out too.
* Per token means per predicted target: in the stream regime a recurrent model runs one step per token; in the
  window regime it runs its n_step-1 steps from a zero state for every target (as lmgrid.neural.module does).  The
  Transformer in the stream regime runs its blocks over the context_len tokens before the chunk as well as the
  chunk's bptt tokens (models/transformer.py) and predicts the chunk's tokens only, so a chunk's block products are
  shared by bptt targets; its last block computes keys and values at every position but its queries, output
  projection and MLP at the predicted positions alone (a window: its last position); a row's first chunk has no
  earlier tokens, the count is that of every later chunk.
  Causal attention counts the keys each query may see (position p of L sees p + 1 of them: what the CPU's flash
  kernel computes); `dense_attention=True` counts all L x L scores, as the math kernel computes (and masks) them.
* All implementations of one architecture compute the same products: the LSTM's `cell` (W_ih x and W_hh h apart),
  `concat` (one W [h; x]) and nn.LSTM alike cost 4 gates x (in + hidden) x hidden x 2 per token and layer; the GRU
  3 gates, the Elman RNN 1.
* The adaptive softmax (models/adaptive.py) costs its head (c_1 words + one entry per tail cluster) for every token,
  and tail cluster i (its projection to d_i dimensions and its n_i words) only for the tokens whose target falls in
  it: its expected cost per token takes those fractions, `cluster_fractions` from the training counts by id.  With
  tied weights an output layer first projects hidden_dim to emb_dim when the two differ.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lmgrid.common.errors import LmgridError

from lmgrid.models.clusters import DIV_VALUE
from lmgrid.models.config import ModelConfig

TRAIN_FACTOR = 3  # forward + backward (two products per forward product); see the module's docstring
GATES = {"rnn": 1, "lstm": 4, "gru": 3}  # weight blocks stacked in each recurrent layer's W_ih and W_hh
# Parts that stay float32 under bf16-mixed (lmgrid.models.common.fp32_recurrence); every other part runs in bf16.
FP32_PARTS = frozenset({"recurrence"})


@dataclass(frozen=True)
class FlopCount:
    """Forward FLOPs per predicted token, by part: recurrence, hidden (FFNN layers), direct (FFNN), blocks
    (Transformer products), attention (Transformer scores and their mix of values), output."""

    parts: dict = field(default_factory=dict)

    @property
    def forward(self) -> float:
        return float(sum(self.parts.values()))

    @property
    def eval(self) -> float:
        return self.forward

    @property
    def train(self) -> float:
        return TRAIN_FACTOR * self.forward

    def by_precision(self, bf16: bool) -> dict[str, float]:
        """Forward FLOPs per token split by the dtype they run in: {"fp32": .., "bf16": ..}."""
        if not bf16:
            return {"fp32": self.forward, "bf16": 0.0}
        fp32 = sum(v for k, v in self.parts.items() if k in FP32_PARTS)
        return {"fp32": float(fp32), "bf16": self.forward - fp32}


def cluster_fractions(counts, cutoffs) -> list[float]:
    """The fraction of training tokens whose id falls in each tail cluster [c_i, c_{i+1}) (counts by id, in
    lmgrid.data.vocab order, as adaptive_cutoffs takes them)."""
    counts = [max(float(c), 0.0) for c in counts]
    total = sum(counts)
    if total <= 0:
        raise LmgridError("cluster_fractions: the counts sum to 0: no training tokens to take fractions from")
    bounds = [*cutoffs, len(counts)]
    return [sum(counts[bounds[i]:bounds[i + 1]]) / total for i in range(len(cutoffs))]


def output_flops(cfg: ModelConfig, in_dim: int, fractions=None) -> float:
    """Forward FLOPs per token of the output layer fed in_dim-wide features (lmgrid.models.adaptive.output_layer)."""
    dim = cfg.emb_dim if cfg.arch != "transformer" else cfg.hidden_dim  # the embedding's width
    proj = 2 * in_dim * dim if cfg.tie_weights and in_dim != dim else 0
    dim = dim if cfg.tie_weights else in_dim
    if cfg.output_layer != "adaptive":
        return proj + 2 * dim * cfg.vocab_size
    bounds = [*cfg.cutoffs, cfg.vocab_size]
    if fractions is None or len(fractions) != len(cfg.cutoffs):
        raise LmgridError(f"output_layer adaptive: the cost needs the fraction of tokens in each of its "
                          f"{len(cfg.cutoffs)} tail clusters (cluster_fractions), got {fractions!r}")
    head = 2 * dim * (bounds[0] + len(cfg.cutoffs))
    tails = 0.0
    for i, share in enumerate(fractions):
        width = dim if cfg.tie_weights else max(1, dim // DIV_VALUE ** (i + 1))
        tails += share * (2 * dim * width + 2 * width * (bounds[i + 1] - bounds[i]))
    return proj + head + tails


def recurrence_flops(cfg: ModelConfig) -> float:
    """Forward FLOPs of one time step of the whole recurrent stack: per layer, gates x (in + hidden) x hidden x 2."""
    H = cfg.hidden_dim
    return float(sum(2 * GATES[cfg.arch] * H * ((cfg.emb_dim if k == 0 else H) + H) for k in range(cfg.layers)))


def transformer_parts(cfg: ModelConfig, regime: str, bptt: int | None, dense_attention: bool) -> dict:
    """(blocks, attention) forward FLOPs per predicted token of the Transformer."""
    d = cfg.hidden_dim
    if regime == "window":
        positions, predicted = cfg.n_step - 1, 1  # every position of the window runs, the last one is predicted
    else:
        if not bptt:
            raise LmgridError(f"transformer flops: the stream regime needs bptt (the chunk length), got {bptt!r}")
        positions, predicted = cfg.context_len + bptt, bptt
    # Per block and position: qkv (d -> 3d), the attention's output projection (d -> d), the MLP (d -> 4d -> d).
    # The last block computes keys and values at every position, its query, projection and MLP at the predicted
    # ones only (models/transformer.py).
    per_position = 2 * d * (3 * d + d + 4 * d + 4 * d)
    blocks = (cfg.layers - 1) * positions * per_position + positions * 2 * d * 2 * d \
        + predicted * 2 * d * (d + d + 4 * d + 4 * d)
    # Scores q.k and the mix of values, each d multiply-adds per (query, key) pair summed over the heads; the last
    # block's queries are the last `predicted` positions, the one at position p seeing p + 1 keys.
    first = positions - predicted
    if dense_attention:
        pairs = (cfg.layers - 1) * positions * positions + predicted * positions
    else:
        pairs = (cfg.layers - 1) * positions * (positions + 1) // 2 + predicted * (first + 1) \
            + predicted * (predicted - 1) // 2
    attention = 2 * (2 * d * pairs)
    return {"blocks": blocks / predicted, "attention": attention / predicted}


def features_out_dim(cfg: ModelConfig) -> int:
    from lmgrid.models.plugin import plugin_class

    return plugin_class(cfg.arch)(cfg).out_dim


def flops_per_token(cfg: ModelConfig, regime: str = "stream", bptt: int | None = None, fractions=None,
                    dense_attention: bool = False) -> FlopCount:
    """Forward FLOPs per predicted token of the model cfg builds, by part (see the module's docstring).

    regime: stream | window (the FFNN is always window); bptt: the chunk length (the Transformer's stream regime);
    fractions: the adaptive softmax's tail-cluster fractions (cluster_fractions)."""
    if regime not in ("stream", "window"):
        raise LmgridError(f"flops: regime {regime!r} is not stream or window")
    cfg.validate()
    parts: dict[str, float] = {}
    if cfg.arch == "ffnn":
        regime = "window"
        context = (cfg.n_step - 1) * cfg.emb_dim
        parts["hidden"] = 2 * context * cfg.hidden_dim + (cfg.layers - 1) * 2 * cfg.hidden_dim ** 2
        if cfg.direct:
            parts["direct"] = 2 * context * cfg.vocab_size
    elif cfg.arch == "transformer":
        parts.update(transformer_parts(cfg, regime, bptt, dense_attention))
    elif cfg.arch not in GATES:  # a plug-in (models/plugin.py): counted, not derived
        from lmgrid.models.plugin import features_flops

        parts["features"] = features_flops(cfg, regime, bptt)
        return FlopCount({k: float(v) for k, v in {**parts, "output": output_flops(
            cfg, features_out_dim(cfg), fractions)}.items()})
    else:
        steps = cfg.n_step - 1 if regime == "window" else 1
        parts["recurrence"] = steps * recurrence_flops(cfg)
    parts["output"] = output_flops(cfg, cfg.hidden_dim, fractions)
    return FlopCount({k: float(v) for k, v in parts.items()})
