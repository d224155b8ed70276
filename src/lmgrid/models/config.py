"""The one configuration object every neural architecture is built from, and its validation.

Validation lives here (not in each model) so that a bad grid cell fails before any weight is allocated, with one
line naming the offending key and value, the way every lmgrid input error reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from lmgrid.common.errors import LmgridError
from lmgrid.common import plugins

# arch -> the implementations it offers; the first is the default.
IMPLS: dict[str, tuple[str, ...]] = {
    "ffnn": ("torch",),
    "rnn": ("torch",),
    "lstm": ("torch", "cell", "concat", "cellonebias"),
    "gru": ("torch", "cell"),
    "transformer": ("torch",),
}


@dataclass
class ModelConfig:
    """Every value is given: ModelConfig has no defaults of its own.  The schema's training settings
    (workflow/schemas/config.schema.yaml) are the only defaults; a run's values come from its RunSpec
    (lmgrid.run.spec.RunSpec.model_config), a model built by hand fills the rest from the schema
    (lmgrid.run.spec.model_config_defaults).  models/ stays free of I/O, so it does not read the schema itself."""

    arch: str  # ffnn | rnn | lstm | gru | transformer | a registered plug-in's lmgrid_name (models/plugin.py)
    vocab_size: int
    impl: str  # lstm: torch | cell | concat | cellonebias ; gru: torch | cell ; others: torch
    n_step: int  # window size including the target: a window model sees n_step-1 context tokens
    layers: int
    emb_dim: int  # unused by the transformer, whose token embedding is hidden_dim wide
    hidden_dim: int  # recurrent state size / FFNN hidden width / transformer model width
    dropout: float  # on embeddings, between layers and before the output layer
    # rnn, lstm, gru (impl torch): DropConnect on the hidden-to-hidden weights in training, one mask per BPTT chunk
    # (models/lstm.hh_dropped); regularises the recurrence itself, which `dropout` leaves alone.
    weight_drop: float
    tie_weights: bool  # output matrix = input embedding; a bias-free projection bridges hidden_dim != emb_dim
    activation: str  # ffnn hidden layers: tanh | relu | gelu
    direct: bool  # ffnn: Bengio's direct embedding-to-output connections
    heads: int  # transformer attention heads; hidden_dim must be a multiple
    max_len: int  # transformer: learned positions, so the longest input it accepts
    # transformer, stream regime: how many tokens of the text before a chunk it attends to (its state); the chunk
    # itself then starts at position context_len, with or without those tokens (0 = no state: the window regime).
    context_len: int
    # rnn, lstm, gru, ffnn: from the second layer on, a layer's input is added to its output (He et al. 2016; Wu et
    # al. 2016 for stacked LSTMs), so a deep stack starts out passing its input through.  The transformer always
    # has residual connections.
    residual: bool
    # The output layer: `full` softmax, or `adaptive` softmax (models/adaptive.py) with these cluster boundaries
    # (ids, increasing, in (0, vocab_size)), which lmgrid.neural.train sets from the vocabulary's counts.
    output_layer: str
    cutoffs: list
    # > 0: after construction every parameter is drawn uniform in [-init_range, init_range], as in Zaremba et al.
    # 2014 (0.1 for their small LSTM), replacing the per-part init (init_recurrence: orthogonal recurrent blocks,
    # forget-gate bias 1).  Drawn in the parameters' order, so the impls of one seed no longer start alike.
    init_range: float
    # Hand-written cells (lstm cell/concat, gru cell): torch.compile their per-step function. Off by default because
    # `python -m lmgrid.bench cells` measured it slower than eager on the 2-core CPU (2x200, batch 20: the per-call
    # overhead of a compiled function outweighs the fused gate kernel at these sizes) and it adds ~10-30 s of
    # compilation per run. Worth re-measuring on a GPU.
    compile: bool

    def validate(self) -> "ModelConfig":
        """Raise LmgridError (one line) on the first bad value; return self so calls chain.

        Only what the schema cannot say: each training setting's type, range and choices are the schema's
        ($defs/train_settings), checked before a value gets here (the config, or model_config_defaults).  Left here:
        the cell's own fields, and the checks across fields."""

        def bad(key: str, why: str) -> LmgridError:
            return LmgridError(f"model.{key}: {getattr(self, key)!r} {why}")

        def check_int(key: str, lowest: int) -> None:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(key, "is not an integer")
            if value < lowest:
                raise bad(key, f"is not allowed (must be >= {lowest})")

        impls = IMPLS.get(self.arch) or ((plugins.IMPL,) if plugins.is_plugin(self.arch) else None)
        if impls is None:
            raise bad("arch", f"is not a known architecture (one of: {', '.join(IMPLS)}) or registered plug-in")
        if self.impl not in impls:
            raise bad("impl", f"is not an implementation of {self.arch} (one of: {', '.join(impls)})")
        check_int("vocab_size", 2)
        # A window of n_step tokens holds n_step-1 context tokens; n_step < 2 leaves no context at all.
        check_int("n_step", 2)
        check_int("layers", 1)
        check_int("max_len", 1)
        check_int("context_len", 0)
        if self.weight_drop and (self.arch not in ("rnn", "lstm", "gru") or self.impl != "torch"):
            raise bad("weight_drop", f"is only implemented for the recurrences of impl torch (rnn, lstm, gru), not "
                                     f"{self.arch}/{self.impl}")
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
