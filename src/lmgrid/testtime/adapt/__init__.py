"""Test-time adaptation of a trained stream model: the continuous cache (Grave et al. 2017) and dynamic
evaluation (Krause et al. 2018; rule sgd, or rule rms with decay), each tuned on valid and applied once to test.
docs/adapt.md."""
from lmgrid.testtime.adapt.cache import cache_logprobs, cache_mix
from lmgrid.testtime.adapt.dynamic import dynamic_logprobs, dynamic_states, gradient_stats
from lmgrid.testtime.adapt.stream import perplexity_of, stream_states
from lmgrid.testtime.adapt.tune import CACHE_GRID, DYNAMIC_GRID, RMS_GRID, adapt

__all__ = ["cache_logprobs", "cache_mix", "dynamic_logprobs", "dynamic_states", "stream_states", "perplexity_of",
           "gradient_stats", "adapt", "CACHE_GRID", "DYNAMIC_GRID", "RMS_GRID"]
