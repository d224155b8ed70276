"""precision: auto resolves as documented; bf16-mixed trains on a CPU that has native bf16, and on one without it
(there as emulated bf16, which auto never picks).  `.ci/run` runs this file a second time as an AVX2-only machine:
ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN without bf16 kernels) and LMGRID_CPU_FLAGS without avx512_bf16."""
from __future__ import annotations

import contextlib
import math

import pytest

from lmgrid.neural import precision as precision_mod
from lmgrid.neural import train as train_mod
from lmgrid.neural.precision import cpu_flags, native_cpu_bf16, resolve_precision

from test_neural_support import tiny_corpus
from test_neural_train import train

NATIVE = bool(native_cpu_bf16())
NO_NATIVE_BF16 = ("this CPU has no native bf16 (avx512_bf16 or amx_bf16 in its flags, or in $LMGRID_CPU_FLAGS, with "
                  "oneDNN not capped below AVX512_CORE_BF16)")
# Whether oneDNN itself lacks bf16 kernels here: the CPU's real flags (no LMGRID_CPU_FLAGS), less any ISA cap.
ONEDNN_WITHOUT_BF16 = not native_cpu_bf16(cpu_flags("/proc/cpuinfo"))
# An AVX2-only x86 CPU, as `lscpu` shows one (a 2-core AMD EPYC without AVX-512, and many laptops).
AVX2_ONLY = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi1 bmi2"


@pytest.mark.parametrize("asked, flags, want", [
    ("auto", {"avx512f", "avx512_bf16"}, "bf16-mixed"),
    ("auto", {"amx_bf16"}, "bf16-mixed"),
    ("auto", {"avx512f", "avx2"}, "32-true"),
    ("auto", set(), "32-true"),
    ("32-true", {"avx512_bf16"}, "32-true"),
    ("bf16-mixed", set(), "bf16-mixed"),
])
def test_auto_picks_bf16_only_where_the_cpu_has_it(asked, flags, want):
    precision, why = resolve_precision(asked, cuda=False, flags=flags)
    assert precision == want and why
    if asked == "auto":
        assert why.startswith("auto:")


