"""A user's own architecture as an lmgrid model (docs/models.md, "Your own model"; the contract: class attributes
lmgrid_name, lmgrid_display, lmgrid_regimes, lmgrid_gates, an `embedding`, `out_dim`, `features` and, for the stream
regime, `detach_state`).

* `load_class(reference)`: a reference -> the class and its source file.  Three forms: `path/to/file.py:Class`
  (relative to the folder the workflow runs in), `package.module:Class`, or a bare name: an entry point of the group
  `lmgrid.models`.
* `check_class(cls)`: the class attributes, so a bad plug-in is refused with one line before any job.
* `probe(cls, regimes)`: the class built on a tiny ModelConfig and one forward per regime it will be used in: the
  shapes (hidden [B, T or 1, out_dim], gates [layers, B, T, H] per declared gate) and, for the stream regime, that a
  later token leaves earlier positions alone (causality) and that the state can be passed back and detached.
* `PluginLM`: the class under lmgrid's own output layer (full or adaptive softmax, tied or not), an LMBase like every
  built-in, so training, scoring, test-time adaptation and embeddings treat it as one of theirs.

Errors are PluginError (an LmgridError) without the config key: the caller (lmgrid.orchestration.config) puts the
key and the value in front.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import torch
from torch import nn

from lmgrid.common.errors import LmgridError
from lmgrid.models.adaptive import output_layer
from lmgrid.models.common import LMBase
from lmgrid.models.config import ModelConfig
from lmgrid.common import plugins as registry


class PluginError(LmgridError):
    """A bad plug-in; its text lacks the config key and value, which the caller adds."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _import_file(path: Path):
    """The module in a file, imported afresh under a name of its own (an edited file is read again)."""
    name = f"lmgrid_plugin_{registry.file_sha256(str(path))[:16]}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_class(reference: str, base_dir: str | Path = ".", source: str | None = None) -> tuple[type, str]:
    """The class a reference names, and its source file (absolute).  `source`: where the file was when the run was
    set up (a model.ckpt's), tried when a file reference is not found relative to base_dir."""
    try:
        if registry.is_reference(reference):
            where, _, cls_name = reference.rpartition(":")
            if not where or not cls_name:
                raise PluginError("expected FILE.py:CLASS or MODULE:CLASS")
            if where.endswith(".py") or "/" in where or "\\" in where:
                path = Path(base_dir) / where
                if not path.is_file() and source and Path(source).is_file():
                    path = Path(source)
                if not path.is_file():
                    raise PluginError(f"file not found: {path}")
                module = _import_file(path.resolve())
            else:
                module = importlib.import_module(where)
            cls = getattr(module, cls_name, None)
            if cls is None:
                raise PluginError(f"{where} has no class {cls_name}")
        else:
            found = registry.entry_point(reference)
            if found is None:
                raise PluginError(f"no architecture or plug-in of that name (a plug-in is FILE.py:CLASS, "
                                  f"MODULE:CLASS or an entry point of the group {registry.ENTRY_POINT_GROUP})")
            cls = found.load()
    except PluginError:
        raise
    except BaseException as e:  # the user's module failing to import, whatever it raises
        if isinstance(e, KeyboardInterrupt):
            raise
        raise PluginError(f"cannot import the plug-in ({_first_line(e)})") from None
    if not inspect.isclass(cls):
        raise PluginError(f"{cls!r} is not a class")
    try:
        src = inspect.getsourcefile(cls)
    except TypeError:
        src = None
    if not src:
        raise PluginError("cannot find the plug-in's source file (a class defined in a .py file is needed)")
    return cls, str(Path(src).resolve())


def check_class(cls: type) -> registry.PluginFacts:
    """The class attributes, checked; the facts without the reference and source (the caller fills them)."""
    if not issubclass(cls, nn.Module):
        raise PluginError(f"{cls.__name__} is not a torch.nn.Module")
    name = getattr(cls, "lmgrid_name", None)
    if not isinstance(name, str) or not registry.NAME_PATTERN.fullmatch(name):
        raise PluginError(f"{cls.__name__}.lmgrid_name: {name!r} is not a name like [a-z][a-z0-9_]{{0,30}}")
    if name in registry.BUILTIN_NAMES:
        raise PluginError(f"{cls.__name__}.lmgrid_name: {name!r} clashes with a built-in architecture "
                          f"({', '.join(registry.BUILTIN_NAMES)})")
    regimes = getattr(cls, "lmgrid_regimes", ("window",))
    regimes = (regimes,) if isinstance(regimes, str) else tuple(regimes)
    if not regimes or any(r not in registry.REGIMES for r in regimes):
        raise PluginError(f"{cls.__name__}.lmgrid_regimes: {regimes!r} is not a choice of {registry.REGIMES}")
    gates = getattr(cls, "lmgrid_gates", ())
    gates = (gates,) if isinstance(gates, str) else tuple(gates)
    if any(not isinstance(g, str) or not g for g in gates):
        raise PluginError(f"{cls.__name__}.lmgrid_gates: {gates!r} is not a tuple of gate names")
    if not callable(getattr(cls, "features", None)):
        raise PluginError(f"{cls.__name__} has no method features(tokens, state, return_gates, last_only)")
    if "stream" in regimes and not callable(getattr(cls, "detach_state", None)):
        raise PluginError(f"{cls.__name__} supports the stream regime but has no method detach_state(state)")
    display = getattr(cls, "lmgrid_display", name)
    return registry.PluginFacts(name=name, reference="", source="", sha256="", display=str(display or name),
                                regimes=regimes, gates=gates, citation=str(getattr(cls, "lmgrid_reference", "")))


