"""RunSpec: everything one neural training job needs, resolved once, in one JSON file the job reads.

The workflow builds one spec per neural grid cell from the checked config (`RunSpec.build`), writes it under
`results/<corpus>/specs/runs/<arch>/<impl>/<cell>.json` when jobs are about to run, and the train rule's command is
`lmgrid train --spec <file>`.  The training settings are resolved here only (`resolve_hparams`, from the schema's
defaults), and the train rule's rerun-trigger params (`trigger_params`), the checkpoint fingerprint (`computing`) and
the model's configuration (`model_config`) are all read off the spec.  Kept free of torch imports: the workflow
builds specs while it builds the DAG.  The file's format: docs/contracts.md, "Run spec".
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from lmgrid.common import plugins
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json, write_json
from lmgrid.data.corpus import SPLITS
from lmgrid.run.settings import DEFAULTS, MODEL_KEYS, NEUTRAL_DEFAULTS, NOT_COMPUTING, check_types, resolve_hparams
from lmgrid.run.key import beside_runs, normalise

VERSION = 1  # the spec file's format; a file of another version is refused (the workflow writes it anew each run)
DEVICES = ("cpu", "cuda")
PRECISIONS = ("32-true", "bf16-mixed", "auto")

# The training settings that were the train rule's params when settings first became params ("lr=0.01", one per
# setting that changes results), frozen here as contract 1.  Snakemake compares a job's params as a set of strings
# with the set it recorded when the job ran, so every grid finished since then has exactly these keys recorded: they
# stay params always, at any value, or every finished cell would retrain.  A setting added to the schema later is a
# param only off its neutral default (`trigger_params`).  Never add to or remove from this tuple.
CONTRACT_1_TRIGGERS = (
    "epochs", "batch_size", "stream_batch_size", "eval_batch_size", "stream_eval_batch_size", "bptt",
    "max_train_tokens", "optimizer", "lr", "momentum", "weight_decay", "clip", "lr_decay", "lr_decays",
    "plateau_patience", "plateau_min_delta", "lr_decay_from_epoch", "average_from_epoch", "min_lr", "emb_dim",
    "hidden_dim", "dropout", "tie_weights", "weight_drop", "activation", "direct", "heads", "output_layer",
    "init_range", "residual", "precision", "deterministic")

# ModelConfig's fields that are not training settings: the cell's shape (set from the cell by `model_config`), and
# for a model built by hand (tests, benchmarks; `model_config_defaults`) these values.
_HAND_CELL = {"impl": "torch", "layers": 1, "n_step": 5, "max_len": 512, "context_len": 0, "cutoffs": []}


class NotAParam:
    """The value of a rerun-trigger param that a job does not have (a setting added after contract 1, at its neutral
    default).  Snakemake records and compares a job's params as the set of the repr() of each value of a builtin
    type (snakemake.persistence: _serialize_param, _params) and leaves a value of any other type out of that set, so
    a param with this value is neither recorded nor compared: the job's params are those of a rule without it."""

    def __repr__(self) -> str:
        return "<no param>"

    __str__ = __repr__


NO_PARAM = NotAParam()

_FIELDS = ("version", "arch", "impl", "n_step", "layers", "regime", "seed", "corpus", "paths", "vocab", "run_dir",
           "ckpt_dir", "hparams", "placement", "live_mlflow")


