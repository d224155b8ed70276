"""The adaptive softmax's cluster rule (`adaptive_cutoffs`) and its sizes, without torch.

The rule and why it is what it is: lmgrid.models.adaptive's docstring, which re-exports these names.  They live
here so that the workflow can cost a model when it plans its jobs (lmgrid.orchestration.job_order, through
lmgrid.models.flops) without importing torch, which would slow every `snakemake -n`.
"""
from __future__ import annotations

import math

from lmgrid.common.errors import LmgridError

HEAD_COVERAGE, TAIL_COVERAGE = 0.87, 0.97
DIV_VALUE = 4  # tail cluster i (from 1) projects to hidden / DIV_VALUE**i dimensions when untied
# Word frequencies where no corpus gives them (the benchmark's random tokens, a plan before the vocabulary exists):
# a Zipf law of this exponent, under which the top 2,000 of 10,000 ids cover about PTB's share of the tokens.
ZIPF_EXPONENT = 1.05


def adaptive_cutoffs(counts, coverage=(HEAD_COVERAGE, TAIL_COVERAGE)) -> list[int]:
    """Cluster boundaries (ids) from the training counts by id (lmgrid.data.vocab order); the rule is the module's."""
    counts = [max(int(c), 0) for c in counts]
    size, total = len(counts), sum(counts)
    if size < 2 or total == 0:
        raise LmgridError(f"output_layer adaptive: a vocabulary of {size} entries with {total} training tokens has "
                          "no frequencies to cut into clusters")
    step = max(1, 10 ** (int(math.log10(size)) - 2))
    cutoffs, running, i = [], 0, 0
    for share in coverage:
        while running < share * total:
            running += counts[i]
            i += 1
        cut = min(max(round(i / step) * step, 1), size - 1)
        if not cutoffs or cut > cutoffs[-1]:
            cutoffs.append(cut)
    return cutoffs
