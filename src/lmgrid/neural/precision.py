"""Which numeric precision a training run uses, and why (recorded in metrics.json).

`precision: auto` picks `bf16-mixed` where the hardware computes bf16 natively and `32-true` elsewhere:
* a CUDA GPU of compute capability 8.0 or later (Ampere on): torch.cuda.is_bf16_supported(including_emulation=False).
  Its default, including_emulation=True, also says yes on a V100 or T4, where bf16 is emulated and slower;
* a CPU with the `avx512_bf16` or `amx_bf16` instructions (Linux /proc/cpuinfo flags): there oneDNN runs the
  bf16 matmuls natively; measured on the 2-core AVX-512 development machine, a 2x200 LSTM training step on PTB
  ran 1.85x faster than in fp32 (docs/benchmarks.md).  Without them bf16 is emulated and slower than fp32.
Under bf16-mixed only the embedding, the output layer and the Transformer run in bf16; every recurrence stays
float32 (lmgrid.models.common.fp32_recurrence).  An explicit `32-true` or `bf16-mixed` is used as asked.

float32 means IEEE float32 (full_fp32): on Ampere and later cuDNN runs its RNN kernels (nn.LSTM, nn.GRU, nn.RNN,
`impl: torch`) in TF32 by default, with a 10-bit mantissa, while the hand-written cells' matmuls stay IEEE: the three
implementations would stop computing the same thing.  metrics.json records the settings the run had.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

NATIVE_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")

# LMGRID_CPU_FLAGS replaces /proc/cpuinfo's flags (blank- or comma-separated), so a test or a user can ask what
# lmgrid would do on another CPU: e.g. LMGRID_CPU_FLAGS="sse4_2 avx avx2 fma" for an AVX2-only laptop.
CPU_FLAGS_ENV = "LMGRID_CPU_FLAGS"
# oneDNN's documented ISA cap (ONEDNN_MAX_CPU_ISA).  Below AVX512_CORE_BF16 oneDNN has no bf16 kernels even on a
# CPU that has the instructions (nn.LSTM under bf16 autocast then fails to create its primitive), so bf16 counts as
# emulated.  `ONEDNN_MAX_CPU_ISA=AVX2` together with LMGRID_CPU_FLAGS reproduces an AVX2-only machine (.ci/run).
ONEDNN_ISA_ENV = "ONEDNN_MAX_CPU_ISA"
ONEDNN_ISAS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
# The flags of an AVX2-only x86 CPU (no AVX-512, no bf16), the one place they are listed: LMGRID_CPU_FLAGS under
# `make test-avx2` (the Makefile reads them from here) and under tools/first_run.py --avx2-emulation.
AVX2_FLAGS = ("fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "f16c", "fma", "avx2", "bmi1", "bmi2")


def avx2_emulation_env() -> dict[str, str]:
    """The environment that has the kernels run as on an AVX2-only CPU, on any x86 machine: oneDNN capped at AVX2
    (so no bf16 kernels), ATen's kernels at AVX2, MKL's at AVX2, and lmgrid told an AVX2-only CPU's flags.  It caps
    the instructions only; a CPU that is slower per core is another matter (tools/first_run.py --avx2-emulation adds
    a CPU quota for that)."""
    return {ONEDNN_ISA_ENV: "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            CPU_FLAGS_ENV: " ".join(AVX2_FLAGS)}


def cpu_flags(cpuinfo: str | Path | None = None) -> set[str]:
    """The CPU's feature flags as lmgrid sees them: those of the `cpuinfo` file when one is named, else
    $LMGRID_CPU_FLAGS when set, else /proc/cpuinfo's (its first `flags` line; empty where there is none); less the
    bf16 flags when $ONEDNN_MAX_CPU_ISA caps oneDNN below bf16."""
    override = os.environ.get(CPU_FLAGS_ENV) if cpuinfo is None else None
    if override is not None:
        flags = set(override.replace(",", " ").split())
    else:
        flags = _cpuinfo_flags(cpuinfo or "/proc/cpuinfo")
    if os.environ.get(ONEDNN_ISA_ENV, "").strip().upper() in ONEDNN_ISAS_WITHOUT_BF16:
        flags -= set(NATIVE_CPU_BF16_FLAGS)
    return flags


def _cpuinfo_flags(cpuinfo: str | Path) -> set[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def native_cpu_bf16(flags: set[str] | None = None) -> list[str]:
    """The flags by which this CPU computes bf16 natively (empty: bf16 is emulated, slower than fp32)."""
    return sorted(set(NATIVE_CPU_BF16_FLAGS) & (cpu_flags() if flags is None else flags))


def gpu_bf16() -> tuple[bool, str]:
    """(whether the current CUDA GPU computes bf16 natively, a label naming it and its compute capability)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    label = f"{torch.cuda.get_device_name()} (compute capability {major}.{minor})"
    return torch.cuda.is_bf16_supported(including_emulation=False), label


