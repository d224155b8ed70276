"""lmgrid.run.record: the one writer and reader of a run's metrics.json (docs/contracts.md, "A run folder").

Each test names in its docstring the mutation of the code it kills; each was seen failing with it applied."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from lmgrid.analysis.fixtures import write_run
from lmgrid.tracking.mirror import cell_payload
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import write_json
from lmgrid.ngram.external import count_to_npz
from lmgrid.ngram.model import train_run
from lmgrid.run.record import VERSION, RunRecord
from lmgrid.run.key import RunKey, normalise
from lmgrid.data.vocab import Vocab

from test_neural_support import tiny_corpus

SRC = Path(__file__).resolve().parents[1] / "src" / "lmgrid"


def _neural() -> dict:
    """A neural run's metrics.json as lmgrid.neural.train wrote it before the version field: its keys in its order."""
    return {"name": "lstm n5 l2 window s1", "arch": "lstm", "impl": "cell", "n_step": 5, "layers": 2,
            "regime": "window", "seed": 1,
            "valid": {"ppl": 123.25, "nll_nats": 4810.5, "tokens": 1000, "oov_tokens": 3},
            "test": {"ppl": 120.5, "nll_nats": 4791.75, "tokens": 1000, "oov_tokens": 2},
            "params": 123456, "train_tokens_per_s": 5000.5, "eval_tokens_per_s": 20000.25,
            "eval_padding_fraction": 0.0, "train_tokens": 20000, "epochs": 3, "best_epoch": 3,
            "stopped_because": "budget", "lr_decays": 1, "lr_history": [0.001, 0.001, 0.0005],
            "valid_ppl_history": [200.5, 150.25, 123.25], "wall_s": 12.5, "device": "cpu (2 threads)",
            "precision": "32-true", "precision_reason": "asked for", "fp32_precision": {"cpu.matmul": "ieee"},
            "torch_version": "2.9.0", "lightning_version": "2.5.0", "hparams": {"lr": 0.001, "hidden_dim": 64},
            "start_unix_s": 1700000000.125, "end_unix_s": 1700000012.625, "cpu_s": 20.5, "max_rss_mib": 400.5}


def _one_line_error(path: Path, *words: str) -> str:
    with pytest.raises(LmgridError) as e:
        RunRecord.read(path)
    text = str(e.value)
    assert "\n" not in text and str(path) in text, text
    assert all(w in text for w in words), text
    return text


def test_a_neural_record_round_trips_with_the_old_writers_bytes(tmp_path):
    """Written and read back, a neural record is the same record; the file is, byte for byte, what the writers'
    dict literal gave before, plus one `"version": 1` line at the end.  Kills: from_dict dropping the fields it does
    not type (extra={}), and to_dict writing the extra fields before `params`."""
    old = _neural()
    record = RunRecord.from_dict(old, "fixture")
    written = record.write(tmp_path / "metrics.json")
    assert RunRecord.read(tmp_path) == record and written == {**old, "version": VERSION}
    write_json(tmp_path / "before.json", old)
    before = (tmp_path / "before.json").read_text()
    assert (tmp_path / "metrics.json").read_text() == before[:-3] + f',\n  "version": {VERSION}\n}}\n'
    assert record.get("hparams") == {"lr": 0.001, "hidden_dim": 64} and record.valid.ppl == 123.25


def test_an_ngram_record_from_its_writer_round_trips(tmp_path):
    """The n-gram job (lmgrid.ngram.model.train_run) writes through RunRecord: the file carries the version, reads
    back as what the job returned, and keeps its own fields typed (arpa_written a bool, settings an object).  Kills:
    to_dict leaving out `version` (the file would read, as version 1, but say nothing of its format)."""
    corpus = tiny_corpus(tmp_path, train=300)
    count_to_npz(corpus["paths"]["train"], Vocab.load(corpus["vocab_path"]), 3, tmp_path / "counts.npz")
    run = tmp_path / normalise("kn", "ngram", 3, 1, "window", 0).run_dir("c")
    returned = train_run(counts_path=tmp_path / "counts.npz", vocab_path=corpus["vocab_path"],
                         valid_path=corpus["paths"]["valid"], test_path=corpus["paths"]["test"], arch="kn",
                         order=3, arpa_path=run / "model.arpa", metrics_path=run / "metrics.json")
    on_disk = json.loads((run / "metrics.json").read_text())
    assert on_disk == returned and on_disk["version"] == VERSION and list(on_disk)[-1] == "version"
    record = RunRecord.read(run / "metrics.json")
    assert record.to_dict() == on_disk and record.is_ngram and record.n_step == 3
    assert record.get("arpa_written") is True and isinstance(record.get("settings"), dict)
    assert record.test.tokens == on_disk["test"]["tokens"] and record.get("order") == 3