def resolve(reference: str, base_dir: str | Path = ".", source: str | None = None,
            register: bool = True) -> tuple[type, registry.PluginFacts]:
    """Import and check a plug-in, and register its facts (lmgrid.common.plugins) under its lmgrid_name (with
    register=False only its class, for this process)."""
    cls, src = load_class(reference, base_dir, source)
    f = check_class(cls)
    facts = registry.PluginFacts(**{**f.__dict__, "reference": reference, "source": src,
                                    "sha256": registry.file_sha256(src), "class_name": cls.__name__})
    if register:
        registry.register(facts)
    _CLASSES[facts.name] = cls
    return cls, facts


_CLASSES: dict[str, type] = {}


def plugin_class(name: str) -> type:
    """The class of a registered plug-in, imported from its reference when this process has not yet."""
    if name not in _CLASSES:
        facts = registry.facts(name)
        if facts is None:
            raise LmgridError(f"model.arch: {name!r} is not a known architecture or registered plug-in")
        ensure(facts.spec_entry())
    return _CLASSES[name]


def ensure(entry: dict, file: str | None = None) -> type:
    """A run spec's or model.ckpt's `plugin` entry -> the class (imported, checked, registered); refused when the
    class's lmgrid_name is no longer the run's.  `file`: a copy of the class's source file to import it from instead
    (an MLflow model's artifact: in a fresh environment neither the reference nor the original path may exist)."""
    if file:
        cls_name = entry.get("class") or entry["reference"].rpartition(":")[2]
        reference = f"{Path(file).resolve()}:{cls_name}"
    else:
        reference = entry["reference"]
    # A copy of the file (an MLflow model's) leaves the facts of the plug-in, where this process has them, alone:
    # the MLflow sync logs the next cell's model with the original file, not with a copy it deleted.
    register = not file or registry.facts(entry["name"]) is None
    cls, facts = resolve(reference, ".", entry.get("source"), register=register)
    if facts.name != entry["name"]:
        raise LmgridError(f"plugin: {reference!r} now names {facts.name!r}, the run was "
                          f"{entry['name']!r}")
    return cls