def resolve_precision(asked: str, cuda: bool, flags: set[str] | None = None,
                      gpu: tuple[bool, str] | None = None) -> tuple[str, str]:
    """(the Lightning precision to train with, why).  gpu: gpu_bf16()'s answer, asked when None."""
    if cuda:
        native, label = gpu_bf16() if gpu is None else gpu
        if asked == "auto":
            if native:
                return "bf16-mixed", f"auto: the GPU {label} computes bf16 natively"
            return "32-true", f"auto: the GPU {label} has no native bf16 (compute capability 8.0 and later have it)"
        if asked == "bf16-mixed" and not native:
            return asked, f"as configured (the GPU {label} emulates bf16: slower than 32-true)"
        return asked, "as configured"
    native = native_cpu_bf16(flags)
    if asked == "auto":
        if native:
            return "bf16-mixed", f"auto: the CPU has {'/'.join(native)}"
        return "32-true", f"auto: the CPU has no {' or '.join(NATIVE_CPU_BF16_FLAGS)}"
    if asked == "bf16-mixed" and not native:
        return asked, "as configured (this CPU emulates bf16: slower than 32-true)"
    return asked, "as configured"


# The float32 settings pinned for a run, per device kind: (torch.backends attribute path, what is pinned).
FP32_SETTINGS = {"cuda": ("cuda.matmul", "cudnn.rnn"), "cpu": ("mkldnn.matmul", "mkldnn.rnn")}


def _backend(path: str):
    import torch

    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def fp32_settings(device_type: str) -> dict[str, str]:
    """The float32 settings in effect for a device kind, read back from torch: {"cuda.matmul": "ieee", ...}."""
    return {path: _backend(path).fp32_precision for path in FP32_SETTINGS[device_type]}


@contextlib.contextmanager
def full_fp32():
    """Float32 matmuls and RNN kernels in IEEE float32, not TF32 (nor bf16 on the CPU), for the duration.  Both
    device kinds' settings are pinned (they are process-wide and cost nothing where unused).  Only torch's
    fp32_precision API is used: mixing it with the legacy allow_tf32 flags makes torch refuse to read them."""
    paths = FP32_SETTINGS["cuda"] + FP32_SETTINGS["cpu"]
    before = {path: _backend(path).fp32_precision for path in paths}
    try:
        for path in paths:
            _backend(path).fp32_precision = "ieee"
        yield
    finally:
        for path, value in before.items():
            _backend(path).fp32_precision = value


def autocast(precision: str, device_type: str):
    """The autocast context Lightning trains and validates a `precision` run in, for scoring outside the Trainer
    (the final valid and test evaluation): the same arithmetic as the validation that chose the best epoch, and
    for bf16-mixed the output layer at bf16 speed."""
    import torch

    bf16 = precision == "bf16-mixed"  # the only mixed precision the schema offers
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16)
