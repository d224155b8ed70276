"""`reset_scores.json`: a stream-regime run's valid and test PPL with its state reset at every sentence start.

Written by `lmgrid reset-scores` (lmgrid.testtime.reset; rule `reset_scores`, workflow/rules/reset.smk) into the run
folder beside metrics.json, and read by the summary (column `test_ppl_reset`) and the reference table.  The one
writer and reader of the file (docs/contracts.md, "A run folder").  Its fields, in this order:

* `name`, `run_dir`: the run (RunKey.name) and its folder;
* `valid_ppl_reset`, `test_ppl_reset`: each sentence scored alone (lmgrid.data.ppl, "Reset");
* `valid_nll_nats`, `test_nll_nats`, `valid_tokens`, `test_tokens`, `valid_sentences`, `test_sentences`: the NLL
  sums and the counted targets (every word and one </s> per sentence: the run's own metrics.json token counts);
* `valid_ppl`, `test_ppl`: the run's metrics.json PPLs (state carried through rows), for reading side by side;
* `precision`, `device`, `threads`, `bptt`, `batch_sentences`, `wall_s`: how the pass ran;
* `version`: 1.
Only neural runs of the stream regime have one; a window run (n-grams included) is scored per sentence already.
"""
from __future__ import annotations

from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json, write_json

RESET_FILE = "reset_scores.json"  # in the run folder (RunKey.run_dir)
VERSION = 1
_NUMBERS = ("valid_ppl_reset", "test_ppl_reset", "valid_nll_nats", "test_nll_nats", "valid_ppl", "test_ppl")
_INTS = ("valid_tokens", "test_tokens", "valid_sentences", "test_sentences")
FIELDS = ("name", "run_dir", *_NUMBERS[:4], *_INTS, *_NUMBERS[4:], "precision", "device", "threads", "bptt",
          "batch_sentences", "wall_s", "version")


def _check(record: dict, where: str) -> dict:
    for key in FIELDS:
        if key not in record:
            raise LmgridError(f"{where}: missing field {key!r}")
    for key in _NUMBERS:
        if isinstance(record[key], bool) or not isinstance(record[key], (int, float)):
            raise LmgridError(f"{where}: field {key!r} is {record[key]!r}, not a number")
    for key in _INTS:
        if isinstance(record[key], bool) or not isinstance(record[key], int):
            raise LmgridError(f"{where}: field {key!r} is {record[key]!r}, not an integer")
    if record["version"] != VERSION:
        raise LmgridError(f"{where}: version {record['version']!r}, this lmgrid reads version {VERSION}")
    return record


def write(path: str | Path, record: dict) -> dict:
    """Check `record` (every field of FIELDS but version) and write it, keys in FIELDS' order."""
    out = {key: record[key] for key in FIELDS if key in record}
    out["version"] = VERSION
    extra = sorted(set(record) - set(FIELDS))
    if extra:
        raise LmgridError(f"{path}: unknown field {extra[0]!r}")
    write_json(path, _check(out, str(path)))
    return out


def read(path: str | Path) -> dict:
    """The file's fields, checked: one line naming the file and the field when one is missing or mistyped."""
    record = read_json(path)
    if not isinstance(record, dict):
        raise LmgridError(f"{path}: expected a JSON object")
    return _check(record, str(path))


def beside(metrics_path: str | Path) -> Path:
    """The reset file of the run whose metrics.json is `metrics_path`."""
    return Path(metrics_path).parent / RESET_FILE
