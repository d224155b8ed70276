"""Peak FLOP/s of one CPU core, from its instruction set (the /proc/cpuinfo flags) and its clock.

fp32: FMA units x SIMD lanes x 2 FLOPs (a fused multiply-add) per cycle.  Lanes: 16 with avx512f (512-bit
registers), 8 with avx2 + fma (256-bit), else 4 (SSE, 128-bit; without fma a multiply and an add issue apart, which
counts as one FMA's 2 FLOPs a lane).  FMA units: 2 is assumed (Intel's client and Xeon Gold/Platinum cores since
Haswell, AMD since Zen 2 for 256-bit work); some cores have one 512-bit unit (Xeon Silver/Bronze, several Ice Lake
parts) and AMD's Zen 4 splits a 512-bit FMA into two 256-bit halves (16 lanes at one per cycle): set FMA_UNITS_ENV
(or the benchmark's --fma-units) to override.

bf16, only where the CPU computes it natively (lmgrid.neural.precision.native_cpu_bf16): with amx_bf16 the AMX
tile unit's 1,024 bf16 multiply-adds per cycle (Intel's figure for Sapphire Rapids: 2,048 FLOPs a cycle); else with
avx512_bf16, vdpbf16ps's 32 bf16 multiply-adds per 512-bit instruction on each FMA unit.  Without either, no bf16
peak: bf16 is emulated there.

Clock: /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq where the kernel exposes it (the highest clock, so
the peak is an upper bound), else /proc/cpuinfo's "cpu MHz" (the clock now; under a hypervisor, usually the nominal
one), else CLOCK_ENV.  CLOCK_ENV (GHz) overrides both.  The source used is part of the answer.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.neural.precision import cpu_flags, native_cpu_bf16

FMA_UNITS_ENV = "LMGRID_FMA_UNITS"
CLOCK_ENV = "LMGRID_CPU_GHZ"
DEFAULT_FMA_UNITS = 2
AMX_BF16_FLOPS_PER_CYCLE = 2048  # 16 x 32 bf16 tile product, 1,024 multiply-adds a cycle per core
AVX512_BF16_MADDS = 32  # vdpbf16ps: 16 fp32 lanes, each the sum of 2 bf16 products
MAX_FREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


@dataclass(frozen=True)
class Peak:
    isa: str  # avx512f | avx2+fma | sse
    lanes: int  # fp32 lanes per vector
    fma_units: int
    ghz: float
    clock_source: str
    fp32_gflops: float
    bf16_gflops: float | None  # None: no native bf16
    bf16_source: str  # amx_bf16 | avx512_bf16 | "" (none)

    def describe(self) -> str:
        bf16 = (f"bf16 {self.bf16_gflops:,.0f} GFLOP/s ({self.bf16_source})" if self.bf16_gflops
                else "no native bf16 (no avx512_bf16 or amx_bf16)")
        return (f"peak of one core: fp32 {self.fp32_gflops:,.1f} GFLOP/s = {self.fma_units} FMA units x "
                f"{self.lanes} lanes ({self.isa}) x 2 x {self.ghz:.3f} GHz ({self.clock_source}); {bf16}")


def fp32_lanes(flags: set[str]) -> tuple[str, int]:
    if "avx512f" in flags:
        return "avx512f", 16
    if "avx2" in flags and "fma" in flags:
        return "avx2+fma", 8
    return "sse", 4


def clock_ghz(cpuinfo: str | Path = "/proc/cpuinfo", max_freq: Path = MAX_FREQ) -> tuple[float, str]:
    """(the clock in GHz, where it came from)."""
    override = os.environ.get(CLOCK_ENV)
    if override is not None:
        try:
            return float(override), f"${CLOCK_ENV}"
        except ValueError:
            raise LmgridError(f"${CLOCK_ENV}: {override!r} is not a clock in GHz") from None
    try:
        return int(max_freq.read_text().strip()) / 1e6, f"{max_freq} (kHz)"
    except (OSError, ValueError):
        pass
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1]) / 1e3, f"{cpuinfo} cpu MHz (the clock now)"
    except (OSError, ValueError):
        pass
    raise LmgridError(f"no CPU clock: neither {max_freq} nor a 'cpu MHz' line in {cpuinfo}; set ${CLOCK_ENV} (GHz)")


def fma_units(asked: int | None = None) -> int:
    value = asked if asked is not None else os.environ.get(FMA_UNITS_ENV, DEFAULT_FMA_UNITS)
    try:
        units = int(value)
    except ValueError:
        units = 0
    if units < 1:
        raise LmgridError(f"FMA units: {value!r} is not a positive integer (--fma-units or ${FMA_UNITS_ENV})")
    return units


def core_peak(flags: set[str] | None = None, units: int | None = None, clock: tuple[float, str] | None = None) -> Peak:
    """One core's peak from the flags (cpu_flags(): /proc/cpuinfo or $LMGRID_CPU_FLAGS) and clock (clock_ghz())."""
    flags = cpu_flags() if flags is None else flags
    isa, lanes = fp32_lanes(flags)
    units = fma_units(units)
    ghz, source = clock_ghz() if clock is None else clock
    native = native_cpu_bf16(flags)
    if "amx_bf16" in native:
        bf16, bf16_source = AMX_BF16_FLOPS_PER_CYCLE * ghz, "amx_bf16"
    elif "avx512_bf16" in native:
        bf16, bf16_source = units * AVX512_BF16_MADDS * 2 * ghz, "avx512_bf16"
    else:
        bf16, bf16_source = None, ""
    return Peak(isa, lanes, units, ghz, source, units * lanes * 2 * ghz, bf16, bf16_source)


def fraction_of_peak(flops_by_dtype: dict[str, float], tokens_per_s: float, peak: Peak) -> float:
    """The achieved fraction of peak: the time the token's products would take at peak, each in its dtype
    ({"fp32": .., "bf16": ..} FLOPs per token), over the time it took (1 / tokens_per_s).  In fp32 this is
    FLOPs per token x tokens/s / fp32 peak; under bf16-mixed the fp32 recurrence is held to the fp32 peak."""
    ideal = flops_by_dtype.get("fp32", 0.0) / (peak.fp32_gflops * 1e9)
    if flops_by_dtype.get("bf16", 0.0):
        if not peak.bf16_gflops:
            raise LmgridError("fraction of peak: bf16 FLOPs on a CPU without a native bf16 peak")
        ideal += flops_by_dtype["bf16"] / (peak.bf16_gflops * 1e9)
    return ideal * tokens_per_s
