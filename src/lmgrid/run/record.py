"""A run's result, `metrics.json`: the one writer and reader of the file, for n-gram and neural runs alike.

The shape (docs/contracts.md, "A run folder"): the run key's fields, the valid and test scores, the parameter
count, then what the kind of run adds (a neural run its training history, device and settings; an n-gram run its
order, method and estimation settings), and the format's `version`.  The fields every run has are typed
attributes of RunRecord; the rest are kept, in the order written, in `extra`, and those this module knows are
type-checked on reading, so a reader can rely on what it gets.

Version 1 is the shape the file has had since the first grid; files written before the `version` field existed
have none and are read as version 1, so a finished grid is read as it is and never needs rewriting.  A file that
is not valid JSON, lacks a field or holds one of the wrong type is one line (LmgridError) naming the file and the
field.  Writing keeps the keys in the order the writers always used, with `version` last, so a file's other bytes
are those it would have had before the field existed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json, write_json

VERSION = 1
RECORD_FILE = "metrics.json"  # in the run folder (RunKey.run_dir)
EVAL_SPLITS = ("valid", "test")  # the splits every run is scored on (and a cell's score files hold)
KEY_FIELDS = ("name", "arch", "impl", "n_step", "layers", "regime", "seed")
SCORE_FIELDS = ("ppl", "nll_nats", "tokens", "oov_tokens")

_NUMBER = "a number"
_INT = "an integer"
_TEXT = "a string"
_FLAG = "true or false"
_TABLE = "an object"
_LIST = "a list"
_TYPES: dict[str, str] = {
    **{k: _TEXT for k in ("name", "arch", "impl", "regime")},
    **{k: _INT for k in ("n_step", "layers", "seed", "params")},
    # Fields one kind of run adds, checked when present.  Their counts are checked as numbers only: readers sum and
    # print them, so a file is refused for what no reader could use, not for 3.0 where a writer meant 3.
    **{k: _NUMBER for k in ("train_tokens_per_s", "eval_tokens_per_s", "eval_padding_fraction", "train_tokens",
                            "epochs", "best_epoch", "lr_decays", "wall_s", "cpu_s", "max_rss_mib", "attempts",
                            "start_unix_s", "end_unix_s", "order", "budget_tokens_trained", "budget_flops",
                            "train_flops_per_token", "budget_tokens")},
    **{k: _TEXT for k in ("stopped_because", "device", "precision", "precision_reason", "torch_version",
                          "lightning_version", "method")},
    **{k: _TABLE for k in ("hparams", "fp32_precision", "settings", "timing")},
    **{k: _LIST for k in ("lr_history", "valid_ppl_history", "ngrams_per_order")},
    "arpa_written": _FLAG,
    "version": _INT,
}
_SCORE_TYPES = {"ppl": _NUMBER, "nll_nats": _NUMBER, "tokens": _INT, "oov_tokens": _INT}


def _fits(value, kind: str) -> bool:
    # bool is an int in Python, never a count or a measurement here.
    if kind == _NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, {_TEXT: str, _FLAG: bool, _TABLE: dict, _LIST: list}[kind])


def _checked(data: Mapping, name: str, kind: str, source, prefix: str = ""):
    if name not in data:
        raise LmgridError(f"{source}: field {prefix + name!r} missing (docs/contracts.md, metrics.json)")
    value = data[name]
    if not _fits(value, kind):
        raise LmgridError(f"{source}: field {prefix + name!r} should be {kind}, got {value!r:.60}")
    return value


@dataclass(frozen=True)
class SplitScore:
    """One split's score by the shared convention (lmgrid.data.ppl): PPL, summed NLL in nats, counted tokens, unknowns."""
    ppl: float
    nll_nats: float
    tokens: int
    oov_tokens: int

    @classmethod
    def from_dict(cls, data, source, split: str) -> SplitScore:
        if not isinstance(data, dict):
            raise LmgridError(f"{source}: field {split!r} should be an object, got {data!r:.60}")
        return cls(**{k: _checked(data, k, _SCORE_TYPES[k], source, f"{split}.") for k in SCORE_FIELDS})

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in SCORE_FIELDS}


@dataclass(frozen=True)
class RunRecord:
    """The content of one run's metrics.json.  `extra`: every other field, in file order (see the module doc)."""
    name: str
    arch: str
    impl: str
    n_step: int
    layers: int
    regime: str
    seed: int
    valid: SplitScore
    test: SplitScore
    params: int
    extra: Mapping[str, Any] = field(default_factory=dict)
    version: int = VERSION

    @property
    def is_ngram(self) -> bool:
        return self.impl == "ngram"

    def score(self, split: str) -> SplitScore:
        if split not in EVAL_SPLITS:
            raise LmgridError(f"split {split!r}: a run is scored on {' and '.join(EVAL_SPLITS)} only")
        return self.valid if split == "valid" else self.test

    def get(self, key: str, default=None):
        """A field by its name in the file, typed or extra (dict.get's contract, for the fields a kind may lack)."""
        if key in self.extra:
            return self.extra[key]
        if key in KEY_FIELDS or key in ("params", "version"):
            return getattr(self, key)
        if key in EVAL_SPLITS:
            return self.score(key).to_dict()
        return default

    def to_dict(self) -> dict:
        """The file's content: key fields, scores, params, the extra fields as written, the version last."""
        return {**{k: getattr(self, k) for k in KEY_FIELDS}, **{s: self.score(s).to_dict() for s in EVAL_SPLITS},
                "params": self.params, **self.extra, "version": self.version}

    def results(self) -> dict:
        """The run's content without the format's version: what is mirrored as the run's params and metrics."""
        out = self.to_dict()
        del out["version"]
        return out

    @classmethod
    def from_dict(cls, data, source="metrics.json") -> RunRecord:
        """Checks every field this module knows; `source` names the file in the one-line error."""
        if not isinstance(data, dict):
            raise LmgridError(f"{source}: should hold a JSON object, got {type(data).__name__}")
        version = data.get("version", 1)  # a file from before the field: the shape it has is version 1
        if not _fits(version, _INT) or not 1 <= version <= VERSION:
            raise LmgridError(f"{source}: field 'version' is {version!r}; this lmgrid reads versions 1 to {VERSION}")
        core = {k: _checked(data, k, _TYPES[k], source) for k in (*KEY_FIELDS, "params")}
        scores = {s: SplitScore.from_dict(_checked(data, s, _TABLE, source), source, s) for s in EVAL_SPLITS}
        taken = {*KEY_FIELDS, *EVAL_SPLITS, "params", "version"}
        extra = {k: v for k, v in data.items() if k not in taken}
        for k, v in extra.items():
            if k in _TYPES and not _fits(v, _TYPES[k]):
                raise LmgridError(f"{source}: field {k!r} should be {_TYPES[k]}, got {v!r:.60}")
        return cls(**core, **scores, extra=extra, version=version)

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        """A run's metrics.json (the file itself, or the run folder holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / RECORD_FILE
        return cls.from_dict(read_json(path), path)

    def write(self, path: str | Path) -> dict:
        """Write atomically (lmgrid.common.fileio); returns the content written.  The content is first read back as a reader
        would, so a writer's wrongly typed field stops the job here rather than every later reader of the grid."""
        content = self.to_dict()
        RunRecord.from_dict(content, path)
        write_json(path, content)
        return content
