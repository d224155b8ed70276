"""The run spec (lmgrid.run.spec): one file per neural cell holds every setting of the run, read back exactly or
refused on one line; the settings it says change results are the checkpoint fingerprint's and the rerun triggers'."""
from __future__ import annotations

import json

import pytest

from lmgrid.common.errors import LmgridError
from lmgrid.run.settings import COMPUTING, DEFAULTS, MODEL_KEYS, NEUTRAL_DEFAULTS
from lmgrid.run import spec as spec_mod
from lmgrid.run.spec import CONTRACT_1_TRIGGERS, NO_PARAM, RunSpec, model_config_defaults, spec_path
from lmgrid.run.key import RunKey
from lmgrid.run.schema import train_settings


def cell(**train) -> RunSpec:
    return RunSpec.build(arch="gru", impl="torch", n_step=3, layers=1, regime="window", seed=1, corpus="tiny",
                         train=train, placement=("cpu", "32-true"))


def test_a_spec_reads_back_as_it_was_written(tmp_path):
    """Kills: a field lost or changed on the way through the file (e.g. live_mlflow or placement not written)."""
    spec = RunSpec.build(arch="rnn", impl="torch", n_step=5, layers=2, regime="stream", seed=3, corpus="tiny",
                         train={"lr": 0.02, "per_arch": {"rnn": {"hidden_dim": 12}}}, placement=("cuda", "auto"),
                         live_mlflow={"tracking_uri": "http://x", "experiment_name": "tiny-live"})
    path = tmp_path / "s.json"
    assert spec.write(path) is True
    assert RunSpec.read(path) == spec
    assert spec.n_step == 0 and spec.hparams["lr"] == 0.02 and spec.hparams["hidden_dim"] == 12  # the RunKey's
    assert spec.live_mlflow["run_name"] == "rnn n0 l2 stream s3"
    assert spec.live_mlflow["tags"]["lmgrid.run_key"] == "results/tiny/runs/rnn/torch/n0_l2_stream_s3"
    assert spec.ckpt_dir == "results/tiny/ckpt/runs/rnn/torch/n0_l2_stream_s3"
    assert spec_path(spec, "tiny") == "results/tiny/specs/runs/rnn/torch/n0_l2_stream_s3.json"


def test_write_leaves_an_unchanged_file_alone(tmp_path):
    """The workflow writes every spec each time jobs start, only when its content changed.  Kills: a write that
    always rewrites (the file's mtime moves)."""
    path = tmp_path / "s.json"
    assert cell().write(path)
    stamp = path.stat().st_mtime_ns
    assert cell().write(path) is False and path.stat().st_mtime_ns == stamp
    assert cell(lr=0.1).write(path) is True and RunSpec.read(path).hparams["lr"] == 0.1


def test_hparams_are_every_schema_setting_from_its_defaults():
    """Kills: a spec that leaves out settings, or takes a default from anywhere but the schema."""
    hp = cell().hparams
    assert set(hp) == set(train_settings())
    assert hp == {k: s["default"] for k, s in train_settings().items()}


