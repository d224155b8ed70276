"""The pipeline configuration: where each value comes from, its defaults, and its validation.

A config is built in layers: config.yaml (or the files given with --configfile), then `snakemake --config
KEY=VALUE` entries, then `--config set="a.b=1 c.d=[2, 3]"` (what `make run SET=...` passes).  Every problem is
reported as one line naming the layer the bad value came from, the key and the value; nothing runs until the
config is valid.  Defaults and types live in the schema only (workflow/schemas/config.schema.yaml).  Kept free
of heavy imports: Snakemake calls this while building the DAG.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
from pathlib import Path

import yaml

from lmgrid.common.errors import LmgridError, key_path
from lmgrid.run.key import NGRAM_ARCHS, all_runs, expand_study
from lmgrid.run.schema import SCHEMA_PATH, load_schema, load_yaml, train_settings  # noqa: F401 - re-exported

SET_KEY = "set"  # --config set="..." : dotted assignments, each replacing the node it names


# ---- layers: which file or option a value came from -------------------------------------------------------

def _has_path(tree, parts) -> bool:
    for p in parts:
        if isinstance(tree, dict) and p in tree:
            tree = tree[p]
        elif isinstance(tree, list) and isinstance(p, int) and p < len(tree):
            tree = tree[p]
        else:
            return False
    return True


class Sources:
    """The layers a config was merged from, latest last; names the one a key path came from."""

    def __init__(self, layers: list[tuple[str, dict]] | None = None, fallback: str = "config"):
        self.layers = layers or []
        self.fallback = fallback

    def of(self, parts) -> str:
        parts = list(parts)
        # The latest layer that holds the deepest prefix of the path set it.
        for n in range(len(parts), 0, -1):
            for name, tree in reversed(self.layers):
                if _has_path(tree, parts[:n]):
                    return name
        return self.fallback


def _retype(value):
    """Snakemake parses nested --config values with YAML's BaseLoader (every leaf a string); read each leaf
    again the way a YAML file would, so `--config train='{epochs: 5}'` gives the integer 5."""
    if isinstance(value, dict):
        return {k: _retype(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_retype(v) for v in value]
    if isinstance(value, str):
        try:
            return yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            return value
    return value


_CLOSE = {"{": "}", "[": "]"}


def split_assignments(text: str) -> list[str]:
    """`a.b=1 studies={s: {arch: [mkn, lstm]}}` -> its assignments: words split at blanks outside quotes and
    outside a YAML flow value ({...} or [...] right after `=`, and everything inside it).  Quotes outside a flow
    value group as in a shell and are removed (`a='x y'`); inside one they are YAML's and stay."""
    words, cur, stack, quote, started = [], [], [], None, False
    chars = iter(text)
    for ch in chars:
        if quote:
            if ch == "\\" and quote == '"':
                nxt = next(chars, "")
                cur.append(ch + nxt if stack else nxt)
            elif ch == quote:
                quote = None
                if stack:
                    cur.append(ch)
            else:
                cur.append(ch)
        elif ch in "'\"":
            quote, started = ch, True
            if stack:
                cur.append(ch)
        elif ch.isspace() and not stack:
            if started:
                words.append("".join(cur))
            cur, started = [], False
        else:
            if ch in _CLOSE and (stack or (cur and cur[-1] == "=")):
                stack.append(_CLOSE[ch])
            elif stack and ch == stack[-1]:
                stack.pop()
            cur.append(ch)
            started = True
    if quote:
        raise LmgridError(f"--config {SET_KEY}: no closing quotation ({quote}) in {text!r}")
    if stack:
        raise LmgridError(f"--config {SET_KEY}: a {stack[-1]!r} is missing in {text!r}")
    if started:
        words.append("".join(cur))
    return words


def _restore_end_quotes(text: str) -> str:
    """Snakemake strips every ' and " at both ends of a --config value, so `set="a.b='x y'"` arrives as
    `a.b='x y`: give back the quotes that close it (none when it is balanced already)."""
    for end in ("", "'", '"', "\"'", "'\""):
        try:
            split_assignments(text + end)
            return text + end
        except LmgridError:
            continue
    return text