def test_cpu_flags_read_from_cpuinfo(tmp_path, monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(f) == {"fpu", "avx512f", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_cpu_flags_override_and_onednn_cap(tmp_path, monkeypatch):
    """LMGRID_CPU_FLAGS replaces /proc/cpuinfo's flags, and ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 takes the bf16
    flags away (oneDNN then has no bf16 kernels).  Negative controls, run here: without either variable a
    cpuinfo that has avx512_bf16 keeps it (kills "the cap removes the flags whatever its value"), and a cap of
    AVX512_CORE_BF16 keeps it (kills "any cap counts as no bf16")."""
    f = tmp_path / "cpuinfo"
    f.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("LMGRID_CPU_FLAGS", "fpu, avx2 fma")
    assert cpu_flags() == {"fpu", "avx2", "fma"} and native_cpu_bf16() == []
    assert cpu_flags(f) == {"fpu", "avx2", "avx512f", "avx512_bf16"}  # a named file is read as it is
    monkeypatch.setenv("LMGRID_CPU_FLAGS", "avx512f avx512_bf16")
    assert native_cpu_bf16() == ["avx512_bf16"]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    assert native_cpu_bf16() == [] and "avx512_bf16" not in cpu_flags(f)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert native_cpu_bf16() == ["avx512_bf16"]


def _downgrade_without_native_bf16(asked, cuda, flags=None):
    """The mutant: an explicit bf16-mixed quietly trained as 32-true where the CPU only emulates bf16."""
    precision, why = resolve_precision(asked, cuda, flags)
    return ("32-true", why) if precision == "bf16-mixed" and not native_cpu_bf16(flags) else (precision, why)


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_explicit_bf16_mixed_trains_on_a_cpu_without_native_bf16(tmp_path, monkeypatch, arch):
    """`precision: bf16-mixed` asked for explicitly on an AVX2-only CPU trains, scores and says that it emulates
    bf16 (the recurrence stays float32, so nn.LSTM needs no oneDNN bf16 primitive).  Negative control, run here:
    kills "an explicit bf16-mixed downgraded to 32-true without native bf16" (metrics.json then says 32-true)."""
    monkeypatch.setenv("LMGRID_CPU_FLAGS", AVX2_ONLY)
    corpus = tiny_corpus(tmp_path)
    metrics, _ = train(corpus, tmp_path / "asked", arch=arch, precision="bf16-mixed")
    assert metrics["precision"] == "bf16-mixed" and "emulates bf16" in metrics["precision_reason"]
    assert math.isfinite(metrics["test"]["ppl"]) and metrics["test"]["ppl"] > 1
    monkeypatch.setattr(train_mod, "resolve_precision", _downgrade_without_native_bf16)
    mutant, _ = train(corpus, tmp_path / "mutant", arch=arch, precision="bf16-mixed")
    assert mutant["precision"] == "32-true"  # the check above would have failed on it


def test_auto_picks_fp32_on_a_cpu_without_native_bf16(tmp_path, monkeypatch):
    """`precision: auto` on an AVX2-only CPU trains in 32-true and says why.  Negative control, run here: kills
    "auto takes bf16-mixed whatever the flags" (metrics.json then says bf16-mixed)."""
    monkeypatch.setenv("LMGRID_CPU_FLAGS", AVX2_ONLY)
    corpus = tiny_corpus(tmp_path)
    metrics, _ = train(corpus, tmp_path / "auto", arch="lstm", precision="auto")
    assert metrics["precision"] == "32-true" and metrics["precision_reason"].startswith("auto: the CPU has no")
    monkeypatch.setattr(precision_mod, "native_cpu_bf16", lambda flags=None: ["avx512_bf16"])  # the mutation
    mutant, _ = train(corpus, tmp_path / "mutant", arch="lstm", precision="auto")
    assert mutant["precision"] == "bf16-mixed"


@pytest.mark.skipif(not ONEDNN_WITHOUT_BF16, reason="oneDNN has bf16 kernels here (avx512_bf16, no ISA cap): "
                    "nn.LSTM runs in bf16, so the float32 recurrence is not what keeps it working")
def test_the_float32_recurrence_is_what_keeps_bf16_mixed_working_without_native_bf16(tmp_path, monkeypatch):
    """Where oneDNN has no bf16 kernels (an AVX2-only CPU, or ONEDNN_MAX_CPU_ISA=AVX2), bf16-mixed trains nn.LSTM
    only because its recurrence runs in float32.  Negative control, run here: kills "fp32_recurrence switched off"
    (autocast left on around nn.LSTM): oneDNN then cannot create its LSTM primitive and training fails."""
    from lmgrid.models import lstm

    corpus = tiny_corpus(tmp_path)
    metrics, _ = train(corpus, tmp_path / "ok", arch="lstm", precision="bf16-mixed")
    assert metrics["precision"] == "bf16-mixed" and metrics["test"]["ppl"] > 1
    monkeypatch.setattr(lstm, "fp32_recurrence", lambda x: contextlib.nullcontext())
    with pytest.raises(RuntimeError, match="primitive"):
        train(corpus, tmp_path / "mutant", arch="lstm", precision="bf16-mixed")


@pytest.mark.skipif(not NATIVE, reason=NO_NATIVE_BF16)
@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_bf16_mixed_trains_on_this_cpu_and_says_so(tmp_path, arch):
    """auto picks bf16-mixed here and says why; same seed and batches, the bf16 run is a rounding of the fp32 one,
    not another model: its test PPL is nearer the fp32 run's than a quarter of the distance between two other
    seeds' fp32 models (the yardstick of "another model", measured here, not a fixed percentage: on the tiny corpus
    another seed lands 2-4% away, inside the 5% this test used to allow; bf16 lands 0.002-0.04% away).
    Negative control, run here: the mutation "the bf16 run is another model" (seed 2's fp32 run in its place) must
    fail the same bound."""
    corpus = tiny_corpus(tmp_path)
    extra = {"heads": 2} if arch == "transformer" else {}
    metrics, _ = train(corpus, tmp_path, arch=arch, precision="auto", epochs=1, **extra)
    assert metrics["precision"] == "bf16-mixed" and "avx512_bf16" in metrics["precision_reason"]
    ppl = {seed: train(corpus, tmp_path / f"fp32_s{seed}", arch=arch, precision="32-true", epochs=1, seed=seed,
                       **extra)[0]["test"]["ppl"] for seed in (1, 2, 3)}
    bound = abs(ppl[3] - ppl[2]) / 4

    def a_rounding_of_the_fp32_run(test_ppl):
        return abs(test_ppl - ppl[1]) < bound

    assert a_rounding_of_the_fp32_run(metrics["test"]["ppl"]), (metrics["test"]["ppl"], ppl)
    assert not a_rounding_of_the_fp32_run(ppl[2])  # the control: another model


@pytest.mark.skipif(not NATIVE, reason=NO_NATIVE_BF16)
def test_a_bf16_model_scores_again_to_its_test_ppl(tmp_path):
    """A bf16-mixed run scores valid and test in its own precision and model.ckpt records it, so `lmgrid score`
    (lmgrid.lm) rescoring the test split gives the run's test_ppl.  Kills: the final scoring left in fp32 (seen
    failing with train.py's autocast forced to 32-true), and the precision not saved with the model, i.e. the model
    rescored in fp32 (the negative control below: it misses test_ppl by more than 5 x 1e-6)."""
    from lmgrid.lm import load, score_file

    corpus = tiny_corpus(tmp_path)
    metrics, run_dir = train(corpus, tmp_path, arch="lstm", precision="bf16-mixed", epochs=1)
    model = load(run_dir)
    assert model.precision == "bf16-mixed"
    test_ppl = metrics["test"]["ppl"]
    assert score_file(model, corpus["paths"]["test"])["ppl"] == pytest.approx(test_ppl, rel=1e-6)
    # valid_ppl comes from the best epoch's validation (Lightning's bf16-mixed autocast), not a second pass: the
    # same number as scoring again in the run's precision.
    assert score_file(model, corpus["paths"]["valid"])["ppl"] == pytest.approx(metrics["valid"]["ppl"], rel=1e-6)
    # The control: the model rescored in fp32 misses test_ppl by more than five times the 1e-6 allowed above (measured
    # 2e-5 against 8e-8 for the bf16 rescoring), so the tolerance is what tells the two apart.
    model.precision = "32-true"
    assert abs(score_file(model, corpus["paths"]["test"])["ppl"] - test_ppl) / test_ppl > 5 * 1e-6


# GPUs as torch 2.13 describes them: is_bf16_supported(including_emulation=True), its default, is true on a V100 or
# T4 too (bf16 is emulated there); only compute capability 8.0 and later compute it natively.
GPUS = {"A100": (8, 0), "H100": (9, 0), "V100": (7, 0), "T4": (7, 5)}


def fake_gpu(monkeypatch, name: str) -> None:
    import torch

    major, minor = GPUS[name]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"NVIDIA {name}")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: major >= 8 or including_emulation)


