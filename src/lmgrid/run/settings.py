"""Training settings: how config.yaml's `train:` section resolves for one architecture.

Their defaults and types live in the schema only ($defs/train_settings in workflow/schemas/config.schema.yaml);
this module reads them from there.  Kept free of torch imports: the workflow calls `resolve_hparams` while it
builds the DAG.
"""
from __future__ import annotations

from lmgrid.run.schema import load_schema, train_settings
from lmgrid.common.errors import LmgridError

_SETTINGS = train_settings()
# Every training setting, with the default used when config.yaml's `train:` section leaves it out.
DEFAULTS = {key: spec["default"] for key, spec in _SETTINGS.items()}
MODEL_KEYS = ("emb_dim", "hidden_dim", "dropout", "tie_weights", "activation", "direct", "heads", "residual",
              "compile", "output_layer", "init_range", "weight_drop")
# Settings that change how a run is executed or watched, not what it computes (`x-changes-results: false` in the
# schema): log cadence, the device and the number of DDP processes (batch sizes are global), torch.compile.  They
# are kept out of the rules' params and of the checkpoint fingerprint, so changing one reruns nothing.
NOT_COMPUTING = tuple(key for key, spec in _SETTINGS.items() if spec.get("x-changes-results") is False)
COMPUTING = tuple(key for key in DEFAULTS if key not in NOT_COMPUTING)
# Settings added after results existed, at a default that computes what runs did before them
# (`x-neutral-default: true`): at that default the checkpoint fingerprint leaves them out (lmgrid.neural.train).
NEUTRAL_DEFAULTS = {key: spec["default"] for key, spec in _SETTINGS.items() if spec.get("x-neutral-default")}
# Keys of `train:` that configure the job, not the model: handled by the workflow (Snakemake threads).
JOB_KEYS = ("threads",)


def resolve_hparams(train_cfg: dict | None, arch: str) -> dict:
    """The schema's defaults, overridden by the config's `train:` keys, overridden by `per_arch: {<arch>: {...}}`.

    The workflow has validated the config already; this checks again, for callers that build `train_cfg` by hand
    (tests, benchmarks, `lmgrid train --set`)."""
    train_cfg = dict(train_cfg or {})
    for key in JOB_KEYS:
        train_cfg.pop(key, None)
    per_arch = train_cfg.pop("per_arch", {}) or {}
    hp = dict(DEFAULTS)
    for source, values in (("train", train_cfg), (f"train.per_arch.{arch}", per_arch.get(arch, {}))):
        for key, value in values.items():
            if key not in DEFAULTS:
                raise LmgridError(f"{source}.{key}: unknown training setting (known: {', '.join(sorted(DEFAULTS))})")
            hp[key] = value
    check_types(hp)
    return hp


def check_types(values: dict, section: str = "train") -> None:
    """Each given training setting against its schema entry (type, range, choices); the first bad one is one line
    naming `<section>.<key>` (`model.` for a ModelConfig built by hand: lmgrid.run.spec.model_config_defaults)."""
    try:
        import jsonschema
    except ModuleNotFoundError:
        # A bare torch environment runs lmgrid from source without the workflow's dependencies (tools/gpu_check.py
        # on a borrowed GPU machine, which has no jsonschema and no registry to install it from). The workflow
        # always has it (requirements.lock) and validates the whole config before any job, so only this second
        # check, for settings built by hand, is lost there.
        return

    root = load_schema()
    validator = jsonschema.Draft202012Validator({**root["$defs"]["train_settings"], "$defs": root["$defs"]})
    err = next(iter(validator.iter_errors(values)), None)
    if err is not None:
        raise LmgridError(f"{section}.{'.'.join(map(str, err.absolute_path))}: {err.message}")
