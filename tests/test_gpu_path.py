"""The GPU path of one training run, tested on the CPU (issue 30): no GPU for `accelerator: gpu` is one line, the
workflow's placement is obeyed, a checkpoint is resumed only on the device kind and precision it was trained in,
and float32 is IEEE float32 (TF32 off) and recorded in metrics.json."""
from __future__ import annotations

import contextlib

import pytest
import torch

from lmgrid import cli
from lmgrid.common.errors import LmgridError
from lmgrid.neural import train as train_mod
from lmgrid.run.spec import RunSpec
from lmgrid.neural.precision import fp32_settings
from lmgrid.run.key import normalise

from test_neural_support import killed_at_epoch, tiny_corpus
from test_neural_train import train

NO_GPU = "train.accelerator: 'gpu' asks for a GPU, but none is visible"


def old_use_cuda(accelerator: str) -> bool:
    """lmgrid before issue 30: `gpu` without a GPU meant the CPU."""
    return accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()


def test_accelerator_gpu_without_a_gpu_is_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """torch.cuda.is_available() monkeypatched to False.  Kills: `gpu` quietly training on the CPU (the negative
    control: old_use_cuda in place of use_cuda trains the run to the end and writes metrics.json)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    corpus = tiny_corpus(tmp_path)
    with pytest.raises(LmgridError, match="^" + NO_GPU) as e:
        train(corpus, tmp_path / "a", accelerator="gpu")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "a").exists()  # neither a run folder nor a checkpoint folder

    p = corpus["paths"]
    argv = ["train", "--arch", "lstm", "--n-step", "3", "--train", p["train"], "--valid", p["valid"], "--test",
            p["test"], "--vocab", corpus["vocab_path"], "--run-dir", str(tmp_path / "b" / "run"), "--ckpt-dir",
            str(tmp_path / "b" / "ckpt"), "--set", "accelerator=cuda"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lmgrid: error: train.accelerator: 'cuda' asks for a GPU"), err

    monkeypatch.setattr(train_mod, "use_cuda", old_use_cuda)
    metrics, run_dir = train(corpus, tmp_path / "c", accelerator="gpu")
    assert metrics["device"].startswith("cpu") and (run_dir / "metrics.json").is_file()


def test_auto_uses_a_visible_gpu_and_cpu_never(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train_mod.use_cuda("auto") and train_mod.use_cuda("gpu") and not train_mod.use_cuda("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not train_mod.use_cuda("auto") and not train_mod.use_cuda("cpu")


@pytest.mark.parametrize("placement, hp, match", [
    ("cuda 32-true", {}, "^" + NO_GPU),  # the workflow planned a GPU: no quiet CPU run either
    ("cpu bf16-mixed", {"precision": "32-true"}, "^precision: the workflow planned bf16-mixed for this run, but "
                                                 "here it resolves to 32-true"),
    ("tpu 32-true", {}, r"^placement: expected '<cpu\|cuda> <32-true\|bf16-mixed\|auto>', got 'tpu 32-true'"),
])
def test_a_placement_the_run_cannot_keep_is_one_line(tmp_path, monkeypatch, placement, hp, match):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    corpus = tiny_corpus(tmp_path)
    with pytest.raises(LmgridError, match=match):
        train_mod.run(RunSpec.build(arch="lstm", impl="torch", n_step=3, layers=1, regime="window", seed=1,
                                    corpus="c", train={"epochs": 1, **hp}, paths=corpus["paths"],
                                    vocab=corpus["vocab_path"], run_dir=str(tmp_path / "run"),
                                    ckpt_dir=str(tmp_path / "ckpt"), placement=train_mod.parse_placement(placement)))
    assert not (tmp_path / "run").exists() and not (tmp_path / "ckpt").exists()


def test_a_checkpoint_resumes_only_in_the_precision_it_was_trained_in(tmp_path, monkeypatch, capsys):
    """`precision: auto` interrupted where it resolved to 32-true (a CPU without bf16), run again where it resolves
    to bf16-mixed (another machine): the checkpoint is discarded, the run starts over, and does not switch precision
    mid-run.  Kills: a fingerprint without the resolved precision and device kind (the negative control: with
    _fingerprint ignoring its placement argument, the second run resumes)."""
    corpus = tiny_corpus(tmp_path)
    real = train_mod.resolve_precision

    def as_if(precision):
        return lambda asked, cuda, *a, **k: (precision, f"auto: test, {precision}") if asked == "auto" else real(
            asked, cuda, *a, **k)

    def interrupted_then_elsewhere(root) -> str:
        monkeypatch.setattr(train_mod, "resolve_precision", as_if("32-true"))
        with killed_at_epoch(1):
            train(corpus, root, precision="auto", epochs=2)
        ckpt = root / "ckpt" / normalise("lstm", "torch", 3, 1, "window", 1).run_dir("c") / "last.ckpt"
        assert ckpt.is_file()
        capsys.readouterr()
        monkeypatch.setattr(train_mod, "resolve_precision", as_if("bf16-mixed"))
        metrics, _ = train(corpus, root, precision="auto", epochs=2)
        assert metrics["precision"] == "bf16-mixed"
        return capsys.readouterr().out

    out = interrupted_then_elsewhere(tmp_path / "real")
    assert "its checkpoint belongs to another config or corpus" in out and "from scratch" in out, out

    real_fingerprint = train_mod._fingerprint
    monkeypatch.setattr(train_mod, "_fingerprint", lambda spec, placement: real_fingerprint(spec, {}))
    assert "resuming from" in interrupted_then_elsewhere(tmp_path / "mutant")


def test_float32_is_ieee_during_the_run_and_metrics_json_says_so(tmp_path, monkeypatch):
    """The caller's process leaves cuDNN's RNNs and CUDA matmuls at TF32; during a run both read "ieee", after it
    the caller's settings are back, and metrics.json records the settings of the device it trained on (the CPU's
    oneDNN ones, or CUDA's on a GPU machine).  Kills: train.run without full_fp32 (the negative control: with full_fp32 replaced by a
    nullcontext, the run sees cudnn.rnn "tf32")."""
    corpus = tiny_corpus(tmp_path)
    seen = []
    real_build = train_mod.build

    def spy(*args, **kwargs):  # the run's first step, inside run's full_fp32
        seen.append(fp32_settings("cuda"))
        return real_build(*args, **kwargs)

    monkeypatch.setattr(train_mod, "build", spy)
    rnn, matmul = torch.backends.cudnn.rnn, torch.backends.cuda.matmul
    before = rnn.fp32_precision, matmul.fp32_precision
    rnn.fp32_precision = matmul.fp32_precision = "tf32"
    try:
        metrics, _ = train(corpus, tmp_path / "a")
        assert seen[-1] == {"cuda.matmul": "ieee", "cudnn.rnn": "ieee"}
        # accelerator auto: the GPU where there is one (make gpu-check), else the CPU's oneDNN
        assert metrics["fp32_precision"] == ({"cuda.matmul": "ieee", "cudnn.rnn": "ieee"} if torch.cuda.is_available()
                                             else {"mkldnn.matmul": "ieee", "mkldnn.rnn": "ieee"})
        assert (rnn.fp32_precision, matmul.fp32_precision) == ("tf32", "tf32")

        monkeypatch.setattr(train_mod, "full_fp32", contextlib.nullcontext)
        train(corpus, tmp_path / "b")
        assert seen[-1] == {"cuda.matmul": "tf32", "cudnn.rnn": "tf32"}
    finally:
        rnn.fp32_precision, matmul.fp32_precision = before
