"""The plug-in architectures of this run (docs/models.md, "Your own model"): their facts, torch-free.

A plug-in is a user's nn.Module named in the config by a reference (`file.py:Class`, `module:Class` or an entry
point of the group `lmgrid.models`); lmgrid.models.plugin imports and checks it, and registers its facts here under
its `lmgrid_name`.  Everything that only needs to know *about* a plug-in (the run keys, the gated set, display names,
the Snakemake rules) reads these facts, not the class, so it stays free of torch.

The facts also travel to every job the workflow starts, in the environment variable LMGRID_PLUGINS (JSON): the
Snakemake process resolves the config and sets it, its shell jobs inherit it, so `lmgrid summary` and the tables and
figures know a plug-in's gates and display name without importing it.  A training job imports the class again from
the reference in its run spec (lmgrid.run.spec: the `plugin` entry).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass

from lmgrid.common.errors import LmgridError

ENV = "LMGRID_PLUGINS"
ENTRY_POINT_GROUP = "lmgrid.models"
IMPL = "plugin"  # a plug-in's one implementation: run folders runs/<name>/plugin/...
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,30}")
# Every built-in architecture's name (lmgrid.run.key.ARCHS, written out: key.py imports this module).
BUILTIN_NAMES = ("addk", "katz", "kn", "mkn", "ffnn", "rnn", "lstm", "gru", "transformer")
REGIMES = ("window", "stream")


@dataclass(frozen=True)
class PluginFacts:
    name: str  # lmgrid_name: the arch in configs, run folders and tables
    reference: str  # how the config named it (file.py:Class relative to the workflow's folder, module:Class, entry point)
    source: str  # the class's source file (absolute): an input of its cells' training jobs
    sha256: str  # of that file when it was resolved: part of the cell's identity (its checkpoint fingerprint)
    display: str
    regimes: tuple
    gates: tuple
    citation: str = ""
    class_name: str = ""  # the class's name in its source file (a copy of the file, shipped with an MLflow model)

    def spec_entry(self) -> dict:
        """What a run spec and a model.ckpt keep to import the class again."""
        return {"name": self.name, "reference": self.reference, "source": self.source, "sha256": self.sha256,
                "class": self.class_name}


_REGISTRY: dict[str, PluginFacts] = {}
_ENV_SEEN: str | None = None


def file_sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def register(facts: PluginFacts) -> None:
    """Add a plug-in (an earlier one of the same name is replaced) and export the registry to the environment."""
    _sync_from_env()
    _REGISTRY[facts.name] = facts
    _export()


def _export() -> None:
    global _ENV_SEEN
    text = json.dumps({n: asdict(f) for n, f in sorted(_REGISTRY.items())}, sort_keys=True)
    os.environ[ENV] = text
    _ENV_SEEN = text


def _sync_from_env() -> None:
    """Read the facts a parent process exported (once per value of the variable)."""
    global _ENV_SEEN
    text = os.environ.get(ENV, "")
    if text == _ENV_SEEN:
        return
    _ENV_SEEN = text
    if not text:
        return
    try:
        data = json.loads(text)
        for name, f in data.items():
            _REGISTRY.setdefault(name, PluginFacts(**{**f, "regimes": tuple(f["regimes"]),
                                                      "gates": tuple(f["gates"])}))
    except (ValueError, TypeError, KeyError) as e:
        raise LmgridError(f"{ENV}: not the plug-in facts lmgrid exported ({type(e).__name__}: {e})") from None


def clear() -> None:
    """Forget every plug-in (tests; a new config)."""
    global _ENV_SEEN
    _REGISTRY.clear()
    os.environ.pop(ENV, None)
    _ENV_SEEN = None


def facts(name: str) -> PluginFacts | None:
    _sync_from_env()
    return _REGISTRY.get(name)


def names() -> tuple[str, ...]:
    _sync_from_env()
    return tuple(sorted(_REGISTRY))


def is_reference(text: str) -> bool:
    """Whether an arch value names a class (`x.py:C`, `pkg.mod:C`) rather than an architecture by name."""
    return ":" in text


def entry_point(name: str):
    """The installed entry point of that name in the group lmgrid.models, or None."""
    from importlib.metadata import entry_points  # looked up when asked: tests patch it

    return next((ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name), None)


def is_plugin(arch: str) -> bool:
    return facts(arch) is not None


def gated_names() -> tuple[str, ...]:
    """The plug-ins that return gates (lmgrid_gates not empty): their gates are measured like the LSTM's."""
    return tuple(n for n in names() if _REGISTRY[n].gates)


def display(name: str) -> str | None:
    f = facts(name)
    return f.display if f else None


def spec_entry(arch: str) -> dict | None:
    f = facts(arch)
    return f.spec_entry() if f else None