@dataclass(frozen=True)
class RunSpec:
    version: int
    arch: str
    impl: str
    n_step: int  # the RunKey's: 0 in the stream regime
    layers: int
    regime: str
    seed: int
    corpus: str
    paths: dict  # {train, valid, test}: the corpus split files
    vocab: str  # vocab.json
    run_dir: str
    ckpt_dir: str
    hparams: dict  # every training setting (the schema's train_settings), resolved
    # Where the workflow planned the run: {"device": cpu|cuda, "precision": 32-true|bf16-mixed|auto}
    # (lmgrid.neural.placement.plan); None (a spec built by hand): train.accelerator decides, precision as it resolves.
    placement: dict | None
    live_mlflow: dict | None  # Lightning MLFlowLogger kwargs when mlflow.live is on, else None
    # A plug-in architecture (lmgrid.common.plugins): {name, reference, source, sha256}, to import its class again in
    # the job; None for a built-in.  Written to the file only when set, so a built-in's spec file is what it was.
    plugin: dict | None = None

    @classmethod
    def build(cls, *, arch: str, impl: str, n_step: int, layers: int, regime: str, seed: int, corpus: str,
              train: dict | None, paths: dict | None = None, vocab: str | None = None, run_dir: str | None = None,
              ckpt_dir: str | None = None, placement: tuple[str, str] | None = None,
              live_mlflow: dict | None = None) -> "RunSpec":
        """The spec of one cell: `train` is config.yaml's `train:` section (resolved for `arch` here, the one place);
        paths default to the workflow's layout under results/<corpus>/; live_mlflow the shared MLFlowLogger kwargs
        (lmgrid.run.live.live_logger_kwargs), given this run's name and tags here."""
        key = normalise(arch, impl, int(n_step), int(layers), regime, int(seed))
        fields = dict(arch=key.arch, impl=key.impl, n_step=key.n_step, layers=key.layers, regime=key.regime,
                      seed=key.seed)
        run_dir = run_dir or key.run_dir(corpus)
        if live_mlflow:
            from lmgrid.run.live import live_run_tags

            live_mlflow = {**live_mlflow, **live_run_tags(key.name, run_dir)}
        spec = cls(
            version=VERSION, **fields, corpus=corpus,
            paths=dict(paths) if paths else {s: f"results/{corpus}/corpus/{s}.txt" for s in SPLITS},
            vocab=vocab or f"results/{corpus}/vocab.json", run_dir=run_dir,
            ckpt_dir=ckpt_dir or beside_runs("ckpt/runs").format(corpus=corpus, **fields),
            hparams=resolve_hparams(train, arch),
            placement={"device": placement[0], "precision": placement[1]} if placement else None,
            live_mlflow=live_mlflow or None, plugin=plugins.spec_entry(key.arch))
        return spec

    # -- the file ------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {f: getattr(self, f) for f in _FIELDS}
        if self.plugin:
            out["plugin"] = dict(self.plugin)
        return out

    def text(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    def write(self, path: str | Path) -> bool:
        """Write the file (atomically) unless it holds this very spec already; returns whether it wrote."""
        path = Path(path)
        try:
            if path.is_file() and read_json(path) == json.loads(self.text()):
                return False
        except LmgridError:
            pass  # a malformed file is replaced
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, self.to_dict())
        return True

    @classmethod
    def read(cls, path: str | Path) -> "RunSpec":
        """A spec file, checked: a file that is not JSON, of another version, or with a missing, unknown or
        ill-typed field is refused with one line naming the file and the field."""
        data = read_json(path)
        return cls.from_dict(data, path)

    @classmethod
    def from_dict(cls, data, source: str | Path = "spec") -> "RunSpec":
        if not isinstance(data, dict):
            raise LmgridError(f"{source}: expected a JSON object (a run spec)")
        if data.get("version") != VERSION:
            raise LmgridError(f"{source}: version: {data.get('version')!r} is not this lmgrid's run spec version "
                              f"({VERSION}); run the workflow again to write it anew")
        for f in _FIELDS:
            if f not in data:
                raise LmgridError(f"{source}: {f}: required field is missing")
        unknown = [f for f in data if f not in _FIELDS + ("plugin",)]
        if unknown:
            raise LmgridError(f"{source}: {unknown[0]}: unknown field (known: {', '.join(_FIELDS)})")
        for f, types in (("arch", str), ("impl", str), ("regime", str), ("corpus", str), ("vocab", str),
                         ("run_dir", str), ("ckpt_dir", str), ("n_step", int), ("layers", int), ("seed", int),
                         ("paths", dict), ("hparams", dict), ("placement", (dict, type(None))),
                         ("live_mlflow", (dict, type(None)))):
            if not isinstance(data[f], types) or (types is int and isinstance(data[f], bool)):
                raise LmgridError(f"{source}: {f}: {data[f]!r} has the wrong type")
        if sorted(data["paths"]) != sorted(SPLITS) or not all(isinstance(v, str) for v in data["paths"].values()):
            raise LmgridError(f"{source}: paths: expected a file for each of {', '.join(SPLITS)}")
        missing = [k for k in DEFAULTS if k not in data["hparams"]]
        if missing:
            raise LmgridError(f"{source}: hparams.{missing[0]}: required training setting is missing")
        try:
            hparams = resolve_hparams(data["hparams"], data["arch"])  # unknown keys and types: the schema's checks
        except LmgridError as e:
            raise LmgridError(f"{source}: hparams: {e}") from None
        placement = data["placement"]
        if placement is not None and (sorted(placement) != ["device", "precision"]
                                      or placement["device"] not in DEVICES
                                      or placement["precision"] not in PRECISIONS):
            raise LmgridError(f"{source}: placement: expected {{device: {'|'.join(DEVICES)}, precision: "
                              f"{'|'.join(PRECISIONS)}}}, got {placement!r}")
        plugin = data.get("plugin")
        if plugin is not None and (not isinstance(plugin, dict) or not {"name", "reference", "source"} <= set(plugin)):
            raise LmgridError(f"{source}: plugin: expected {{name, reference, source, sha256}}, got {plugin!r}")
        live = data["live_mlflow"]
        if live is not None and "tracking_uri" not in live:
            raise LmgridError(f"{source}: live_mlflow: expected MLFlowLogger arguments with a tracking_uri")
        return cls(**{**data, "hparams": hparams})

    # -- what is read off it -------------------------------------------------------------------------------------
    @property
    def key(self):
        return normalise(self.arch, self.impl, self.n_step, self.layers, self.regime, self.seed)

    @property
    def cell(self) -> dict:
        """The cell as run_info (model.ckpt's `run`, metrics.json's cell fields, the fingerprint's `run`)."""
        return {"arch": self.arch, "impl": self.impl, "n_step": self.n_step, "layers": self.layers,
                "regime": self.regime, "seed": self.seed}

    def computing(self) -> dict:
        """The settings that change what the run computes (not `x-changes-results: false`), less those at their
        neutral default (`x-neutral-default`: a setting added after results existed, whose default computes what
        runs did before it): what the checkpoint fingerprint hashes, so in-progress checkpoints keep resuming."""
        return {k: v for k, v in self.hparams.items() if k not in NOT_COMPUTING
                and not (k in NEUTRAL_DEFAULTS and v == NEUTRAL_DEFAULTS[k])}

    def trigger_params(self) -> dict[str, str]:
        """The train rule's rerun-trigger params, "key=<json>": every contract-1 key (CONTRACT_1_TRIGGERS) at
        whatever value, and every other computing setting off its neutral default."""
        computing = self.computing()
        keys = list(CONTRACT_1_TRIGGERS) + [k for k in computing if k not in CONTRACT_1_TRIGGERS]
        return {k: f"{k}={json.dumps(self.hparams[k])}" for k in keys}

    def placed(self, placement: tuple[str, str]) -> "RunSpec":
        """This spec with the workflow's plan of where it trains: (device kind, precision)."""
        return dataclasses.replace(self, placement={"device": placement[0], "precision": placement[1]})

    def placement_param(self) -> str:
        p = self.placement or {"device": "cpu", "precision": "auto"}
        return f"placement={p['device']} {p['precision']}"

    def model_config(self, vocab) -> dict:
        """ModelConfig's values for this run (every one of them from the spec, none from ModelConfig), given the
        vocabulary (lmgrid.data.vocab.Vocab): its size and, for the adaptive softmax, the clusters cut from its counts."""
        from lmgrid.models.clusters import adaptive_cutoffs

        hp, window = self.hparams, self.regime == "window"
        config = {"arch": self.arch, "vocab_size": len(vocab), "impl": self.impl, "layers": self.layers,
                  "n_step": self.n_step if window else 2,
                  # The transformer's learned positions cover the longest input it is trained on: a window, or in
                  # the stream regime a chunk read after the previous one (models/transformer.py).
                  "max_len": self.n_step - 1 if window else 2 * hp["bptt"],
                  "context_len": 0 if window else hp["bptt"],
                  **{k: hp[k] for k in MODEL_KEYS}}
        if hp["output_layer"] == "adaptive":  # its clusters, cut from the train counts (lmgrid.models.adaptive)
            config["cutoffs"] = adaptive_cutoffs([vocab.counts.get(t, 0) for t in vocab.tokens])
        else:
            config["cutoffs"] = []
        return config


