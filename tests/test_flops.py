"""FLOPs per token (lmgrid.models.flops) against a hand computation and against FlopCounterMode on the real modules,
one core's peak from the ISA flags (lmgrid.bench.peak), and the archs bench skipping bf16 where the CPU emulates it."""
from __future__ import annotations

import argparse
import math

import pytest
import torch

from lmgrid.bench import archs, peak
from lmgrid.bench.flops import check_row
from lmgrid.models import flops
from lmgrid.models.flops import TRAIN_FACTOR, cluster_fractions, flops_per_token
from lmgrid.run.spec import model_config_defaults

# Distinct sizes, so that a swapped dimension changes the count: V 60, emb 6, hidden 8, 2 layers, bptt 5.
V, E, H, L, T, N_STEP = 60, 6, 8, 2, 5, 4
CUTS, FRACS = [10, 30], [0.25, 0.125]


def cfg_of(arch, impl="torch", **kw):
    kw = {"vocab_size": V, "emb_dim": E, "hidden_dim": H, "layers": L, "n_step": N_STEP, "heads": 2,
          "output_layer": "full", "cutoffs": [], **kw}
    return model_config_defaults(arch=arch, impl=impl, **kw)


def recurrent(gates, steps=1):
    """Per token: gates x (in + hidden) x hidden x 2 per layer (layer 0's input is the embedding)."""
    return steps * (gates * (E + H) * H * 2 + gates * (H + H) * H * 2)


FULL = H * V * 2  # the untied full softmax: hidden -> V
# Adaptive, untied: head (10 words + 2 clusters) for every token; tail i (projection H -> H // 4^i, at least 1,
# then its words) for its share of the tokens.
ADAPTIVE = H * (10 + 2) * 2 + FRACS[0] * (H * 2 * 2 + 2 * 20 * 2) + FRACS[1] * (H * 1 * 2 + 1 * 30 * 2)


def transformer_stream(causal=True):
    positions = 2 * T  # the chunk and the bptt tokens before it (context_len = bptt)
    # Every block but the last at every position; the last: keys and values at every position, its query,
    # output projection and MLP at the chunk's T positions only (the ones predicted).
    blocks = (L - 1) * positions * (3 * H * H + H * H + 4 * H * H + 4 * H * H) * 2 \
        + positions * 2 * H * H * 2 + T * (H * H + H * H + 4 * H * H + 4 * H * H) * 2
    pairs = (L - 1) * (positions * (positions + 1) / 2 if causal else positions ** 2)
    pairs += sum(p + 1 for p in range(T, positions)) if causal else T * positions  # last block, queries T..2T-1
    return (blocks + 2 * pairs * H * 2) / T


HAND = {  # name -> (config, regime, forward FLOPs per token written from the formula)
    "rnn": (cfg_of("rnn"), "stream", recurrent(1) + FULL),
    "lstm torch": (cfg_of("lstm"), "stream", recurrent(4) + FULL),
    "lstm cell": (cfg_of("lstm", "cell"), "stream", recurrent(4) + FULL),
    "lstm concat": (cfg_of("lstm", "concat"), "stream", recurrent(4) + FULL),
    "lstm window": (cfg_of("lstm"), "window", recurrent(4, steps=N_STEP - 1) + FULL),
    "gru torch": (cfg_of("gru"), "stream", recurrent(3) + FULL),
    "gru cell": (cfg_of("gru", "cell"), "stream", recurrent(3) + FULL),
    "ffnn": (cfg_of("ffnn"), "window", (N_STEP - 1) * E * H * 2 + H * H * 2 + FULL),
    "ffnn direct": (cfg_of("ffnn", direct=True), "window",
                    (N_STEP - 1) * E * H * 2 + H * H * 2 + FULL + (N_STEP - 1) * E * V * 2),
    "transformer": (cfg_of("transformer", context_len=T, max_len=2 * T), "stream", transformer_stream() + FULL),
    "lstm adaptive": (cfg_of("lstm", output_layer="adaptive", cutoffs=CUTS), "stream", recurrent(4) + ADAPTIVE),
    # tied, emb 6 != hidden 8: a projection hidden -> emb first, then emb -> V
    "lstm tied": (cfg_of("lstm", tie_weights=True), "stream", recurrent(4) + H * E * 2 + E * V * 2),
}


