"""Config validation: every bad value stops the run with one line naming the key."""
import copy

import pytest
import yaml

from lmgrid.config import check
from lmgrid.errors import LmgridError
from lmgrid.runkey import RunKey, all_runs, expand_study


@pytest.fixture()
def base(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())


@pytest.fixture()
def schema(repo):
    return repo / "workflow" / "schemas" / "config.schema.yaml"


def test_default_config_is_valid(base, schema, repo):
    check(base, schema, base_dir=repo)


def mutate(cfg, path, value):
    cfg = copy.deepcopy(cfg)
    node = cfg
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return cfg


@pytest.mark.parametrize("path,value,message", [
    (("vocab", "bogus"), 1, "vocab: Additional properties are not allowed ('bogus' was unexpected)"),
    (("vocab", "min_count"), "two", "vocab.min_count: 'two' is not of type 'integer'"),
    (("vocab", "min_count"), 0, "vocab.min_count: 0 is less than the minimum of 1"),
    (("studies", "context", "n_step"), [0, 3], "studies.context.n_step[0]: 0 is less than the minimum of 1"),
    (("studies", "context", "n_step"), [], "studies.context.n_step: [] should be non-empty"),
    (("studies",), {}, "studies: {} should be non-empty"),
    (("studies", "context", "arch"), ["lsmt"], "studies.context.arch[0]: 'lsmt' is not one of"),
    (("corpus", "kind"), "pdf", "corpus.kind: 'pdf' is not one of"),
    (("corpus", "max_len"), 20, "corpus.max_len: not supported for kind 'synth'"),
    (("corpus", "synth", "grammar"), {"nounz": 3}, "corpus.synth.grammar.nounz: unknown grammar setting"),
])
def test_bad_values(base, schema, path, value, message):
    with pytest.raises(LmgridError) as exc:
        check(mutate(base, path, value), schema, source="cfg.yaml")
    text = str(exc.value)
    assert "\n" not in text and text.startswith("cfg.yaml: ") and message in text, text


def test_neural_window_needs_two_tokens(base, schema):
    cfg = mutate(base, ("studies", "context"), {"arch": ["lstm"], "n_step": [1, 2]})
    with pytest.raises(LmgridError, match=r"studies.context.n_step: 1 is below 2"):
        check(cfg, schema)


def test_ffnn_has_no_stream_regime(base, schema):
    cfg = mutate(base, ("studies", "s"), {"arch": ["ffnn", "lstm"], "n_step": [5], "regime": ["stream"]})
    with pytest.raises(LmgridError, match=r"studies.s: arch ffnn has a fixed window and no stream regime"):
        check(cfg, schema)


def test_missing_corpus_file_and_bad_ratios(base, schema, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a b\n")
    cfg = copy.deepcopy(base)
    cfg["corpus"] = {"name": "t", "kind": "text", "text": {"path": str(tmp_path / "missing.txt")}}
    with pytest.raises(LmgridError, match=r"corpus.text.path: file not found: .*missing.txt"):
        check(cfg, schema)
    cfg["corpus"]["text"] = {"path": str(text), "ratios": {"train": 0.8, "valid": 0.1, "test": 0.2}}
    with pytest.raises(LmgridError, match=r"corpus.text.ratios: must sum to 1, got 1.1"):
        check(cfg, schema)
    cfg["corpus"] = {"name": "p", "kind": "ptb", "files": {"train": str(text), "valid": str(text), "test": "nope.txt"}}
    with pytest.raises(LmgridError, match=r"corpus.files.test: file not found: nope.txt"):
        check(cfg, schema)


def test_study_expansion_dedups_and_normalises():
    study = {"arch": ["mkn", "lstm", "rnn"], "n_step": [3, 5], "layers": [1, 2], "impl": ["torch", "cell"],
             "seed": [1, 2], "regime": ["window"]}
    keys = expand_study(study)
    ngram = [k for k in keys if k.arch == "mkn"]
    assert ngram == [RunKey("mkn", "ngram", 3, 1, "window", 0), RunKey("mkn", "ngram", 5, 1, "window", 0)]
    assert {k.impl for k in keys if k.arch == "lstm"} == {"torch", "cell"}
    assert {k.impl for k in keys if k.arch == "rnn"} == {"torch"}  # rnn has one implementation
    assert len(keys) == 2 + 2 * 2 * 2 * 2 + 2 * 2 * 2
    # A cell shared by two studies is one run; its folder depends on its parameters only.
    both = all_runs({"a": study, "b": {"arch": ["lstm"], "n_step": [3], "impl": ["cell"], "layers": [2], "seed": [1]}})
    assert len(both) == len(keys)
    assert RunKey("lstm", "cell", 3, 2, "window", 1).run_dir("synth") == "results/synth/runs/lstm/cell/n3_l2_window_s1"


def test_stream_runs_ignore_n_step():
    keys = expand_study({"arch": ["gru"], "n_step": [3, 5, 7], "regime": ["stream"]})
    assert keys == [RunKey("gru", "torch", 0, 1, "stream", 1)]