def test_a_file_from_before_the_version_field_reads_as_version_1(tmp_path):
    """A finished grid's metrics.json has no `version`: it reads as version 1 with every field, and its MLflow
    payload (tracking.cell_payload) is the one a new file of the same run gives, so no mirrored run changes its
    params or metrics.  Kills: a missing version read as an error (data["version"]), and the payload taken from
    to_dict (a `version` metric on new cells only)."""
    key = RunKey("lstm", "torch", 3, 1, "window", 1)
    write_run(tmp_path, key)
    new = json.loads((tmp_path / "metrics.json").read_text())
    old = {k: v for k, v in new.items() if k != "version"}
    payload_new = cell_payload(key, tmp_path)
    # As before the field existed: the format's version is neither a param nor a metric of the mirrored run.
    assert not any("version" == k for part in ("params", "tags", "final") for k in payload_new[part])
    write_json(tmp_path / "metrics.json", old)
    record = RunRecord.read(tmp_path / "metrics.json")
    assert record.version == 1 and record.results() == old
    assert cell_payload(key, tmp_path) == payload_new


@pytest.mark.parametrize("drop, field", [(("params",), "'params'"), (("test", "nll_nats"), "'test.nll_nats'"),
                                         (("arch",), "'arch'")])
def test_a_missing_field_is_one_line_naming_the_file_and_the_field(tmp_path, drop, field):
    """Kills: a missing field read as None (data.get in place of the check), which a reader far from the file would
    trip over, and a score field named without its split (`nll_nats` for `test.nll_nats`)."""
    data = _neural()
    (data[drop[0]] if len(drop) == 2 else data).pop(drop[-1])
    write_json(tmp_path / "metrics.json", data)
    _one_line_error(tmp_path / "metrics.json", f"field {field} missing")


@pytest.mark.parametrize("change, field", [({"params": True}, "'params'"), ({"wall_s": "12 s"}, "'wall_s'"),
                                           ({"valid": [1.0]}, "'valid'"), ({"n_step": "5"}, "'n_step'"),
                                           ({"hparams": None}, "'hparams'"), ({"version": 2}, "'version'")])
def test_a_wrongly_typed_field_is_one_line_naming_the_file_and_the_field(tmp_path, change, field):
    """Also a version newer than this code reads.  Kills: bool taken for a number (`params: true` read as 1), and
    the extra fields left unchecked (`wall_s: "12 s"` would reach the summing readers)."""
    write_json(tmp_path / "metrics.json", {**_neural(), **change})
    _one_line_error(tmp_path / "metrics.json", field)


def test_bad_json_is_one_line_naming_the_file(tmp_path):
    """A file cut short (a disk that filled up) or not an object.  Kills: the JSON error let through as a traceback
    (fileio.read_json catching only FileNotFoundError)."""
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(_neural())[:200])
    _one_line_error(path, "not valid JSON")
    path.write_text("[1, 2]")
    _one_line_error(path, "JSON object")
    _one_line_error(tmp_path / "absent.json", "file not found")


def test_no_module_but_run_record_names_the_file():
    """Every reader goes through RunRecord: outside lmgrid.run.record no code names "metrics.json" (docstrings and
    help texts may).  Kills: a reader put back that opens the file itself (embed.pipeline reading the valid PPL
    with read_json(run_dir / "metrics.json"))."""
    found = []
    for f in sorted(SRC.rglob("*.py")):
        if f.relative_to(SRC).as_posix() == "run/record.py":
            continue
        tree = ast.parse(f.read_text(), str(f))
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(
            n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and node.value.endswith("metrics.json") and " " not in node.value:
                found.append(f"{f.relative_to(SRC)}:{node.lineno}")
    assert found == []