@pytest.mark.parametrize("name", list(HAND))
def test_analytic_count_equals_the_hand_computation(name):
    """Kills: a term dropped from the count (the recurrent product W_hh h, the output layer, the FFNN's direct
    connections, the tied projection, the Transformer's context positions) or a gate count wrong."""
    cfg, regime, expected = HAND[name]
    count = flops_per_token(cfg, regime, T, FRACS if cfg.output_layer == "adaptive" else None)
    assert count.forward == pytest.approx(expected, rel=1e-12)
    assert count.eval == count.forward and count.train == TRAIN_FACTOR * count.forward


def test_the_hand_computation_sees_a_dropped_recurrent_product(monkeypatch):
    """Negative control: with the hidden-to-hidden product dropped from the count, the LSTM no longer matches."""
    cfg, regime, expected = HAND["lstm torch"]

    def input_only(cfg):
        return float(sum(2 * 4 * cfg.hidden_dim * (cfg.emb_dim if k == 0 else cfg.hidden_dim)
                         for k in range(cfg.layers)))

    monkeypatch.setattr(flops, "recurrence_flops", input_only)
    assert flops_per_token(cfg, regime, T).forward != pytest.approx(expected, rel=1e-12)


def test_cluster_fractions_from_counts():
    """Kills: the tail shares taken over the wrong ids (the head counted in, or the last cluster cut short)."""
    counts = [5] * 10 + [1] * 20 + [2] * 30  # 50 in the head, 20 in [10, 30), 60 in [30, 60)
    assert cluster_fractions(counts, CUTS) == pytest.approx([20 / 130, 60 / 130])


SMALL = argparse.Namespace(vocab=V, width=H, bptt=T)


def agrees(row) -> bool:
    """Forward to the FLOP; training between TRAIN_FACTOR x forward less the skipped dL/dh_0 products and it."""
    return (row["counted_forward"] == pytest.approx(row["analytic_forward"], rel=1e-9)
            and row["analytic_train"] - row["train_tolerance"] - 1e-6 <= row["counted_train"]
            <= row["analytic_train"] + 1e-6)


@pytest.mark.parametrize("output_layer", ["full", "adaptive"])
@pytest.mark.parametrize("name", list(archs.MODELS))
def test_analytic_count_matches_flop_counter(name, output_layer):
    """The bench's models at small sizes, one real batch forward and backward under FlopCounterMode.  Kills: the
    analytic formula drifting from the module (a product added to or widened in a model and not in the count, or
    the reverse)."""
    cfg = archs.model_config(name, output_layer, SMALL, CUTS)
    assert agrees(check_row(cfg, archs.MODELS[name][3], T, rows=2))


def test_flop_counter_check_in_the_window_regime():
    """A recurrent model on windows: n_step - 1 steps from zero per target.  Kills: the window's steps not counted."""
    assert agrees(check_row(cfg_of("gru", output_layer="adaptive", cutoffs=CUTS), "window", T, rows=3))


def test_flop_counter_check_sees_a_drifted_formula(monkeypatch):
    """Negative control: an LSTM counted with 3 gates (as if its formula had drifted) fails the check."""
    cfg = archs.model_config("LSTM (cell)", "full", SMALL, CUTS)
    monkeypatch.setitem(flops.GATES, "lstm", 3)
    assert not agrees(check_row(cfg, "stream", T, rows=2))


CLOCK = (2.0, "test")


def test_peak_from_the_isa_flags():
    """fp32: 2 FMA units x 16 lanes (avx512f) or 8 (avx2 + fma) x 2 FLOPs x GHz; bf16 only where native.  Kills:
    the lanes of avx2 and avx512 confused, the FMA's 2 FLOPs or the units left out, a bf16 peak on a CPU without
    native bf16."""
    avx2 = peak.core_peak({"avx", "avx2", "fma"}, 2, CLOCK)
    assert (avx2.lanes, avx2.fp32_gflops, avx2.bf16_gflops) == (8, 2 * 8 * 2 * 2.0, None)
    avx512 = peak.core_peak({"avx2", "fma", "avx512f"}, 2, CLOCK)
    assert (avx512.lanes, avx512.fp32_gflops, avx512.bf16_gflops) == (16, 2 * 16 * 2 * 2.0, None)
    assert peak.core_peak({"avx2", "fma", "avx512f", "avx512_bf16"}, 2, CLOCK).bf16_gflops == 2 * 32 * 2 * 2.0
    assert peak.core_peak({"avx512f", "avx512_bf16", "amx_bf16"}, 2, CLOCK).bf16_gflops == 2048 * 2.0
    assert peak.core_peak({"avx512f"}, 1, CLOCK).fp32_gflops == 1 * 16 * 2 * 2.0