class PluginLM(LMBase):
    """A plug-in's body under lmgrid's output layer: forward = head(features(...))."""

    def __init__(self, cls: type, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.body = cls(cfg)
        emb = getattr(self.body, "embedding", None)
        if not isinstance(emb, nn.Embedding):
            raise PluginError(f"{cls.__name__}: has no nn.Embedding named `embedding`")
        out_dim = getattr(self.body, "out_dim", None)
        if isinstance(out_dim, bool) or not isinstance(out_dim, int) or out_dim < 1:
            raise PluginError(f"{cls.__name__}.out_dim: {out_dim!r} is not a positive integer")
        self.out_dim = out_dim
        self.head = output_layer(cfg, out_dim, emb if cfg.tie_weights else None)

    @property
    def embedding(self) -> nn.Embedding:  # the word-vector export and tying read it; not a second registration
        return self.body.embedding

    def features(self, tokens, state=None, return_gates: bool = False, last_only: bool = False):
        hidden, state, gates = self.body.features(tokens, state, return_gates=return_gates, last_only=last_only)
        if return_gates and gates is None:
            gates = {}
        return hidden, state, gates

    def detach_state(self, state):
        fn = getattr(self.body, "detach_state", None)
        return fn(state) if fn is not None else None


def _shape(t) -> str:
    return list(t.shape).__repr__() if isinstance(t, torch.Tensor) else type(t).__name__


@torch.no_grad()
def probe(cls: type, regimes, layers: int = 2) -> None:
    """One forward per regime on a tiny model; raises PluginError naming what is wrong."""
    gates_declared = tuple(registry.facts(cls.lmgrid_name).gates) if registry.facts(cls.lmgrid_name) else ()
    vocab, n_step, batch, emb_dim, hidden_dim = 13, 4, 2, 6, 8
    # Every field given here (models/ reads no schema): small, no dropout, the full softmax, untied.
    cfg = ModelConfig(arch=cls.lmgrid_name, impl=registry.IMPL, vocab_size=vocab, n_step=n_step, layers=layers,
                      emb_dim=emb_dim, hidden_dim=hidden_dim, dropout=0.0, weight_drop=0.0, tie_weights=False,
                      activation="tanh", direct=False, heads=1, max_len=16, context_len=0, residual=False,
                      output_layer="full", cutoffs=[], init_range=0.0, compile=False)
    try:
        model = PluginLM(cls, cfg).eval()
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(f"building it on a tiny ModelConfig failed ({_first_line(e)})") from None
    emb = model.embedding
    if tuple(emb.weight.shape) != (vocab, emb_dim):
        raise PluginError(f"embedding is {list(emb.weight.shape)}, expected [vocab_size, emb_dim] = [{vocab}, {emb_dim}]")
    gen = torch.Generator().manual_seed(0)
    for regime in regimes:
        T = n_step - 1 if regime == "window" else 6
        tokens = torch.randint(0, vocab, (batch, T), generator=gen)
        try:
            hidden, state, gates = model.body.features(tokens, None, return_gates=bool(gates_declared),
                                                       last_only=regime == "window")
        except Exception as e:
            raise PluginError(f"features() failed in the {regime} regime ({_first_line(e)})") from None
        ok_T = (1, T) if regime == "window" else (T,)
        if (not isinstance(hidden, torch.Tensor) or hidden.dim() != 3 or hidden.shape[0] != batch
                or hidden.shape[1] not in ok_T or hidden.shape[2] != model.out_dim):
            raise PluginError(f"features() returned hidden of shape {_shape(hidden)} in the {regime} regime, "
                              f"expected [{batch}, {' or '.join(map(str, ok_T))}, out_dim={model.out_dim}]")
        if gates_declared:
            if not isinstance(gates, dict) or set(gates) != set(gates_declared):
                raise PluginError(f"features(return_gates=True) returned gates {sorted(gates) if isinstance(gates, dict) else gates!r}, "
                                  f"expected {sorted(gates_declared)} (lmgrid_gates)")
            for g, v in gates.items():
                if (not isinstance(v, torch.Tensor) or v.dim() != 4 or v.shape[0] != layers or v.shape[1] != batch
                        or v.shape[2] != T):
                    raise PluginError(f"gate {g!r} has shape {_shape(v)}, expected [layers={layers}, {batch}, "
                                      f"{T}, H]")
        if regime == "stream":
            later = tokens.clone()
            later[:, -1] = (later[:, -1] + 1) % vocab
            h2, _, _ = model.body.features(later, None)
            if not torch.allclose(hidden[:, :-1], h2[:, :-1], atol=1e-5):
                raise PluginError("is not causal in the stream regime: changing the last token changed the "
                                  "outputs at earlier positions")
            try:
                h3, _, _ = model.body.features(tokens, model.detach_state(state))
            except Exception as e:
                raise PluginError(f"cannot read a second chunk with the state of the first "
                                  f"({_first_line(e)})") from None
            if tuple(h3.shape) != tuple(hidden.shape):
                raise PluginError(f"the second chunk's hidden has shape {_shape(h3)}, the first's {_shape(hidden)}")
        # The whole model, output layer included: logits [B, T', V].
        logits, _, _ = model(tokens, None, last_only=regime == "window")
        if logits.shape[-1] != vocab:
            raise PluginError(f"the model's logits have shape {_shape(logits)}, expected [..., {vocab}]")


@torch.no_grad()
def features_flops(cfg: ModelConfig, regime: str, bptt: int | None) -> float:
    """A plug-in's forward FLOPs per predicted token before the output layer, counted by torch's FLOP counter
    (matrix products, 2 per multiply-add, as lmgrid.models.flops counts the built-ins) on one forward of a batch of
    one: a window (one predicted token), or a chunk of bptt tokens in the stream regime (divided by bptt)."""
    from torch.utils.flop_counter import FlopCounterMode

    body = plugin_class(cfg.arch)(cfg).eval()
    T = cfg.n_step - 1 if regime == "window" else (bptt or 35)
    tokens = torch.zeros(1, T, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with counter:
        body.features(tokens, None, return_gates=False, last_only=regime == "window")
    return counter.get_total_flops() / (1 if regime == "window" else T)
