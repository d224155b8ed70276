"""The config schema (workflow/schemas/config.schema.yaml) and YAML files read with one-line errors.

The lowest floor of the configuration: lmgrid.orchestration.config (layers, validation) and lmgrid.run.settings (training
settings) both read the schema through here, so neither has to import the other's floor.  No heavy imports.
"""
from __future__ import annotations

import functools
from pathlib import Path

import yaml

from lmgrid.common.errors import LmgridError

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


# libyaml's parser where PyYAML was built with it (the same safe loading): the schema is read by every job, and the
# pure-Python parser took about 0.5 CPU-s of an `lmgrid train` job for it.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except yaml.YAMLError as e:
        raise LmgridError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise LmgridError(f"{path}: expected a mapping of config keys at the top level")
    return data


@functools.lru_cache(maxsize=4)
def _schema(path: str) -> dict:
    return load_yaml(path)


def load_schema(path: str | Path | None = None) -> dict:
    return _schema(str(path or SCHEMA_PATH))


def train_settings(schema_path: str | Path | None = None) -> dict[str, dict]:
    """The schema of every training setting (name -> its JSON schema, with `default`)."""
    return load_schema(schema_path)["$defs"]["train_settings"]["properties"]
