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

from lmgrid.models.config import IMPLS, ModelConfig

# The classes (and torch) load on first use: lmgrid.models.flops and lmgrid.models.clusters are imported when the
# workflow plans its jobs, which must not import torch (tests/test_workflow.py).
_CLASSES = {"FFNNLM": "ffnn", "RNNLM": "rnn", "LSTMLM": "lstm", "GRULM": "gru", "TransformerLM": "transformer"}

__all__ = ["ARCHS", "IMPLS", "ModelConfig", "build_model", "FFNNLM", "RNNLM", "LSTMLM", "GRULM", "TransformerLM"]


def __getattr__(name: str):
    import importlib

    if name in _CLASSES:
        return getattr(importlib.import_module(f"lmgrid.models.{_CLASSES[name]}"), name)
    if name == "ARCHS":
        return {arch: __getattr__(cls) for cls, arch in _CLASSES.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_model(cfg: ModelConfig) -> "torch.nn.Module":
    """The model cfg describes; raises LmgridError (one line naming the key and value) on a bad config."""
    import torch

    cfg.validate()
    archs = __getattr__("ARCHS")
    if cfg.arch in archs:
        model = archs[cfg.arch](cfg)
    else:  # a plug-in (validate checked it is registered): the user's class under lmgrid's output layer
        from lmgrid.models.plugin import PluginLM, plugin_class

        model = PluginLM(plugin_class(cfg.arch), cfg)
    if cfg.init_range > 0:
        with torch.no_grad():
            for p in model.parameters():  # tied weights are one parameter: drawn once
                p.uniform_(-cfg.init_range, cfg.init_range)
    return model
