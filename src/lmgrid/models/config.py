"""The one configuration object every neural architecture is built from, and its validation.

Validation lives here (not in each model) so that a bad grid cell fails before any weight is allocated, with one
line naming the offending key and value, the way every lmgrid input error reads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lmgrid.common.errors import LmgridError

# arch -> the implementations it offers; the first is the default.
IMPLS: dict[str, tuple[str, ...]] = {
    "ffnn": ("torch",),
    "rnn": ("torch",),
    "lstm": ("torch", "cell", "concat", "cellonebias"),
    "gru": ("torch", "cell"),
    "transformer": ("torch",),
}
ACTIVATIONS = ("tanh", "relu", "gelu")
OUTPUT_LAYERS = ("full", "adaptive")


@dataclass
class ModelConfig:
    arch: str  # ffnn | rnn | lstm | gru | transformer
    vocab_size: int
    impl: str = "torch"  # lstm: torch | cell | concat | cellonebias ; gru: torch | cell ; others: torch
    n_step: int = 5  # window size including the target: a window model sees n_step-1 context tokens
    layers: int = 1
    emb_dim: int = 64  # unused by the transformer, whose token embedding is hidden_dim wide
    hidden_dim: int = 128  # recurrent state size / FFNN hidden width / transformer model width
    dropout: float = 0.0  # on embeddings, between layers and before the output layer
    # rnn, lstm, gru (impl torch): DropConnect on the hidden-to-hidden weights in training, one mask per BPTT chunk
    # (models/lstm.hh_dropped); regularises the recurrence itself, which `dropout` leaves alone.
    weight_drop: float = 0.0
    tie_weights: bool = False  # output matrix = input embedding; a bias-free projection bridges hidden_dim != emb_dim
    activation: str = "tanh"  # ffnn hidden layers: tanh | relu | gelu
    direct: bool = False  # ffnn: Bengio's direct embedding-to-output connections
    heads: int = 4  # transformer attention heads; hidden_dim must be a multiple
    max_len: int = 512  # transformer: learned positions, so the longest input it accepts
    # transformer, stream regime: how many tokens of the text before a chunk it attends to (its state); the chunk
    # itself then starts at position context_len, with or without those tokens (0 = no state: the window regime).
    context_len: int = 0
    # rnn, lstm, gru, ffnn: from the second layer on, a layer's input is added to its output (He et al. 2016; Wu et
    # al. 2016 for stacked LSTMs), so a deep stack starts out passing its input through.  The transformer always
    # has residual connections.
    residual: bool = False
    # The output layer: `full` softmax, or `adaptive` softmax (models/adaptive.py) with these cluster boundaries
    # (ids, increasing, in (0, vocab_size)), which lmgrid.neural.train sets from the vocabulary's counts.
    output_layer: str = "full"
    cutoffs: list = dataclasses.field(default_factory=list)
    # > 0: after construction every parameter is drawn uniform in [-init_range, init_range], as in Zaremba et al.
    # 2014 (0.1 for their small LSTM), replacing the per-part init (init_recurrence: orthogonal recurrent blocks,
    # forget-gate bias 1).  Drawn in the parameters' order, so the impls of one seed no longer start alike.
    init_range: float = 0.0
    # Hand-written cells (lstm cell/concat, gru cell): torch.compile their per-step function. Off by default because
    # `python -m lmgrid.bench cells` measured it slower than eager on the 2-core CPU (2x200, batch 20: the per-call
    # overhead of a compiled function outweighs the fused gate kernel at these sizes) and it adds ~10-30 s of
    # compilation per run. Worth re-measuring on a GPU.
    compile: bool = False

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        """Build from a config mapping (e.g. the `model` section of config.yaml); unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                raise LmgridError(f"model.{key}: unknown key (known: {', '.join(sorted(known))})")
        for key in ("arch", "vocab_size"):
            if key not in values:
                raise LmgridError(f"model.{key}: required key is missing")
        return cls(**values).validate()

    def validate(self) -> "ModelConfig":
        """Raise LmgridError (one line) on the first bad value; return self so calls chain."""

        def bad(key: str, why: str) -> LmgridError:
            return LmgridError(f"model.{key}: {getattr(self, key)!r} {why}")

        def check_int(key: str, lowest: int) -> None:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(key, "is not an integer")
            if value < lowest:
                raise bad(key, f"is not allowed (must be >= {lowest})")

        if self.arch not in IMPLS:
            raise bad("arch", f"is not a known architecture (one of: {', '.join(IMPLS)})")
        if self.impl not in IMPLS[self.arch]:
            raise bad("impl", f"is not an implementation of {self.arch} (one of: {', '.join(IMPLS[self.arch])})")
        check_int("vocab_size", 2)
        # A window of n_step tokens holds n_step-1 context tokens; n_step < 2 leaves no context at all.
        check_int("n_step", 2)
        check_int("layers", 1)
        check_int("emb_dim", 1)
        check_int("hidden_dim", 1)
        check_int("heads", 1)
        check_int("max_len", 1)
        check_int("context_len", 0)
        for key in ("dropout", "weight_drop"):  # probabilities of dropping
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise bad(key, "is not allowed (must be a number in [0, 1))")
        if self.weight_drop and (self.arch not in ("rnn", "lstm", "gru") or self.impl != "torch"):
            raise bad("weight_drop", f"is only implemented for the recurrences of impl torch (rnn, lstm, gru), not "
                                     f"{self.arch}/{self.impl}")
        if isinstance(self.init_range, bool) or not isinstance(self.init_range, (int, float)) or self.init_range < 0:
            raise bad("init_range", "is not allowed (must be a number >= 0)")
        if self.activation not in ACTIVATIONS:
            raise bad("activation", f"is not a known activation (one of: {', '.join(ACTIVATIONS)})")
        for key in ("tie_weights", "direct", "residual", "compile"):
            if not isinstance(getattr(self, key), bool):
                raise bad(key, "is not true or false")
        if self.output_layer not in OUTPUT_LAYERS:
            raise bad("output_layer", f"is not a known output layer (one of: {', '.join(OUTPUT_LAYERS)})")
        if self.output_layer == "adaptive":
            cuts = self.cutoffs
            if (not isinstance(cuts, (list, tuple)) or not cuts
                    or any(isinstance(c, bool) or not isinstance(c, int) for c in cuts)
                    or list(cuts) != sorted(set(cuts)) or cuts[0] < 1 or cuts[-1] >= self.vocab_size):
                raise bad("cutoffs", f"are not increasing ids in (0, vocab_size={self.vocab_size}), as the adaptive "
                                     "output layer needs")
            if self.direct:
                raise bad("direct", "is not allowed with output_layer adaptive (direct connections add to the full "
                                    "softmax's logits)")
        if self.arch == "transformer" and self.hidden_dim % self.heads:
            raise bad("hidden_dim", f"is not a multiple of model.heads={self.heads}")
        return self
