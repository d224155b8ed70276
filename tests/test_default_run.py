"""The default run (`make run` on config.yaml) is a first impression sized to a time budget (issue 46: at most 8
minutes on 2 AVX2 cores, install included).  Its cost was cut by training on fewer sentences and stopping after one
halving of the learning rate; these tests keep what the cut must not touch: every word of the grammar is still in
train (no unknown word in valid or test), the grid still shows every architecture, the n_step and depth axes, the gates
over seeds, the LSTM implementations, the stream regime, a combination, the embeddings and MLflow, and
docs/presets.md still states the settings config.yaml has.
Each test also runs the broken variant it guards against (its negative control) and sees its check fail."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from lmgrid.data.synth import END, Grammar, GrammarConfig
from lmgrid.run.key import NEURAL_ARCHS, NGRAM_ARCHS

REPO = Path(__file__).resolve().parents[1]


def _config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def words_missing_from_train(config: dict) -> set[str]:
    """The grammar's words (lmgrid.data.synth.Lexicon.words) that the config's train split never uses: each is an
    unknown word wherever valid or test holds it (the splits are one sample cut in three, as `lmgrid synth` does)."""
    synth = config["corpus"]["synth"]
    grammar = Grammar(GrammarConfig(**synth["grammar"]))
    sizes = synth["sentences"]
    sample = grammar.sample(sizes["train"] + sizes["valid"] + sizes["test"], synth["seed"])
    seen = {w for sentence, _ in sample[:sizes["train"]] for w in sentence}
    return grammar.lex.words() - seen - {END}


def test_default_train_split_holds_every_word_of_the_grammar():
    """Fewer training sentences must not make words of valid or test unknown: every word the grammar can produce is
    in the default train split.  Kills: a train split cut too far (the negative control: 150 sentences, where some of
    the rare Zipf-tail words are never drawn)."""
    config = _config()
    assert words_missing_from_train(config) == set()
    short = copy.deepcopy(config)
    short["corpus"]["synth"]["sentences"]["train"] = 150
    assert words_missing_from_train(short), "150 sentences should miss some of the grammar's rare words"


def missing_features(config: dict) -> list[str]:
    """What the default grid no longer demonstrates, in words (empty: all of it)."""
    studies, missing = config["studies"], []
    archs = {a for s in studies.values() for a in s["arch"]}
    missing += [f"arch {a}" for a in (*NGRAM_ARCHS, *NEURAL_ARCHS) if a not in archs]
    if not any(len(s.get("n_step", [])) >= 3 and len(set(s["arch"]) & set(NGRAM_ARCHS)) for s in studies.values()):
        missing.append("an n_step axis of 3 or more values with the n-grams")
    if not any(len(s.get("layers", [])) >= 2 for s in studies.values()):
        missing.append("a depth axis (2 or more layers values)")
    if not any({"lstm", "gru"} <= set(s["arch"]) and len(s.get("seed", [])) >= 3 and len(s.get("n_step", [])) >= 3
               for s in studies.values()):
        missing.append("the gates of lstm and gru over 3 seeds and 3 n_step values")
    if not any(len(s.get("impl", [])) >= 3 for s in studies.values()):
        missing.append("the LSTM implementations")
    if not any("stream" in s.get("regime", []) for s in studies.values()):
        missing.append("the stream regime")
    if not config.get("combine"):
        missing.append("a combination")
    if not config.get("embeddings", {}).get("enabled", True):
        missing.append("the embeddings")
    if not config.get("mlflow", {}).get("tracking_uri"):
        missing.append("MLflow")
    return missing


def test_default_grid_keeps_what_it_demonstrates():
    """A cost cut of the default run takes tokens and epochs, not features: every architecture, the n_step and
    layers axes, the gates over seeds, the implementations, the stream regime, a combination, the embeddings and
    MLflow are all in config.yaml.  Kills: a study or arch dropped to save time (the negative controls: the
    Transformer taken out of every study, and the gates study cut to one seed)."""
    config = _config()
    assert missing_features(config) == []
    no_transformer = copy.deepcopy(config)
    for study in no_transformer["studies"].values():
        study["arch"] = [a for a in study["arch"] if a != "transformer"]
    assert missing_features(no_transformer) == ["arch transformer"]
    one_seed = copy.deepcopy(config)
    one_seed["studies"]["gates"]["seed"] = [1]
    assert missing_features(one_seed) == ["the gates of lstm and gru over 3 seeds and 3 n_step values"]


HALVINGS = {1: "the plateau after the halving ends the run", 2: "the plateau after the 2nd halving ends the run"}


def doc_mismatches(config: dict, doc: str) -> list[str]:
    """Where docs/presets.md's table of the default grid no longer says what config.yaml sets."""
    out = []
    train = config["corpus"]["synth"]["sentences"]["train"]
    if f"{train:,} training sentences |" not in doc:
        out.append(f"corpus.synth.sentences.train {train}")
    decays = config["train"]["lr_decays"]
    if HALVINGS.get(decays, f"lr_decays {decays}") not in doc:
        out.append(f"train.lr_decays {decays}")
    if not re.search(r"Adam lr %s, batch %d;" % (re.escape(str(config["train"]["lr"])), config["train"]["batch_size"]),
                     doc):
        out.append("train.lr / train.batch_size")
    return out


def test_presets_doc_states_the_default_settings():
    """docs/presets.md, "The default grid", states the default's training sentences, halvings, rate and batch as
    config.yaml sets them.  Kills: config.yaml's sizes changed without the doc (the negative control: the old
    6,000 sentences and 2 halvings, which the doc no longer states)."""
    config, doc = _config(), (REPO / "docs" / "presets.md").read_text()
    assert doc_mismatches(config, doc) == []
    old = copy.deepcopy(config)
    old["corpus"]["synth"]["sentences"]["train"], old["train"]["lr_decays"] = 6000, 2
    assert doc_mismatches(old, doc) == ["corpus.synth.sentences.train 6000", "train.lr_decays 2"]