def parse_placement(text: str) -> tuple[str, str]:
    """`--set placement="cuda bf16-mixed"`: the device kind a run is planned on, and its precision (`auto` where the
    workflow could not resolve it, as on a cluster's login node): lmgrid.neural.placement."""
    parts = str(text).split()
    if len(parts) != 2 or parts[0] not in DEVICES or parts[1] not in PRECISIONS:
        raise LmgridError(f"placement: expected '<cpu|cuda> <32-true|bf16-mixed|auto>', got {text!r}")
    return parts[0], parts[1]


def hand_spec(*, arch: str, impl: str = "torch", n_step: int, layers: int = 1, regime: str = "window", seed: int = 1,
              paths: dict, vocab_path: str, run_dir: str, ckpt_dir: str, hp: dict | None = None,
              placement: str | None = None, live_mlflow: dict | None = None, corpus: str = "") -> RunSpec:
    """The spec of a run set up by hand (`lmgrid train --arch ...`, tests, tools/gpu_check.py): `hp` as config.yaml's
    `train:` section, `placement` as `lmgrid train --set placement=...` reads it."""
    return RunSpec.build(arch=arch, impl=impl, n_step=n_step, layers=layers, regime=regime, seed=seed, corpus=corpus,
                         train=hp, paths=paths, vocab=vocab_path, run_dir=run_dir, ckpt_dir=ckpt_dir,
                         placement=parse_placement(placement) if placement else None, live_mlflow=live_mlflow)


