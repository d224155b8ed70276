"""precision: auto resolves as documented; bf16-mixed trains on a CPU that has native bf16 (skips elsewhere)."""
from __future__ import annotations

import pytest

from lmgrid.neural.precision import cpu_flags, resolve_precision

from test_neural_support import tiny_corpus
from test_neural_train import train

NATIVE = bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


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


def test_cpu_flags_read_from_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(f) == {"fpu", "avx512f", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


@pytest.mark.skipif(not NATIVE, reason="this CPU has no avx512_bf16 or amx_bf16")
@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_bf16_mixed_trains_on_this_cpu_and_says_so(tmp_path, arch):
    corpus = tiny_corpus(tmp_path)
    extra = {"heads": 2} if arch == "transformer" else {}
    metrics, _ = train(corpus, tmp_path, arch=arch, precision="auto", epochs=1, **extra)
    assert metrics["precision"] == "bf16-mixed" and "avx512_bf16" in metrics["precision_reason"]
    fp32, _ = train(corpus, tmp_path / "fp32", arch=arch, precision="32-true", epochs=1, **extra)
    # Same seed and batches: the bf16 run is a rounding of the fp32 one, not another model.
    assert metrics["test"]["ppl"] == pytest.approx(fp32["test"]["ppl"], rel=0.05)


@pytest.mark.skipif(not NATIVE, reason="this CPU has no avx512_bf16 or amx_bf16")
def test_a_bf16_model_scores_again_to_its_test_ppl(tmp_path):
    """A bf16-mixed run scores valid and test in its own precision and model.ckpt records it, so `lmgrid score`
    (lmgrid.lm) rescoring the test split gives the run's test_ppl.  Kills: the final scoring left in fp32 (seen
    failing with train.py's autocast forced to 32-true), and the precision not saved with the model, i.e. the model
    rescored in fp32 (the negative control below: it misses test_ppl at 1e-6)."""
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
    model.precision = "32-true"
    assert score_file(model, corpus["paths"]["test"])["ppl"] != pytest.approx(test_ppl, rel=1e-6)
