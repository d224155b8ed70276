"""Config validation: every bad value stops the run with one line naming the key."""
import copy

import pytest
import yaml

from lmgrid.orchestration.config import check
from lmgrid.common.errors import LmgridError
from lmgrid.run.key import RunKey, all_runs, expand_study


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
    (("vocab", "bogus"), 1, "vocab.bogus: unknown key"),
    (("vocab", "min_count"), "two", "vocab.min_count: 'two' is not of type 'integer'"),
    (("vocab", "min_count"), 0, "vocab.min_count: 0 is less than the minimum of 1"),
    (("studies", "context", "n_step"), [0, 3], "studies.context.n_step[0]: 0 is less than the minimum of 1"),
    (("studies", "context", "n_step"), [], "studies.context.n_step: [] should be non-empty"),
    (("studies",), {}, "studies: {} should be non-empty"),
    (("studies", "context", "arch"), ["lsmt"], "studies.context.arch[0]: 'lsmt' is not one of"),
    (("corpus", "kind"), "pdf", "corpus.kind: 'pdf' is not one of"),
    (("corpus", "max_len"), 20, "corpus.max_len: not supported for kind 'synth'"),
    (("corpus", "synth", "grammar"), {"nounz": 3}, "corpus.synth.grammar.nounz: unknown grammar setting"),
    (("corpus", "max_sentences"), {"train": -1}, "corpus.max_sentences.train: -1 is less than the minimum of 0"),
    (("corpus", "max_sentences"), {"train": 2.5}, "corpus.max_sentences.train: 2.5 is not of type 'integer'"),
    (("corpus", "max_sentences"), {"dev": 5}, "corpus.max_sentences.dev: unknown key"),
    (("corpus", "max_sentences"), 2000, "corpus.max_sentences: 2000 is not of type 'object'"),
    (("corpus", "max_sentences"), {"train": 10}, "corpus.max_sentences: not supported for kind 'synth'"),
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


# ---- overrides: typed, dotted, and errors that name where the bad value came from --------------------------

def _resolve(base, cli, files=("config.yaml",)):
    from lmgrid.orchestration.config import workflow_config

    cfg = copy.deepcopy(base)
    workflow_config(cfg, list(files), cli)
    return cfg


def test_nested_command_line_values_are_typed(base, repo, monkeypatch):
    monkeypatch.chdir(repo)
    # What Snakemake's --config train='{epochs: 5, lr: 0.02, tie_weights: true}' hands over: strings below the top.
    cfg = _resolve(base, {"train": {"epochs": "5", "lr": "0.02", "tie_weights": "true"}})
    assert cfg["train"]["epochs"] == 5 and cfg["train"]["lr"] == 0.02 and cfg["train"]["tie_weights"] is True
    assert cfg["train"]["batch_size"] == base["train"]["batch_size"]  # merged, not replaced


def test_dotted_assignments_set_one_node(base, repo, monkeypatch):
    monkeypatch.chdir(repo)
    cfg = _resolve(base, {"set": "train.epochs=5 train.per_arch.gru.lr=0.5 "
                                 "'studies={ctx: {arch: [mkn], n_step: [2, 3]}}'"})
    assert cfg["train"]["epochs"] == 5 and cfg["train"]["hidden_dim"] == base["train"]["hidden_dim"]
    assert cfg["train"]["per_arch"] == {"gru": {"lr": 0.5}}  # no defaults filled into an override entry
    assert list(cfg["studies"]) == ["ctx"] and cfg["studies"]["ctx"]["seed"] == [1]  # replaced, defaults filled