def model_config_values(values: dict) -> dict:
    """ModelConfig's values for a model built by hand or read from an older model.ckpt: the given values, the rest
    from the schema's training-setting defaults (and, for the cell's shape, a hand-built cell's: torch, 1 layer,
    n_step 5, 512 positions, no context, no cutoffs: what a model.ckpt written before a field existed computed)."""
    from lmgrid.models import ModelConfig

    known = {f.name for f in dataclasses.fields(ModelConfig)}
    for key in values:
        if key not in known:
            raise LmgridError(f"model.{key}: unknown key (known: {', '.join(sorted(known))})")
    for key in ("arch", "vocab_size"):
        if key not in values:
            raise LmgridError(f"model.{key}: required key is missing")
    filled = {**_HAND_CELL, **{k: DEFAULTS[k] for k in MODEL_KEYS}, **values}
    filled["cutoffs"] = list(filled["cutoffs"])
    return filled


def model_config_defaults(**values):
    """A ModelConfig for a model built by hand (tests, benchmarks): `model_config_values`, each training setting
    checked against its schema (type, range, choices: one line naming model.<key> and the value), then
    ModelConfig.validate for the rest."""
    from lmgrid.models import ModelConfig

    filled = model_config_values(values)
    check_types({k: filled[k] for k in MODEL_KEYS}, "model")
    return ModelConfig(**filled).validate()


def spec_path(spec_or_key, corpus: str) -> str:
    """Where the workflow writes a cell's spec: results/<corpus>/specs/runs/<the run folder's path>.json."""
    fields = spec_or_key.cell if isinstance(spec_or_key, RunSpec) else dataclasses.asdict(spec_or_key)
    return beside_runs("specs/runs", ".json").format(corpus=corpus, **fields)