def test_peak_overrides_and_clock_source(monkeypatch, tmp_path):
    """$LMGRID_FMA_UNITS and $LMGRID_CPU_GHZ override; without them the clock is the sysfs maximum, else cpuinfo's
    MHz, and the source says which.  Kills: an override ignored, the clock read in the wrong unit."""
    info, freq = tmp_path / "cpuinfo", tmp_path / "max_freq"
    info.write_text("processor\t: 0\ncpu MHz\t\t: 2599.998\nflags\t\t: avx2 fma\n")
    assert peak.clock_ghz(info, freq) == (pytest.approx(2.599998), f"{info} cpu MHz (the clock now)")
    freq.write_text("3500000\n")
    assert peak.clock_ghz(info, freq)[0] == pytest.approx(3.5)
    monkeypatch.setenv(peak.CLOCK_ENV, "1.5")
    monkeypatch.setenv(peak.FMA_UNITS_ENV, "1")
    p = peak.core_peak({"avx2", "fma"})
    assert (p.ghz, p.fma_units, p.fp32_gflops) == (1.5, 1, 1 * 8 * 2 * 1.5)


def test_fraction_of_peak_holds_each_dtype_to_its_peak():
    """fp32: FLOPs x tokens/s / peak; bf16-mixed: the fp32 part's time at the fp32 peak plus the bf16 part's at the
    bf16 peak.  Kills: the bf16 share held to the fp32 peak."""
    p = peak.core_peak({"avx512f", "avx512_bf16"}, 2, CLOCK)  # fp32 128, bf16 256 GFLOP/s
    assert peak.fraction_of_peak({"fp32": 1e6}, 64e3, p) == pytest.approx(0.5)
    assert peak.fraction_of_peak({"fp32": 1e6, "bf16": 2e6}, 32e3, p) == pytest.approx(0.25 + 0.25)


RATE = 1e7  # tokens/s of the stub: large enough that the % of peak prints with 4 digits


def stub_bench(monkeypatch, flags):
    """archs.main at tiny sizes with `flags` as the CPU's, the timing replaced by a recorder of the precisions."""
    monkeypatch.setenv("LMGRID_CPU_FLAGS", flags)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    timed = []

    def record(model, data, regime, bf16, train, warmup, clock=None):
        timed.append(bf16)
        return RATE

    monkeypatch.setattr(archs, "tokens_per_s", record)
    assert archs.main(["--vocab", "50", "--width", "8", "--steps", "1", "--warmup", "1", "--threads", "1",
                       "--models", "LSTM (nn.LSTM)"]) == 0
    return timed


def test_archs_skips_bf16_without_native_bf16(monkeypatch, capsys):
    """On a CPU without avx512_bf16/amx_bf16 the bench times fp32 only and says so in one line.  Kills: timing the
    emulated bf16 (the negative control: with avx512_bf16 in the flags bf16 is timed)."""
    assert True not in stub_bench(monkeypatch, "fpu sse avx avx2 fma")
    out = capsys.readouterr().out
    assert sum(line.startswith("bf16 skipped") for line in out.splitlines()) == 1
    assert "| skipped |" in out and "bf16-mixed" not in out
    assert True in stub_bench(monkeypatch, "fpu avx2 fma avx512f avx512_bf16")
    assert "bf16 skipped" not in capsys.readouterr().out


def test_archs_prints_flops_and_fraction_of_peak(monkeypatch, capsys):
    """Each timed row's MFLOP/token is the analytic training or evaluation count, and its % of peak the stated
    formula.  Kills: the evaluation row given the training count (or the reverse), the fraction off its peak."""
    monkeypatch.setenv(peak.CLOCK_ENV, "2.0")
    stub_bench(monkeypatch, "fpu avx2 fma")  # fp32 peak 2 x 8 x 2 x 2.0 = 64 GFLOP/s
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| LSTM") and len(line.split("|")) == 10]
    cfg = archs.model_config("LSTM (nn.LSTM)", "full", argparse.Namespace(vocab=50, width=8, bptt=35), [])
    per_token = flops_per_token(cfg, "stream", 35).forward
    got = {(r[1], r[3]): (float(r[5]), float(r[7])) for r in rows}
    for phase, factor in (("train", TRAIN_FACTOR), ("eval", 1)):
        mflop, share = got["full", phase]
        assert mflop == pytest.approx(factor * per_token / 1e6, rel=1e-3)
        assert share == pytest.approx(100 * factor * per_token * RATE / 64e9, rel=1e-3)
    assert math.isfinite(got["adaptive", "train"][0])
