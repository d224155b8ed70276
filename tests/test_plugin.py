"""A user's own architecture as an `arch:` (issue 47 item 1; docs/models.md, "Your own model"): how a config names
it, the one-line errors of a bad plug-in before any job, and the plug-in under lmgrid's output layers."""
from __future__ import annotations

import copy
import importlib.metadata
import shutil
from pathlib import Path

import pytest
import torch

from lmgrid.analysis import names, palette
from lmgrid.common import plugins
from lmgrid.common.errors import LmgridError
from lmgrid.orchestration import config as config_mod
from lmgrid.orchestration import plugins as config_plugins
from lmgrid.run.gate_facts import gated_archs
from lmgrid.run.key import RunKey, expand_study
from tinygrid import TINY

PLUGINS = Path(__file__).parent / "plugins"
REF = "plugins/tiny_gated.py:TinyGated"


@pytest.fixture(autouse=True)
def fresh_registry():
    plugins.clear()
    yield
    plugins.clear()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder the workflow would run in, with the test plug-in at plugins/tiny_gated.py."""
    shutil.copytree(PLUGINS, tmp_path / "plugins")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def config_with(arch, regime=("window",)) -> dict:
    cfg = copy.deepcopy(TINY)
    cfg["studies"] = {"ctx": {"arch": ["mkn"], "n_step": [3]},
                      "mine": {"arch": ["rnn", arch], "n_step": [3], "regime": list(regime)}}
    return cfg


def check(cfg: dict) -> dict:
    return config_mod.check(cfg, source="config.yaml", base_dir=".")


def test_the_three_reference_forms_resolve_to_the_plugins_name(workdir, monkeypatch):
    """A file and class, an importable module and class, and an entry point of the group lmgrid.models each become
    the class's lmgrid_name in the studies, with run folders runs/tiny_gated/plugin/...

    Kills: a reference left in the config (run folders named after a path), the entry-point group not read."""
    monkeypatch.syspath_prepend(str(workdir / "plugins"))
    point = importlib.metadata.EntryPoint(name="tiny", value="tiny_gated:TinyGated", group=plugins.ENTRY_POINT_GROUP)
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [point] if kw.get("group") == plugins.ENTRY_POINT_GROUP else real(**kw))
    for ref in (REF, "tiny_gated:TinyGated", "tiny"):
        plugins.clear()
        cfg = check(config_with(ref, ("window", "stream")))
        assert cfg["studies"]["mine"]["arch"] == ["rnn", "tiny_gated"], ref
        keys = expand_study(cfg["studies"]["mine"])
        assert RunKey("tiny_gated", "plugin", 3, 1, "window", 1) in keys
        assert RunKey("tiny_gated", "plugin", 0, 1, "stream", 1).run_dir("tiny") == \
            "results/tiny/runs/tiny_gated/plugin/n0_l1_stream_s1"
        assert plugins.facts("tiny_gated").regimes == ("window", "stream")
    # A name that is neither built in nor a plug-in is still the schema's error.
    with pytest.raises(LmgridError, match="lstmm"):
        check(config_with("lstmm"))


BAD = {
    "not importable": ("import no_such_module_anywhere\n", "cannot import the plug-in (ModuleNotFoundError"),
    "wrong output shape": ("OUT_DIM_EXTRA = 1\n", "expected [2, 1 or 3, out_dim=8]"),
    "name clash": ("LMGRID_NAME = 'lstm'\n", "clashes with a built-in architecture"),
}


def bad_plugin(workdir: Path, preamble: str) -> str:
    """The test plug-in with one thing broken (a preamble the file reads), as plugins/bad.py:TinyGated."""
    text = (workdir / "plugins" / "tiny_gated.py").read_text()
    text = text.replace("import torch\n", "import torch\nOUT_DIM_EXTRA = 0\nLMGRID_NAME = 'tiny_bad'\n" + preamble, 1)
    text = text.replace('lmgrid_name = "tiny_gated"', "lmgrid_name = LMGRID_NAME")
    text = text.replace("hidden = self.drop(x)", "hidden = self.drop(x)\n        hidden = torch.cat([hidden] + "
                        "[hidden[..., :1]] * OUT_DIM_EXTRA, -1)")
    (workdir / "plugins" / "bad.py").write_text(text)
    return "plugins/bad.py:TinyGated"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_plugin_is_one_line_naming_the_key_and_the_value(workdir, case):
    """Kills: a bad plug-in reaching a job (an import error, a shape error in the first training step, a run folder
    of a built-in overwritten), or an error of several lines without the key."""
    preamble, why = BAD[case]
    ref = bad_plugin(workdir, preamble)
    with pytest.raises(LmgridError) as e:
        check(config_with(ref))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"config.yaml: studies.mine.arch[1]: {ref!r}: "), msg
    assert why in msg, msg


def test_a_file_that_is_not_there_is_named(workdir):
    with pytest.raises(LmgridError, match=r"^config\.yaml: studies\.mine\.arch\[1\]: 'plugins/nope\.py:X': "
                                          r"file not found: plugins/nope\.py$"):
        check(config_with("plugins/nope.py:X"))


def test_a_regime_the_plugin_does_not_declare_is_refused(workdir):
    """Kills: a window-only plug-in trained in the stream regime (no detach_state, no causality check)."""
    text = (workdir / "plugins" / "tiny_gated.py").read_text()
    (workdir / "plugins" / "window_only.py").write_text(
        text.replace('lmgrid_regimes = ("window", "stream")', 'lmgrid_regimes = ("window",)'))
    with pytest.raises(LmgridError) as e:
        check(config_with("plugins/window_only.py:TinyGated", ("window", "stream")))
    assert str(e.value) == ("config.yaml: studies.mine.regime: 'stream': plug-in tiny_gated "
                            "(plugins/window_only.py:TinyGated) supports window only (lmgrid_regimes)")


def test_the_wrong_shape_is_caught_by_the_probe_not_by_training(workdir, monkeypatch):
    """The negative control of the probe: with it skipped, the plug-in whose hidden is one unit too wide passes the
    config check, i.e. the error would come from the first training step.  Kills: the probe not run."""
    ref = bad_plugin(workdir, BAD["wrong output shape"][0])
    with pytest.raises(LmgridError, match="out_dim=8"):
        check(config_with(ref))
    plugins.clear()
    monkeypatch.setattr(config_plugins, "probe_all", lambda *a, **k: None)
    cfg = check(config_with(ref))  # the mutation: no error before any job
    assert "tiny_bad" in cfg["studies"]["mine"]["arch"]


@pytest.mark.parametrize("output_layer,tie", [("full", False), ("full", True), ("adaptive", False),
                                              ("adaptive", True)])
@pytest.mark.parametrize("regime", ["window", "stream"])
def test_the_plugin_trains_a_step_under_each_output_layer(workdir, output_layer, tie, regime):
    """PluginLM = the class's features under lmgrid's output layer: every parameter gets a gradient, a step lowers
    the loss on its batch, tying shares the embedding.  Kills: the head not on top, tying ignored, the gates dropped."""
    from lmgrid.models import build_model
    from lmgrid.models.plugin import resolve
    from lmgrid.neural.module import batch_nll
    from lmgrid.run.spec import model_config_defaults

    resolve(REF)
    vocab = 20
    cfg = model_config_defaults(arch="tiny_gated", impl="plugin", vocab_size=vocab, emb_dim=8, hidden_dim=8,
                                layers=2, n_step=4, tie_weights=tie, output_layer=output_layer,
                                cutoffs=[6, 12] if output_layer == "adaptive" else [], dropout=0.0)
    model = build_model(cfg)
    if tie:  # the plug-in's own embedding is the output layer's word matrix
        tied = model.head.decoder.weight if output_layer == "full" else model.head._tied[0].weight
        assert tied is model.body.embedding.weight
    g = torch.Generator().manual_seed(1)
    if regime == "window":
        x, y = torch.randint(0, vocab, (16, 3), generator=g), torch.randint(0, vocab, (16,), generator=g)
    else:
        x, y = torch.randint(0, vocab, (4, 7), generator=g), torch.randint(0, vocab, (4, 7), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    nll, count, _ = batch_nll(model, x, y, regime)
    (nll / count).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    opt.step()
    with torch.no_grad():
        after, _, _ = batch_nll(model, x, y, regime)
    assert after < nll
    _, _, gates = model(x, return_gates=True)
    assert set(gates) == {"a"} and gates["a"].shape[:3] == (2, x.shape[0], x.shape[1])


def test_a_gated_plugin_is_in_the_gated_set_with_its_display_name_and_own_colour(workdir):
    """Kills: the gated set without plug-ins (no gates.csv, no gate figures), a plug-in shown by its raw id, a
    fallback colour too close to a built-in's (the old #66CCEE beside lstm/cell's #88CCEE)."""
    from lmgrid.analysis.layout import gated_models

    assert "tiny_gated" not in gated_archs()
    check(config_with(REF))
    assert "tiny_gated" in gated_archs()
    assert gated_models([RunKey("tiny_gated", "plugin", 3, 1, "window", 1)]) == [("tiny_gated", "plugin")]
    assert names.display("tiny_gated") == "Tiny gated"
    assert RunKey("tiny_gated", "plugin", 3, 1, "window", 1).name == "tiny_gated n3 l1 window s1"
    for c in palette.FALLBACK:
        for model, own in palette.MODEL_COLOURS.items():
            d = sum((x - y) ** 2 for x, y in zip(palette.rgb(c), palette.rgb(own))) ** 0.5
            assert d >= palette.MIN_DISTANCE, (c, model, own)
    assert palette.colour("tiny_gated") in palette.FALLBACK


def test_the_facts_reach_a_child_process_through_the_environment(workdir):
    """A job the workflow starts (lmgrid summary) knows the plug-in's gates and name without importing it.
    Kills: the registry kept in the Snakemake process only (gates.csv never read, raw ids in the tables)."""
    import subprocess
    import sys

    check(config_with(REF))
    code = ("from lmgrid.run.gate_facts import gated_archs; from lmgrid.analysis.names import display; "
            "import sys; print(gated_archs(), display('tiny_gated'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "('lstm', 'gru', 'tiny_gated') Tiny gated False"