def _broken(tmp_path, change) -> str:
    data = cell().to_dict()
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data) if isinstance(data, dict) else data)
    with pytest.raises(LmgridError) as e:
        RunSpec.read(path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


@pytest.mark.parametrize("change, field", [
    (lambda d: d.pop("seed"), "seed: required field is missing"),
    (lambda d: d.update(colour="red"), "colour: unknown field"),
    (lambda d: d.update(version=0), "version: 0 is not"),
    (lambda d: d.pop("version"), "version: None is not"),
    (lambda d: d.update(n_step="3"), "n_step: '3' has the wrong type"),
    (lambda d: d["hparams"].pop("lr"), "hparams.lr: required training setting is missing"),
    (lambda d: d["hparams"].update(lrr=1), "train.lrr: unknown training setting"),
    (lambda d: d["hparams"].update(lr="fast"), "hparams: train.lr"),
    (lambda d: d["paths"].pop("test"), "paths: expected a file for each of train, valid, test"),
    (lambda d: d.update(placement={"device": "tpu", "precision": "32-true"}), "placement: expected"),
    (lambda d: d.update(live_mlflow={"experiment_name": "x"}), "live_mlflow: expected"),
])
def test_a_bad_spec_is_one_line_naming_the_file_and_field(tmp_path, change, field):
    """Kills: a malformed, older or foreign spec file read as if it were whole (a missing setting would silently
    take some default)."""
    assert field in _broken(tmp_path, change)


def test_a_file_that_is_not_json_is_one_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(LmgridError, match=f"^{path}") as e:
        RunSpec.read(path)
    assert "\n" not in str(e.value)


def test_computing_is_what_the_fingerprint_hashed_before_the_spec():
    """spec.computing() is the dict neural/train.py's fingerprint hashed before the spec existed: every setting not
    marked x-changes-results: false, less the x-neutral-default ones at their default.  Kills: a computing() that
    keeps a setting at its neutral default (in-progress checkpoints would stop resuming) or keeps log_every."""
    hp = cell().hparams
    assert cell().computing() == {k: v for k, v in hp.items() if k in COMPUTING and k not in NEUTRAL_DEFAULTS}
    assert "output_layer" not in cell().computing() and cell(output_layer="adaptive").computing()[
        "output_layer"] == "adaptive"
    assert "log_every" not in cell(log_every=7).computing()


# The train rule's params of every grid finished before the run spec: one "key=<json>" per setting that changes
# results, for these 32 keys (workflow/rules/common.smk's SETTING_PARAMS, with COMPUTING as it was then).
TODAY = ["epochs", "batch_size", "stream_batch_size", "eval_batch_size", "stream_eval_batch_size", "bptt",
         "max_train_tokens", "optimizer", "lr", "momentum", "weight_decay", "clip", "lr_decay", "lr_decays",
         "plateau_patience", "plateau_min_delta", "lr_decay_from_epoch", "average_from_epoch", "min_lr", "emb_dim",
         "hidden_dim", "dropout", "tie_weights", "weight_drop", "activation", "direct", "heads", "output_layer",
         "init_range", "residual", "precision", "deterministic"]


def test_trigger_params_are_todays_for_the_contract_1_keys():
    """Kills: a contract-1 key dropped from the triggers at its (neutral) default, a changed value format, or a
    key added (each would rerun every finished cell)."""
    assert list(CONTRACT_1_TRIGGERS) == TODAY and len(TODAY) == 32
    hp = cell().hparams
    assert cell().trigger_params() == {k: f"{k}={json.dumps(hp[k])}" for k in TODAY}
    assert cell(lr=0.02).trigger_params()["lr"] == "lr=0.02"
    assert cell().placement_param() == "placement=cpu 32-true"


def test_a_setting_added_later_is_a_trigger_only_off_its_neutral_default(monkeypatch):
    """A setting added to the schema after contract 1, marked x-neutral-default: no trigger at its default, "key=v"
    off it.  Kills: a new setting always a param (every finished cell would rerun when it is added).  The negative
    control: the same setting without x-neutral-default is a trigger at its default too."""
    monkeypatch.setitem(spec_mod.DEFAULTS, "zoneout", 0.0)
    monkeypatch.setitem(spec_mod.NEUTRAL_DEFAULTS, "zoneout", 0.0)
    monkeypatch.setattr(spec_mod, "resolve_hparams", lambda train, arch: {**DEFAULTS, "zoneout": 0.0, **train})
    assert "zoneout" not in cell().trigger_params()
    assert cell(zoneout=0.1).trigger_params()["zoneout"] == "zoneout=0.1"
    monkeypatch.delitem(spec_mod.NEUTRAL_DEFAULTS, "zoneout")  # the mutant: not neutral
    assert cell().trigger_params()["zoneout"] == "zoneout=0.0"


def test_no_param_is_what_snakemake_leaves_out_of_the_params_it_compares():
    """NO_PARAM works only because Snakemake records a param's repr() for builtin types and leaves other values out.
    Kills: a Snakemake whose persistence records every value (then adding a setting would rerun every cell); the
    negative control: None, a builtin, is recorded."""
    from snakemake.persistence import UNREPRESENTABLE, PersistenceBase

    serialize = PersistenceBase._serialize_param_builtin
    assert serialize(None, NO_PARAM) is UNREPRESENTABLE
    assert serialize(None, "lr=0.01") == "'lr=0.01'"
    assert serialize(None, None) == "None"


def test_model_config_takes_every_value_from_the_spec():
    """Kills: a model built with a value from ModelConfig's own defaults instead of the spec's settings (ModelConfig
    has none: a missing value is an error)."""
    from lmgrid.models import ModelConfig

    class V:
        tokens = ["a"] * 40
        counts = {}

        def __len__(self):
            return 40

    spec = cell(hidden_dim=12, heads=3)
    values = spec.model_config(V())
    assert values["hidden_dim"] == 12 and values["vocab_size"] == 40 and values["max_len"] == 2
    assert set(values) == {f.name for f in __import__("dataclasses").fields(ModelConfig)}
    assert {k: values[k] for k in MODEL_KEYS} == {k: spec.hparams[k] for k in MODEL_KEYS}
    with pytest.raises(TypeError):
        ModelConfig(arch="gru", vocab_size=40)  # no defaults of its own


def test_model_config_defaults_are_the_schemas():
    """Kills: the hand-built model's defaults drifting from the schema's (hidden_dim was 128 in ModelConfig, 64 in
    the schema)."""
    cfg = model_config_defaults(arch="lstm", vocab_size=20)
    assert {k: getattr(cfg, k) for k in MODEL_KEYS} == {k: DEFAULTS[k] for k in MODEL_KEYS}
    assert cfg.hidden_dim == train_settings()["hidden_dim"]["default"] == 64
    assert model_config_defaults(arch="lstm", vocab_size=20, hidden_dim=5).hidden_dim == 5


def test_spec_path_is_the_run_folder_beside_runs():
    key = RunKey("lstm", "cell", 5, 2, "window", 1)
    assert spec_path(key, "c") == "results/c/specs/runs/lstm/cell/n5_l2_window_s1.json"


def test_an_older_model_ckpt_gets_the_values_its_missing_fields_computed():
    """A model.ckpt written before weight_drop, init_range, output_layer, cutoffs and context_len existed lacks them;
    loading fills what ModelConfig's old defaults were, the schema's neutral defaults now.  Kills: a fill from other
    defaults (the model would not be the one trained), or none (old checkpoints would not load)."""
    from lmgrid.run.spec import model_config_values

    old = {"arch": "lstm", "vocab_size": 30, "impl": "torch", "layers": 1, "n_step": 3, "max_len": 2,
           **{k: DEFAULTS[k] for k in MODEL_KEYS if k not in ("weight_drop", "init_range", "output_layer")}}
    filled = model_config_values(old)
    assert {k: filled[k] for k in ("weight_drop", "init_range", "output_layer", "cutoffs", "context_len")} == {
        "weight_drop": 0.0, "init_range": 0.0, "output_layer": "full", "cutoffs": [], "context_len": 0}
    assert {k: filled[k] for k in old} == old


def test_the_budget_schedule_is_no_trigger_at_0():
    """train.budget_tokens and train.budget_warmup_tokens (added after contract 1, x-neutral-default) are no
    rerun-trigger param at 0, so adding them reruns no finished cell, and are one off it.  Kills: either key without
    x-neutral-default, or added to CONTRACT_1_TRIGGERS (the negative control: a budget is a trigger)."""
    assert {"budget_tokens", "budget_warmup_tokens"} <= NEUTRAL_DEFAULTS.keys()
    assert not {"budget_tokens", "budget_warmup_tokens"} & set(CONTRACT_1_TRIGGERS)
    params = cell().trigger_params()
    assert "budget_tokens" not in params and "budget_warmup_tokens" not in params
    assert cell(budget_tokens=1000).trigger_params()["budget_tokens"] == "budget_tokens=1000"
    assert cell(budget_tokens=1000, budget_warmup_tokens=10).trigger_params()["budget_warmup_tokens"] == \
        "budget_warmup_tokens=10"
