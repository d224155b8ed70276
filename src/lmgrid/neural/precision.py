"""Which numeric precision a training run uses, and why (recorded in metrics.json).

`precision: auto` picks `bf16-mixed` where the hardware computes bf16 natively and `32-true` elsewhere:
* a CUDA GPU that supports bf16 (torch.cuda.is_bf16_supported: Ampere and later);
* a CPU with the `avx512_bf16` or `amx_bf16` instructions (Linux /proc/cpuinfo flags): there oneDNN runs the
  bf16 matmuls natively; measured on the 2-core AVX-512 development machine, a 2x200 LSTM training step on PTB
  ran 1.85x faster than in fp32 (docs/benchmarks.md).  Without them bf16 is emulated and slower than fp32.
Under bf16-mixed only the embedding, the output layer and the Transformer run in bf16; every recurrence stays
float32 (lmgrid.models.common.fp32_recurrence).  An explicit `32-true` or `bf16-mixed` is used as asked.
"""
from __future__ import annotations

from pathlib import Path

NATIVE_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def resolve_precision(asked: str, cuda: bool, flags: set[str] | None = None) -> tuple[str, str]:
    """(the Lightning precision to train with, why)."""
    if cuda:
        import torch

        bf16 = torch.cuda.is_bf16_supported()
        if asked == "auto":
            return ("bf16-mixed", "auto: the GPU supports bf16") if bf16 else ("32-true", "auto: the GPU lacks bf16")
        return asked, "as configured"
    flags = cpu_flags() if flags is None else flags
    native = sorted(set(NATIVE_CPU_BF16_FLAGS) & flags)
    if asked == "auto":
        if native:
            return "bf16-mixed", f"auto: the CPU has {'/'.join(native)}"
        return "32-true", f"auto: the CPU has no {' or '.join(NATIVE_CPU_BF16_FLAGS)}"
    if asked == "bf16-mixed" and not native:
        return asked, "as configured (this CPU emulates bf16: slower than 32-true)"
    return asked, "as configured"


def autocast(precision: str, device_type: str):
    """The autocast context Lightning trains and validates a `precision` run in, for scoring outside the Trainer
    (the final valid and test evaluation): the same arithmetic as the validation that chose the best epoch, and
    for bf16-mixed the output layer at bf16 speed."""
    import torch

    bf16 = precision == "bf16-mixed"  # the only mixed precision the schema offers
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16)
