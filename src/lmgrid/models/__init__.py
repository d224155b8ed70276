"""Neural language models: plain nn.Modules sharing one interface.

    model = build_model(ModelConfig(**spec.model_config(vocab)))  # a run's: every value from its RunSpec
    model = build_model(model_config_defaults(arch="lstm", vocab_size=V, impl="cell", layers=2))  # by hand

(`lmgrid.run.spec`: ModelConfig has no defaults of its own; `model_config_defaults` fills the schema's.)
    logits, state, gates = model(tokens, state=None, return_gates=False)

* tokens LongTensor [B, T] -> logits [B, T, V]. ffnn needs T == n_step-1 and returns [B, 1, V] (the next token).
  `last_only=True` returns only the last position's logits [B, 1, V] (what a window needs; ffnn always does).
* state is opaque (None = zeros); pass it back for the next chunk; `model.detach_state(state)` cuts the graph for
  truncated BPTT. ffnn returns None; the transformer's state is the tokens read so far (the next chunk's context).
* gates: None unless return_gates. Then a dict gate -> [layers, B, T, H] of post-activation values:
  LSTM i, f, o (sigmoid) and g (tanh); GRU z, r; an empty dict for architectures without gates.
"""
from __future__ import annotations

import torch
from torch import nn

from lmgrid.models.config import IMPLS, ModelConfig
from lmgrid.models.ffnn import FFNNLM
from lmgrid.models.gru import GRULM
from lmgrid.models.lstm import LSTMLM
from lmgrid.models.rnn import RNNLM
from lmgrid.models.transformer import TransformerLM

ARCHS = {"ffnn": FFNNLM, "rnn": RNNLM, "lstm": LSTMLM, "gru": GRULM, "transformer": TransformerLM}

__all__ = ["ARCHS", "IMPLS", "ModelConfig", "build_model", "FFNNLM", "RNNLM", "LSTMLM", "GRULM", "TransformerLM"]


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model cfg describes; raises LmgridError (one line naming the key and value) on a bad config."""
    cfg.validate()
    if cfg.arch in ARCHS:
        model = ARCHS[cfg.arch](cfg)
    else:  # a plug-in (validate checked it is registered): the user's class under lmgrid's output layer
        from lmgrid.models.plugin import PluginLM, plugin_class

        model = PluginLM(plugin_class(cfg.arch), cfg)
    if cfg.init_range > 0:
        with torch.no_grad():
            for p in model.parameters():  # tied weights are one parameter: drawn once
                p.uniform_(-cfg.init_range, cfg.init_range)
    return model
