"""Keep big freed blocks for reuse: glibc's malloc settings for a training process.

Why: a training step allocates and frees the same large tensors every step (PTB's logits, their log-softmax and
gradients: 700 x 10,000 floats, 28 MB each). glibc serves blocks above its mmap threshold (128 KiB at start,
raised as such blocks are freed, at most 32 MiB) with fresh mmap()s and gives the heap's top back to the system
above its trim threshold, so every step touches new pages: on the issue-18 LSTM job the plain PyTorch script took
about 800,000 minor page faults. With the mmap threshold at its 32 MiB maximum and a trim threshold of 1 GiB, blocks
up to 32 MiB come from the heap and are reused from step to step: 147,000 faults and about 10% more training
tokens/s for the same arithmetic (docs/benchmarks.md). Peak RSS barely moves, since freed blocks are reused, not
added to. This is PyTorch's CPU performance advice (a caching allocator such as jemalloc or tcmalloc) done with
the C library's own knobs, so nothing needs installing or preloading.

Only glibc has mallopt(); elsewhere (macOS, musl) the process is left as it is.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest allowed value on 64-bit systems (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 1 << 30


def keep_freed_blocks() -> bool:
    """Apply the settings to this process; True when they took effect (glibc), False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD_BYTES))