@pytest.mark.parametrize("cli,message", [
    ({"train": {"per_arch": {"transformer": {"lrr": "0.1"}}}},
     "--config: train.per_arch.transformer.lrr: unknown key (did you mean 'lr'?)"),
    ({"train": {"per_arch": {"lstm": {"dropout": "5", "hidden_dim": "-3"}}}},
     "--config: train.per_arch.lstm.dropout: 5 is greater than or equal to the maximum of 1"),
    ({"set": "train.per_arch.lstm.hidden_dim=-3"},
     "--config set: train.per_arch.lstm.hidden_dim: -3 is less than the minimum of 1"),
    ({"set": "train.heads=3"}, "--config set: train.heads: 3 does not fit: the transformer's hidden_dim (32)"),
    ({"set": "train.per_arch.transformer.heads=5"}, "--config set: train.per_arch.transformer.heads: 5 does not fit"),
    ({"set": "train.epochs"}, "--config set: 'train.epochs': expected KEY=VALUE"),
    ({"set": "vocab.min_count=0"}, "--config set: vocab.min_count: 0 is less than the minimum of 1"),
])
def test_bad_override_is_one_line_naming_its_source(base, repo, monkeypatch, cli, message):
    monkeypatch.chdir(repo)
    with pytest.raises(LmgridError) as exc:
        _resolve(base, cli)
    assert "\n" not in str(exc.value) and str(exc.value).startswith(message), str(exc.value)


def test_error_names_the_file_that_set_the_value(base, repo, tmp_path, monkeypatch):
    """A value from a second config file (--configfile) is blamed on that file, not on config.yaml."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "preset.yaml").write_text("train: {per_arch: {gru: {optimizer: adagrad}}}\n")
    cfg = copy.deepcopy(base)
    cfg["train"]["per_arch"] = {"gru": {"optimizer": "adagrad"}}
    from lmgrid.orchestration.config import workflow_config

    with pytest.raises(LmgridError, match=r"^preset.yaml: train.per_arch.gru.optimizer: 'adagrad' is not one of"):
        workflow_config(cfg, ["config.yaml", str(tmp_path / "preset.yaml")], {})
    cfg = copy.deepcopy(base)
    cfg["train"]["lr"] = "fast"
    with pytest.raises(LmgridError, match=r"^config.yaml: train.lr: 'fast' is not of type 'number'"):
        workflow_config(cfg, ["config.yaml", str(tmp_path / "preset.yaml")], {})


def _all_defaulted(node: dict, root: dict) -> bool:
    """Whether an object schema can be left out whole: it requires nothing and each of its keys has a default."""
    from lmgrid.orchestration.config import _resolve

    node = _resolve(node, root)
    props = node.get("properties", {})
    return node.get("type") == "object" and not node.get("required") and bool(props) and all(
        "default" in _resolve(sub, root) or _all_defaulted(sub, root) for sub in props.values())


def test_every_section_whose_keys_all_have_defaults_may_be_left_out(schema):
    """Walks the schema: no object requires a key that could be defaulted whole, and each such key has
    `default: {}` so that its keys get filled in.  kills: `vocab` in the top level's `required`."""
    from lmgrid.orchestration.config import _resolve, load_schema

    root = load_schema(schema)
    bad = []

    def walk(node: dict, where: str) -> None:
        node = _resolve(node, root)
        if node.get("x-fill-defaults") is False:  # train.per_arch: its entries hold only what differs
            return
        for key, sub in node.get("properties", {}).items():
            if _all_defaulted(sub, root):
                if key in node.get("required", []):
                    bad.append(f"{where}{key}: required, though every key of it has a default")
                if _resolve(sub, root).get("default") != {}:
                    bad.append(f"{where}{key}: no `default: {{}}`, so its keys are not filled in when it is left out")
            if isinstance(sub, dict):
                walk(sub, f"{where}{key}.")

    walk(root, "")
    assert bad == []


def test_a_config_of_ones_own_needs_no_vocab_section(base, schema, repo):
    """A config of one's own with only what has no default: corpus and studies."""
    own = {"corpus": base["corpus"], "studies": {"s": {"arch": ["kn"], "n_step": [2]}}}
    cfg = check(copy.deepcopy(own), schema, base_dir=repo)
    assert cfg["vocab"] == {"min_count": 1, "max_size": 0}
    assert cfg["train"]["epochs"] >= 1 and cfg["ngram"]["addk_k"] == 1.0