def parse_assignments(text: str) -> list[tuple[list[str], object]]:
    """`a.b=1 c=[2, 3]` -> [(["a", "b"], 1), (["c"], [2, 3])]: values are YAML; a value with blanks is one when it
    is a {...} or [...] value, or quoted."""
    out = []
    for word in split_assignments(text):
        key, sep, value = word.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise LmgridError(f"--config {SET_KEY}: {word!r}: expected KEY=VALUE with KEY like train.epochs")
        try:
            parsed = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as e:
            raise LmgridError(f"--config {SET_KEY}: {key}: not a YAML value: {value!r} "
                              f"({str(e).splitlines()[0]})") from None
        out.append((parts, parsed))
    return out


def _set_path(tree: dict, parts: list[str], value) -> None:
    """Set the node `parts` names, creating the mappings above it; the node is replaced whole."""
    for p in parts[:-1]:
        if not isinstance(tree.get(p), dict):
            tree[p] = {}
        tree = tree[p]
    tree[parts[-1]] = copy.deepcopy(value)


def _merge(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


REPLACE_KEY = "replace"  # a config file's `replace: [studies, train]`: those sections are its own, not merged


def _replace_sections(config: dict, trees: list[dict]) -> None:
    """A preset says which whole sections it brings (`replace: [studies, train]`): those sections of the files
    before it are dropped, so nothing of config.yaml's studies or training settings leaks into a preset run;
    files after it still merge over it."""
    for i, tree in enumerate(trees):
        for section in (tree.get(REPLACE_KEY) or []) if isinstance(tree, dict) else []:
            config[section] = copy.deepcopy(tree.get(section, {}))
            for later in trees[i + 1:]:
                if isinstance(later, dict) and isinstance(later.get(section), dict):
                    _merge(config[section], later[section])


def apply_overrides(config: dict, configfiles=(), cli_config=None) -> Sources:
    """Turn Snakemake's merged config into the typed one (in place) and return its layers.

    `cli_config` is what --config gave.  Snakemake has merged it into `config` already, with every value below
    the top level a string; it is merged again here, typed.  Its `set` entry holds dotted assignments, each
    replacing the node it names: `set="train.epochs=5"` changes one setting, `set="studies={...}"` all studies.
    """
    cli = _retype(copy.deepcopy(dict(cli_config or {})))
    cli.pop(SET_KEY, None)
    assignments = dict(cli_config or {}).get(SET_KEY)  # as given: the words are parsed here, not retyped
    config.pop(SET_KEY, None)
    layers = []
    for f in configfiles or []:
        rel = os.path.relpath(f)
        try:
            tree = load_yaml(f)
        except LmgridError:
            tree = {}
        layers.append((str(f) if rel.startswith("..") else rel, tree))
    _replace_sections(config, [tree for _, tree in layers])
    _merge(config, cli)
    layers.append(("--config", cli))
    if assignments not in (None, ""):
        tree: dict = {}
        for parts, value in parse_assignments(_restore_end_quotes(str(assignments))):
            _set_path(config, parts, value)
            _set_path(tree, parts, value)
        layers.append((f"--config {SET_KEY}", tree))
    return Sources(layers, fallback=layers[0][0] if layers else "config")


# ---- defaults and validation ------------------------------------------------------------------------------

def _resolve(schema: dict, root: dict) -> dict:
    """A subschema with its local $ref ("#/$defs/...") merged in (the ref's keys first)."""
    ref = schema.get("$ref")
    if not ref:
        return schema
    target = root
    for part in ref.lstrip("#/").split("/"):
        target = target[part]
    merged = dict(_resolve(target, root))
    merged["properties"] = {**target.get("properties", {}), **schema.get("properties", {})}
    merged.update({k: v for k, v in schema.items() if k not in ("$ref", "properties")})
    return merged


def fill_defaults(config: dict, schema: dict, root: dict | None = None) -> None:
    """Add the schema's defaults for every missing key, in place.  Not inside a node marked
    `x-fill-defaults: false` (train.per_arch: its entries override train only where they say so)."""
    root = root or schema
    schema = _resolve(schema, root)
    if schema.get("x-fill-defaults") is False or not isinstance(config, dict):
        return
    props = schema.get("properties", {})
    for key, sub in props.items():
        sub = _resolve(sub, root)
        if key not in config and "default" in sub:
            config[key] = copy.deepcopy(sub["default"])
        if isinstance(config.get(key), dict):
            fill_defaults(config[key], sub, root)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in config.items():
            if key not in props and isinstance(value, dict):
                fill_defaults(value, extra, root)


def _unknown_keys(err) -> list[str]:
    """The offending keys of an additionalProperties / unevaluatedProperties error."""
    if err.validator == "additionalProperties":
        known = set(err.schema.get("properties", {}))
        return [k for k in err.instance if k not in known]
    return [k for k in err.instance if f"'{k}'" in err.message]


def _known_keys(err, root: dict) -> list[str]:
    return sorted(_resolve(err.schema, root).get("properties", {}))


def check_schema(config: dict, schema_path: str | Path | None = None, sources: Sources | str = "config",
                 schema: dict | None = None) -> None:
    import jsonschema

    sources = Sources(fallback=sources) if isinstance(sources, str) else sources
    root = schema or load_schema(schema_path)
    validator = jsonschema.Draft202012Validator(root)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return
    err = errors[0]
    path = list(err.absolute_path)
    if err.validator in ("additionalProperties", "unevaluatedProperties"):
        key = _unknown_keys(err)[0]
        known = _known_keys(err, root)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        raise LmgridError(f"{sources.of([*path, key])}: {key_path([*path, key])}: unknown key ({hint})")
    raise LmgridError(f"{sources.of(path)}: {key_path(path)}: {err.message}")


def check_semantics(config: dict, sources: Sources | str = "config", base_dir: str | Path = ".") -> None:
    """Checks beyond the schema: files exist, ratios sum to 1, options fit the corpus kind, models can be built.
    Expects the schema's defaults filled in."""
    src = (lambda *parts: sources) if isinstance(sources, str) else (lambda *parts: sources.of(parts))
    corpus = config["corpus"]
    kind = corpus["kind"]
    base = Path(base_dir)
    need = {"synth": "synth", "text": "text"}.get(kind)
    if need and need not in corpus:
        raise LmgridError(f"{src('corpus', 'kind')}: corpus.{need}: required when corpus.kind is {kind!r}")
    for key in ("download", "sha256"):
        if key in corpus and kind != "ptb":
            raise LmgridError(f"{src('corpus', key)}: corpus.{key}: only for kind 'ptb' (corpus.kind is {kind!r})")
    if kind == "synth" and corpus["max_len"]:
        raise LmgridError(f"{src('corpus', 'max_len')}: corpus.max_len: not supported for kind 'synth' "
                          "(dropping sentences would change the distribution the oracle scores)")
    if kind == "synth" and corpus.get("max_sentences"):
        raise LmgridError(f"{src('corpus', 'max_sentences')}: corpus.max_sentences: not supported for kind 'synth' "
                          "(corpus.synth.sentences sets its sizes; the oracle scores the whole sampled splits)")
    if kind == "ptb":
        _check_ptb(corpus, src, base)
    if kind == "text":
        text = corpus["text"]
        if not (base / text["path"]).is_file():
            raise LmgridError(f"{src('corpus', 'text', 'path')}: corpus.text.path: file not found: {text['path']}")
        ratios = text["ratios"]
        total = sum(ratios.values())
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise LmgridError(f"{src('corpus', 'text', 'ratios')}: corpus.text.ratios: must sum to 1, got {total:g}")
    if kind == "synth":
        from lmgrid.data.synth import GrammarConfig

        known = set(GrammarConfig.__dataclass_fields__)
        for k in corpus["synth"]["grammar"]:
            if k not in known:
                raise LmgridError(f"{src('corpus', 'synth', 'grammar', k)}: corpus.synth.grammar.{k}: unknown "
                                  f"grammar setting (known: {', '.join(sorted(known))})")
    for name, study in config["studies"].items():
        if any(a not in NGRAM_ARCHS for a in study["arch"]) and "window" in study["regime"]:
            bad = [n for n in study["n_step"] if n < 2]
            if bad:
                raise LmgridError(f"{src('studies', name, 'n_step')}: studies.{name}.n_step: {bad[0]} is below 2, "
                                  "the least context a neural model can be given in the window regime")
        if "ffnn" in study["arch"] and "stream" in study["regime"]:
            raise LmgridError(f"{src('studies', name)}: studies.{name}: arch ffnn has a fixed window and no stream "
                              "regime; put it in a study with regime [window]")
        if not expand_study(study):
            raise LmgridError(f"{src('studies', name)}: studies.{name}: the grid is empty")
    _check_model_shapes(config, src)
    _check_dynamic_rule(config, src)


# adapt.dynamic's settings that only one update rule reads (lmgrid.testtime.adapt.dynamic).
RULE_ONLY = {"sgd": ("lr",), "rms": ("rms_lr", "decay", "train_tokens")}


def _check_dynamic_rule(config: dict, src) -> None:
    """A setting of the other update rule, changed from its default, would change nothing: refused, so that no one
    reads a grid that was never run."""
    dynamic = (config.get("adapt") or {}).get("dynamic") or {}
    rule = dynamic.get("rule", "sgd")
    props = load_schema()["properties"]["adapt"]["properties"]["dynamic"]["properties"]
    for other, keys in RULE_ONLY.items():
        for key in keys if other != rule else ():
            if key in dynamic and dynamic[key] != props[key]["default"]:
                raise LmgridError(f"{src('adapt', 'dynamic', key)}: adapt.dynamic.{key}: rule {other} only, and "
                                  f"adapt.dynamic.rule is {rule!r}: it would change nothing")


def _check_ptb(corpus: dict, src, base: Path) -> None:
    """A ptb corpus needs local files (corpus.files, or $LMGRID_PTB_DIR) or a download with its sha256 sums."""
    from lmgrid.data.rawdata import PTB_DIR_ENV, PTB_NAMES, SPLITS, ptb_sources

    download = corpus.get("download")
    if download is not None:
        missing = [] if "base_url" in download else [s for s in SPLITS if s not in download]
        if missing:
            raise LmgridError(f"{src('corpus', 'download')}: corpus.download: give base_url or a URL for every "
                              f"split (missing: {', '.join(missing)})")
        if "sha256" not in corpus:
            raise LmgridError(f"{src('corpus', 'download')}: corpus.sha256: required with corpus.download "
                              "(every downloaded file is checked before it is kept)")
    source = ptb_sources(corpus)
    if source is None:
        raise LmgridError(f"{src('corpus', 'kind')}: corpus.files: required when corpus.kind is 'ptb' (or "
                          f"corpus.download with corpus.sha256, or {PTB_DIR_ENV} naming a folder with "
                          f"{', '.join(PTB_NAMES.values())})")
    if source.origin == "files":
        for split, f in source.files.items():
            if not (base / f).is_file():
                raise LmgridError(f"{src('corpus', 'files', split)}: corpus.files.{split}: file not found: {f}")
    elif source.origin == "env":
        for split, f in source.files.items():
            if not Path(f).is_file():
                raise LmgridError(f"{PTB_DIR_ENV}={os.environ[PTB_DIR_ENV]}: {PTB_NAMES[split]} not found in it")


def _check_model_shapes(config: dict, src) -> None:
    """What the schema cannot say about one setting alone, per architecture the studies train (train and its
    per_arch entry resolved), so that it fails here rather than inside a training job."""
    from lmgrid.run.spec import RunSpec

    cells = {}  # one cell per architecture: its settings are every cell's of that architecture
    for key in all_runs(config["studies"]):
        if not key.is_ngram:
            cells.setdefault(key.arch, key)
    train = config.get("train", {})
    for arch, key in sorted(cells.items()):
        # The settings as the run's spec holds them (RunSpec.build resolves them, the one resolver).
        hp = RunSpec.build(**dataclasses.asdict(key), corpus=config["corpus"]["name"], train=train).hparams

        def where(key):
            per_arch = train.get("per_arch", {}).get(arch, {})
            parts = ("train", "per_arch", arch, key) if key in per_arch else ("train", key)
            return f"{src(*parts)}: {key_path(parts)}"

        if arch == "transformer" and hp["hidden_dim"] % hp["heads"]:
            key = "heads" if "heads" in train.get("per_arch", {}).get(arch, {}) or "heads" in train else "hidden_dim"
            raise LmgridError(f"{where(key)}: {hp[key]} does not fit: the transformer's hidden_dim "
                              f"({hp['hidden_dim']}) must be a multiple of heads ({hp['heads']})")


def drop_neutral_cut(corpus: dict) -> None:
    """corpus.max_sentences without its splits at 0, and gone when none is left: a config that states the neutral
    value is then the very config that leaves it out, so the rules' params and the data settings MLflow records are
    byte for byte what they were before the key existed, and a finished grid reruns nothing."""
    cut = {split: n for split, n in (corpus.get("max_sentences") or {}).items() if n}
    if cut:
        corpus["max_sentences"] = cut
    else:
        corpus.pop("max_sentences", None)


def check(config: dict, schema_path: str | Path | None = None, source: Sources | str = "config",
          base_dir: str | Path = ".") -> dict:
    """Validate `config` against the schema, fill in the schema's defaults (in place), then the checks beyond
    the schema.  Returns the config."""
    from lmgrid.orchestration import plugins

    src = (lambda *parts: source) if isinstance(source, str) else (lambda *parts: source.of(parts))
    # Plug-in architectures (docs/models.md, "Your own model"): each reference imported and checked, and replaced by
    # its lmgrid_name, which the schema then knows like a built-in's.
    found = plugins.resolve(config, src, base_dir)
    schema = plugins.schema_with(load_schema(schema_path), found)
    check_schema(config, sources=source, schema=schema)
    fill_defaults(config, schema)
    drop_neutral_cut(config["corpus"])
    apply_seeds(config)
    check_semantics(config, source, base_dir)
    plugins.probe_all(config, src, found)
    return config


def apply_seeds(config: dict) -> None:
    """`seeds:` (when given) becomes every study's seed list, so one setting says how many seeds a preset runs
    (`SET="seeds=[1]"`: one of each)."""
    if config.get("seeds"):
        for study in config["studies"].values():
            study["seed"] = list(config["seeds"])


def workflow_config(config: dict, configfiles=(), cli_config=None, schema_path=None, base_dir=".") -> Sources:
    """What the Snakefile does first: typed overrides, validation, defaults. Returns the layers."""
    sources = apply_overrides(config, configfiles, cli_config)
    check(config, schema_path, sources, base_dir)
    return sources


def load_config(configfiles=(), assignments: str = "", base_dir=".") -> dict:
    """The config a `snakemake --configfile F... --config set="..."` run would use (for lmgrid status / plan):
    config.yaml, then each file over it, then the assignments."""
    files = (["config.yaml"] if Path("config.yaml").is_file() else []) + [str(f) for f in configfiles]
    if not files:
        raise LmgridError("config.yaml: file not found (run in the repository, or give --configfile)")
    config: dict = {}
    for f in files:
        _merge(config, load_yaml(f))
    workflow_config(config, files, {SET_KEY: assignments} if assignments else {}, base_dir=base_dir)
    return config
