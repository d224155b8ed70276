"""Config validation: the JSON schema plus the checks a schema cannot express.

Every problem is reported as one line naming the key and the value; nothing runs until
the config is valid.  Kept free of heavy imports: Snakemake calls it while building the DAG.
"""
from __future__ import annotations

import math
from pathlib import Path

import yaml

from .errors import LmgridError
from .runkey import NEURAL_ARCHS, expand_study


def _key_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except yaml.YAMLError as e:
        raise LmgridError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise LmgridError(f"{path}: expected a mapping of config keys at the top level")
    return data


def check_schema(config: dict, schema_path: str | Path, source: str = "config") -> None:
    import jsonschema

    schema = load_yaml(schema_path)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = errors[0]
        raise LmgridError(f"{source}: {_key_path(err.absolute_path)}: {err.message}")


def check_semantics(config: dict, source: str = "config", base_dir: str | Path = ".") -> None:
    """Checks beyond the schema: files exist, ratios sum to 1, options fit the corpus kind."""
    corpus = config["corpus"]
    kind = corpus["kind"]
    base = Path(base_dir)
    need = {"synth": "synth", "ptb": "files", "text": "text"}[kind]
    if need not in corpus:
        raise LmgridError(f"{source}: corpus.{need}: required when corpus.kind is {kind!r}")
    if kind == "synth" and corpus.get("max_len", 0):
        raise LmgridError(f"{source}: corpus.max_len: not supported for kind 'synth' "
                          "(dropping sentences would change the distribution the oracle scores)")
    if kind == "ptb":
        for split, f in corpus["files"].items():
            if not (base / f).is_file():
                raise LmgridError(f"{source}: corpus.files.{split}: file not found: {f}")
    if kind == "text":
        text = corpus["text"]
        if not (base / text["path"]).is_file():
            raise LmgridError(f"{source}: corpus.text.path: file not found: {text['path']}")
        ratios = text.get("ratios", {"train": 0.8, "valid": 0.1, "test": 0.1})
        total = sum(ratios.values())
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise LmgridError(f"{source}: corpus.text.ratios: must sum to 1, got {total:g}")
    if kind == "synth":
        from .synth import GrammarConfig

        known = set(GrammarConfig.__dataclass_fields__)
        for k in corpus["synth"].get("grammar", {}):
            if k not in known:
                raise LmgridError(f"{source}: corpus.synth.grammar.{k}: unknown grammar setting "
                                  f"(known: {', '.join(sorted(known))})")
    for name, study in config["studies"].items():
        if any(a in NEURAL_ARCHS for a in study["arch"]) and "window" in study.get("regime", ["window"]):
            bad = [n for n in study["n_step"] if n < 2]
            if bad:
                raise LmgridError(f"{source}: studies.{name}.n_step: {bad[0]} is below 2, "
                                  "the least context a neural model can be given in the window regime")
        if "ffnn" in study["arch"] and "stream" in study.get("regime", ["window"]):
            raise LmgridError(f"{source}: studies.{name}: arch ffnn has a fixed window and no stream regime; "
                              "put it in a study with regime [window]")
        if not expand_study(study):
            raise LmgridError(f"{source}: studies.{name}: the grid is empty")


def check(config: dict, schema_path: str | Path, source: str = "config", base_dir: str | Path = ".") -> None:
    check_schema(config, schema_path, source)
    check_semantics(config, source, base_dir)