def test_one_seeds_setting_sets_every_studys_seeds(base, repo, monkeypatch):
    """`seeds:` replaces every study's seed list, so seed_table's 3 seeds become one with SET="seeds=[1]" (README);
    absent, each study keeps its own.  Kills "seeds ignored" (config.apply_seeds a no-op, run below as the negative
    control: the gates study would keep its 3 seeds)."""
    from lmgrid.orchestration import config as config_mod

    monkeypatch.chdir(repo)
    own = _resolve(base, {})
    assert own["studies"]["gates"]["seed"] == base["studies"]["gates"]["seed"] and len(own["studies"]["gates"]["seed"]) > 1
    one = _resolve(base, {"set": "seeds=[1]"})
    assert {name: study["seed"] for name, study in one["studies"].items()} == {name: [1] for name in one["studies"]}
    runs = all_runs(one["studies"])
    assert {k.seed for k in runs if not k.is_ngram} == {1} and len(runs) < len(all_runs(own["studies"]))
    with pytest.raises(LmgridError, match=r"--config set: seeds: \[\] should be non-empty"):
        _resolve(base, {"set": "seeds=[]"})
    monkeypatch.setattr(config_mod, "apply_seeds", lambda config: None)
    assert _resolve(base, {"set": "seeds=[1]"})["studies"]["gates"]["seed"] == own["studies"]["gates"]["seed"]


@pytest.mark.parametrize("assignments, message", [
    ("adapt.dynamic.rule=rms adapt.dynamic.lr=[2.0]",
     "--config set: adapt.dynamic.lr: rule sgd only, and adapt.dynamic.rule is 'rms': it would change nothing"),
    ("adapt.dynamic.decay=[0.1]",
     "--config set: adapt.dynamic.decay: rule rms only, and adapt.dynamic.rule is 'sgd': it would change nothing"),
])
def test_a_dynamic_setting_of_the_other_rule_is_refused(repo, monkeypatch, assignments, message):
    """Mutation killed: a setting only the other update rule reads, accepted (a grid reported that never ran).
    Negative control: the same values under their own rule, and the defaults under either rule, pass."""
    from lmgrid.orchestration.config import load_config

    monkeypatch.chdir(repo)
    with pytest.raises(LmgridError) as err:
        load_config([], assignments)
    assert str(err.value) == message
    load_config([], "adapt.dynamic.rule=rms adapt.dynamic.decay=[0.1]")
    load_config([], "adapt.dynamic.lr=[2.0]")
    load_config([], "adapt.dynamic.rule=rms")


@pytest.mark.parametrize("neutral", [{}, {"train": 0}, {"train": 0, "valid": 0, "test": 0}])
def test_a_cut_at_its_neutral_value_is_the_config_without_it(base, schema, repo, tmp_path, neutral):
    """corpus.max_sentences at 0 (or {}) checks to the very config that leaves it out, byte for byte: every rule's
    params and MLflow's data settings are built from it, so a finished grid reruns nothing when the key is added
    (the dry run of a finished grid: tests/test_workflow.py), and a config without it keeps the corpus node it had
    before the key existed.  Kills a neutral value kept in the config (no lmgrid.orchestration.config.drop_neutral_cut) and a
    schema default for the key (fill_defaults would put it into every config, grids finished before it included).
    Control, run here: a real cut (kind text, where it is allowed) does change the config, to the splits it cuts."""
    import json

    (tmp_path / "all.txt").write_text("".join(f"w{i} x\n" for i in range(40)))
    for kind in ({"kind": "synth", "synth": base["corpus"]["synth"]},
                 {"kind": "text", "text": {"path": str(tmp_path / "all.txt")}}):
        own = mutate(base, ("corpus",), {"name": "c", **kind})
        plain = json.dumps(check(copy.deepcopy(own), schema, base_dir=repo), sort_keys=True)
        assert "max_sentences" not in json.loads(plain)["corpus"]
        stated = mutate(own, ("corpus", "max_sentences"), neutral)
        assert json.dumps(check(stated, schema, base_dir=repo), sort_keys=True) == plain
    cut = check(mutate(own, ("corpus", "max_sentences"), {**neutral, "valid": 3}), schema, base_dir=repo)
    assert json.dumps(cut, sort_keys=True) != plain and cut["corpus"]["max_sentences"] == {"valid": 3}
