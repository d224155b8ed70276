"""Test-time adaptation of a trained stream model: the continuous cache (Grave et al. 2017) and dynamic
evaluation (Krause et al. 2018; rule sgd, or rule rms with decay), each tuned on valid and applied once to test.
docs/adapt.md.

The names below are imported on first use (PEP 562), not with the package: `lmgrid.testtime.adapt.cli` registers its
command in every `lmgrid` process's parser, and importing it must not import torch (lmgrid.cli, PLUGINS)."""
import importlib

_HOME = {"cache_logprobs": "cache", "cache_mix": "cache", "dynamic_logprobs": "dynamic", "dynamic_states": "dynamic",
         "gradient_stats": "dynamic", "perplexity_of": "stream", "stream_states": "stream", "CACHE_GRID": "tune",
         "DYNAMIC_GRID": "tune", "RMS_GRID": "tune", "adapt": "tune"}
__all__ = list(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