def gpu_choices(monkeypatch) -> dict[str, tuple[str, str]]:
    choices = {}
    for name in GPUS:
        fake_gpu(monkeypatch, name)
        choices[name] = resolve_precision("auto", cuda=True)
    return choices


def wrong_gpu_choices(choices: dict[str, tuple[str, str]]) -> list[str]:
    """What is wrong with `precision: auto`'s choice per GPU: bf16 exactly where it is native, a reason that says so."""
    wrong = []
    for name, (precision, why) in choices.items():
        native = GPUS[name] >= (8, 0)
        if precision != ("bf16-mixed" if native else "32-true"):
            wrong.append(f"{name}: {precision}")
        cc = ".".join(map(str, GPUS[name]))
        if not (why.startswith("auto:") and name in why and cc in why
                and ("computes bf16 natively" if native else "no native bf16") in why):
            wrong.append(f"{name}: {why!r}")
    return wrong


def test_auto_on_a_gpu_picks_bf16_only_where_it_is_native(monkeypatch):
    """torch.cuda monkeypatched as an A100, H100, V100 and T4.  Kills: asking is_bf16_supported() with its default
    including_emulation=True (the negative control: that version of precision.gpu_bf16 picks bf16-mixed on the V100
    and T4 and says they compute it natively)."""
    import torch

    import lmgrid.neural.precision as precision_mod

    assert wrong_gpu_choices(gpu_choices(monkeypatch)) == []
    fake_gpu(monkeypatch, "V100")
    precision, why = resolve_precision("bf16-mixed", cuda=True)
    assert precision == "bf16-mixed" and "emulates bf16" in why and "V100" in why

    def emulation_counts():
        major, minor = torch.cuda.get_device_capability()
        return torch.cuda.is_bf16_supported(), f"{torch.cuda.get_device_name()} (compute capability {major}.{minor})"

    monkeypatch.setattr(precision_mod, "gpu_bf16", emulation_counts)
    wrong = wrong_gpu_choices(gpu_choices(monkeypatch))
    assert "V100: bf16-mixed" in wrong and "T4: bf16-mixed" in wrong


def test_full_fp32_pins_ieee_and_restores_the_callers_settings():
    """cuDNN's RNN kernels default to TF32 (torch.backends.cudnn.rnn.fp32_precision is "tf32" in torch 2.13): inside
    full_fp32 every float32 setting reads "ieee", and afterwards the caller's values are back.  Kills: full_fp32 as a
    no-op (the negative control: a nullcontext leaves cudnn.rnn at "tf32", which this test reads)."""
    import contextlib

    import torch

    from lmgrid.neural.precision import FP32_SETTINGS, fp32_settings, full_fp32

    def check(context) -> list[str]:
        wrong = []
        torch.backends.cudnn.rnn.fp32_precision = "tf32"
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        try:
            with context():
                inside = {**fp32_settings("cuda"), **fp32_settings("cpu")}
                wrong += [f"{k}={v}" for k, v in inside.items() if v != "ieee"]
            if (torch.backends.cudnn.rnn.fp32_precision, torch.backends.cuda.matmul.fp32_precision) != ("tf32",) * 2:
                wrong.append("not restored")
        finally:
            torch.backends.cudnn.rnn.fp32_precision = "tf32"  # torch's default
            torch.backends.cuda.matmul.fp32_precision = "none"
        return wrong

    assert set(FP32_SETTINGS["cuda"]) == {"cuda.matmul", "cudnn.rnn"}
    assert check(full_fp32) == []
    assert "cudnn.rnn=tf32" in check(contextlib.nullcontext)
