"""Plug-in architectures in a config (docs/models.md, "Your own model"): each reference resolved once, checked, and
replaced by its lmgrid_name, before any job; a bad plug-in is one line naming the config key and the value.

Where a config names an architecture: studies.<s>.arch[i] and combine.<c>.components[i].arch.  A value that is not
a built-in is a plug-in reference when it holds a `:` (FILE.py:CLASS, MODULE:CLASS) or is an entry point of the
group `lmgrid.models`; any other value is left for the schema's own check (its list of the known architectures).
lmgrid.models.plugin (torch) is imported only when a config has a plug-in.
"""
from __future__ import annotations

import copy
from pathlib import Path

from lmgrid.common import plugins
from lmgrid.common.errors import LmgridError, key_path as _key


def _arch_slots(config: dict):
    """(path, value) of every place an architecture is named."""
    for s, study in (config.get("studies") or {}).items():
        archs = study.get("arch") if isinstance(study, dict) else None
        if isinstance(archs, list):
            for i, a in enumerate(archs):
                yield ("studies", s, "arch", i), a
    for c, comb in (config.get("combine") or {}).items():
        comps = comb.get("components") if isinstance(comb, dict) else None
        for i, comp in enumerate(comps if isinstance(comps, list) else []):
            if isinstance(comp, dict) and "arch" in comp:
                yield ("combine", c, "components", i, "arch"), comp["arch"]


def _set(config: dict, parts, value) -> None:
    node = config
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value


def resolve(config: dict, src, base_dir: str | Path = ".") -> dict[str, tuple]:
    """Every plug-in reference of `config` imported, checked and registered (lmgrid.common.plugins), and replaced
    by its lmgrid_name in place.  Returns name -> (the config path where it was first named, the value there).
    `src(*parts)` names the layer a key came from."""
    found: dict[str, tuple] = {}
    by_value: dict[str, str] = {}
    for parts, value in list(_arch_slots(config)):
        if not isinstance(value, str) or value in plugins.BUILTIN_NAMES:
            continue
        if value in by_value:
            _set(config, parts, by_value[value])
            continue
        if value in found:  # a plug-in's name, used after its reference
            continue
        if not plugins.is_reference(value) and plugins.entry_point(value) is None:
            continue  # not a plug-in: the schema says it is no known architecture
        from lmgrid.models.plugin import PluginError, resolve as resolve_class

        where = f"{src(*parts)}: {_key(parts)}: {value!r}"
        try:
            _, facts = resolve_class(value, base_dir)
        except PluginError as e:
            raise LmgridError(f"{where}: {e}") from None
        if facts.name in found and found[facts.name][1] != value:
            first = found[facts.name]
            raise LmgridError(f"{where}: its lmgrid_name {facts.name!r} is also the name of {first[1]!r} "
                              f"({_key(first[0])})")
        found.setdefault(facts.name, (parts, value))
        by_value[value] = facts.name
        _set(config, parts, facts.name)
    return found


def schema_with(schema: dict, names) -> dict:
    """The schema with the plug-ins' names among the architectures a study, a combination or train.per_arch may
    name (a copy; the file is left as it is)."""
    names = list(names)
    if not names:
        return schema
    schema = copy.deepcopy(schema)
    props = schema["properties"]
    study_arch = props["studies"]["additionalProperties"]["properties"]["arch"]["items"]
    study_arch["enum"] = list(study_arch["enum"]) + names
    comp_arch = props["combine"]["additionalProperties"]["properties"]["components"]["items"]["properties"]["arch"]
    comp_arch["enum"] = list(comp_arch["enum"]) + names
    per_arch = props["train"]["properties"]["per_arch"]["properties"]
    for n in names:
        per_arch[n] = copy.deepcopy(per_arch["lstm"])
    return schema


def probe_all(config: dict, src, found: dict[str, tuple]) -> None:
    """Each plug-in used in a regime it declares, and one forward of it per regime it will be used in (shapes, gates,
    causality in the stream regime): a plug-in that would fail in training fails here."""
    if not found:
        return
    from lmgrid.models.plugin import PluginError, plugin_class, probe

    for name, (parts, value) in sorted(found.items()):
        facts = plugins.facts(name)
        regimes, layers = [], []
        for s, study in config["studies"].items():
            if name not in study["arch"]:
                continue
            for r in study["regime"]:
                if r not in facts.regimes:
                    raise LmgridError(f"{src('studies', s, 'regime')}: studies.{s}.regime: {r!r}: plug-in {name} "
                                      f"({value}) supports {', '.join(facts.regimes)} only (lmgrid_regimes)")
                if r not in regimes:
                    regimes.append(r)
            layers += list(study.get("layers", [1]))
        try:
            probe(plugin_class(name), regimes, layers=min(layers) if layers else 1)
        except PluginError as e:
            raise LmgridError(f"{src(*parts)}: {_key(parts)}: {value!r}: {e}") from None
