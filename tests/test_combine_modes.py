"""Test-time score modes (cache, dynamic, dynamic+cache) as score files and combination components (issue 26, items
3-5 in the pipeline: lmgrid.testtime.combine.adapted).  Tiny cells on the tiny corpus, one-point grids, so each test takes
seconds.  Each test also runs the broken variant named in its docstring and asserts that it fails.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from lmgrid.testtime.adapt import cli as adapt_cli
from lmgrid.testtime.adapt import dynamic, tune
from lmgrid.testtime.combine import adapted, cells, mixture, scorefile, select
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json
from lmgrid.neural.data import StreamChunks, encode, sentence_rows
from lmgrid.neural.module import evaluate
from lmgrid.ngram.external import count_to_npz
from lmgrid.ngram.model import train_run
from lmgrid.data.ppl import EOS, PAD
from lmgrid.run.key import normalise
from lmgrid.data.vocab import Vocab

from test_neural_support import tiny_corpus
from test_neural_train import train

ONE_POINT = {"window": [50], "theta": [1.0], "lam": [0.1]}
SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def cells_dir(tmp_path_factory):
    """A tiny corpus, its stream RNN and its KN 3-gram (trained once for the module)."""
    root = tmp_path_factory.mktemp("modes")
    corpus = tiny_corpus(root, train=600)
    _, rnn_dir = train(corpus, root, arch="rnn", regime="stream", epochs=2)
    vocab = Vocab.load(corpus["vocab_path"])
    count_to_npz(corpus["paths"]["train"], vocab, 3, root / "counts.npz")
    kn_dir = root / normalise("kn", "ngram", 3, 1, "window", 0).run_dir("c")
    train_run(counts_path=root / "counts.npz", vocab_path=corpus["vocab_path"], valid_path=corpus["paths"]["valid"],
              test_path=corpus["paths"]["test"], arch="kn", order=3, arpa_path=kn_dir / "model.arpa",
              metrics_path=kn_dir / "metrics.json", write_arpa="true")
    return {"root": root, "corpus": corpus, "rnn": rnn_dir, "kn": kn_dir}


def score(c, run_dir, mode, out, grid=None):
    p = c["corpus"]["paths"]
    return cells.write_scores(run_dir, p["valid"], p["test"], c["corpus"]["vocab_path"], mode, out, grid)


def test_a_mode_file_holds_the_base_files_token_sequence(cells_dir, tmp_path, monkeypatch):
    """The cache, dynamic and dynamic+cache files of a cell hold its base file's token sequence (count and
    tokens_sha256) for valid and test, and beside them adapt.json records the choice.  Mutation killed: a mode
    that reads a stream missing the split's first sentence (its targets no longer the corpus's): refused by
    write_scores with one line, nothing written."""
    c = cells_dir
    base = score(c, c["rnn"], "base", tmp_path / "base")
    grids = {"cache": ONE_POINT, "dynamic": {"lr": [0.5], "segment": [5]},
             "dynamic+cache": {**ONE_POINT, "lr": [0.5], "segment": [5]}}
    for mode, grid in grids.items():
        got = score(c, c["rnn"], mode, tmp_path / mode, grid)
        for split in ("valid", "test"):
            back = scorefile.read(tmp_path / mode, split)
            assert (back.count, back.tokens_sha256) == (base[split].count, base[split].tokens_sha256)
            assert back.mode == mode and got[split].file_ppl() == pytest.approx(back.ppl, rel=1e-6)
        record = read_json(tmp_path / mode / adapted.SETTINGS_FILE)
        assert record["mode"] == mode and set(record["settings"]) == set(grid)
        assert record["valid_ppl"] == pytest.approx(scorefile.read(tmp_path / mode, "valid").ppl, rel=1e-6)
    real = adapt_cli.split_stream

    def short(vocab, path):  # mutation: the stream without the split's first sentence
        ids = real(vocab, path)
        return ids[int(np.argmax(ids[1:].numpy() == int(ids[0]))) + 1:]

    monkeypatch.setattr(adapt_cli, "split_stream", short)
    with pytest.raises(LmgridError, match="not the corpus's targets in order") as e:
        score(c, c["rnn"], "cache", tmp_path / "bad", ONE_POINT)
    assert "\n" not in str(e.value) and not (tmp_path / "bad").exists()


def test_lam_zero_cache_mode_gives_the_one_stream_base_ppl(cells_dir, tmp_path, monkeypatch):
    """The pipeline's cache mode with the grid {lam: [0]} writes the model's own one-stream scores: valid and test
    PPL equal lmgrid's evaluate over a one-row stream (another code path) to 1e-6 and adapt.json's base PPLs.
    Mutation killed: the mode given no grid (the config's adapt: grid dropped on the way, so the defaults' lam > 0
    is chosen)."""
    c = cells_dir
    vocab = Vocab.load(c["corpus"]["vocab_path"])
    from lmgrid.neural.model_io import load_run

    model = load_run(c["rnn"]).model
    bptt = adapt_cli.run_settings(c["rnn"])["bptt"]
    one_row = {}
    for split, path in c["corpus"]["paths"].items():
        if split in ("valid", "test"):
            x, y = sentence_rows(encode(vocab, cells.load_split(path)), 1, vocab.index[EOS], vocab.index[PAD])
            nll, n = evaluate(model, StreamChunks(x, y, bptt), "stream", torch.device("cpu"))
            one_row[split] = math.exp(nll / n)
    lam0 = {"window": [50], "theta": [1.0], "lam": [0.0]}
    got = score(c, c["rnn"], "cache", tmp_path / "lam0", lam0)
    record = read_json(tmp_path / "lam0" / adapted.SETTINGS_FILE)
    for split in ("valid", "test"):
        assert got[split].file_ppl() == pytest.approx(one_row[split], rel=1e-6)
        assert got[split].file_ppl() == pytest.approx(record[f"base_{split}_ppl"], rel=1e-6)

    real = cells.MODES["cache"]
    monkeypatch.setitem(cells.MODES, "cache", lambda run_dir, paths, vocab, grid=None: real(run_dir, paths, vocab))
    dropped = score(c, c["rnn"], "cache", tmp_path / "dropped", lam0)
    assert dropped["test"].file_ppl() != pytest.approx(one_row["test"], rel=1e-6)


def test_a_test_time_mode_refuses_window_cells(cells_dir, tmp_path, monkeypatch):
    """A window-regime cell (ffnn, a window lstm) or an n-gram cell asked for a test-time mode: one line naming the
    cell and the mode, nothing written, from the mode function and from the config's combine: section (at plan
    time).  Mutation killed: the regime check removed, so a window-trained LSTM is silently scored as a stream."""
    c = cells_dir
    _, ffnn_dir = train(c["corpus"], tmp_path, arch="ffnn", n_step=3, epochs=1)
    _, lstm_dir = train(c["corpus"], tmp_path, arch="lstm", n_step=3, epochs=1)
    for run_dir in (ffnn_dir, lstm_dir, c["kn"]):
        for mode in adapted.METHODS:
            with pytest.raises(LmgridError) as e:
                score(c, run_dir, mode, tmp_path / "no", ONE_POINT if mode == "cache" else None)
            msg = str(e.value)
            assert "\n" not in msg and str(run_dir) in msg and f"mode {mode} " in msg
    assert not (tmp_path / "no").exists()
    window, stream = normalise("lstm", "torch", 3, 1, "window", 1), normalise("lstm", "torch", 3, 1, "stream", 1)
    with pytest.raises(LmgridError, match=r"combine\.x\.components\[0\]: mode cache .*lstm n3 l1 window s1"):
        select.components("x", {"components": [{"arch": "lstm", "mode": "cache"}]}, [window, stream])
    assert select.components("x", {"components": [{"arch": "lstm", "regime": "stream", "mode": "cache"}]},
                             [window, stream]) == [(stream, "cache")]

    monkeypatch.setattr(adapted, "check_stream_cell", lambda *a: None)  # mutation: no regime check
    score(c, lstm_dir, "cache", tmp_path / "silent", ONE_POINT)
    assert (tmp_path / "silent" / "test.npy").is_file()


def test_em_with_a_mode_component_fits_on_valid_only(cells_dir, tmp_path, monkeypatch, capsys):
    """`lmgrid combine` of an n-gram base file and an RNN cache-mode file: EM sees only the valid files (their
    token sequence), the result records the cache's settings, and the combinations table shows them.  Mutations
    killed: (a) a mode that hands test's log-probs in as valid's (refused by write_scores); (b) combine reading the
    test files in place of valid (refused by the fit); (c) a mode folder without its adapt.json (refused)."""
    from lmgrid.cli import main

    c = cells_dir
    kn, rnn = tmp_path / "kn", tmp_path / "rnn-cache"
    score(c, c["kn"], "base", kn)
    score(c, c["rnn"], "cache", rnn, ONE_POINT)
    seen = []
    real_fit = mixture.fit_weights

    def spy(valid, *a, **k):
        seen.extend((s.split, s.tokens_sha256) for s in valid)
        return real_fit(valid, *a, **k)

    monkeypatch.setattr(mixture, "fit_weights", spy)
    out = tmp_path / "mix"
    assert main(["combine", "--name", "mix", "--component", f"kn={kn}", "--component", f"rnn +cache={rnn}",
                 "--out-dir", str(out)]) in (0, None)
    valid_sha = scorefile.read(kn, "valid").tokens_sha256
    assert seen == [("valid", valid_sha)] * 2 and valid_sha != scorefile.read(kn, "test").tokens_sha256
    result = read_json(out / "result.json")
    want, _ = real_fit([scorefile.read(kn, "valid"), scorefile.read(rnn, "valid")])
    assert result["weights"] == pytest.approx(list(want))
    assert result["components"][1]["adapt"]["settings"] == {"window": 50, "theta": 1.0, "lam": 0.1}
    assert "window 50, theta 1, lam 0.1" in (out / "table.md").read_text()
    assert main(["combinations", "--results", str(out / "result.json"), "--csv", str(tmp_path / "all.csv"),
                 "--md", str(tmp_path / "all.md"), "--html", str(tmp_path / "all.html")]) in (0, None)
    assert "rnn +cache: window 50, theta 1, lam 0.1" in (tmp_path / "all.md").read_text()

    real_adapt = adapted.adapt_cell

    def swapped(*a, **k):  # (a) test's log-probs handed in as valid's
        got = real_adapt(*a, **k)
        return {**got, "valid": got["test"]}

    monkeypatch.setattr(adapted, "adapt_cell", swapped)
    with pytest.raises(LmgridError, match="valid"):
        score(c, c["rnn"], "cache", tmp_path / "swapped", ONE_POINT)
    assert not (tmp_path / "swapped").exists()

    real_read = scorefile.read
    monkeypatch.setattr(scorefile, "read", lambda folder, split: real_read(folder, "test"))  # (b)
    capsys.readouterr()
    assert main(["combine", "--name", "leak", "--component", f"kn={kn}", "--component", f"rnn={rnn}",
                 "--out-dir", str(tmp_path / "leak")]) == 2
    assert "fitted on valid only" in capsys.readouterr().err and not (tmp_path / "leak").exists()
    monkeypatch.setattr(scorefile, "read", real_read)

    (rnn / adapted.SETTINGS_FILE).unlink()  # (c)
    assert main(["combine", "--name", "bare", "--component", f"kn={kn}", "--component", f"rnn={rnn}",
                 "--out-dir", str(tmp_path / "bare")]) == 2
    assert "without its adapt.json" in capsys.readouterr().err


def test_schema_lists_the_modes_and_the_tuners_grids():
    """The schema's combine mode enum is cells.MODES' keys and its adapt: defaults are lmgrid.testtime.adapt.tune's grids
    (the defaults live in two places; this keeps them one).  Negative control: a grid that differs is seen."""
    schema = yaml.safe_load(SCHEMA.read_text())["properties"]
    mode = schema["combine"]["additionalProperties"]["properties"]["components"]["items"]["properties"]["mode"]
    assert mode["enum"] == list(cells.MODES)
    grids = {part: {k: v["default"] for k, v in schema["adapt"]["properties"][part]["properties"].items()}
             for part in ("cache", "dynamic")}

    def same(grid, ours):
        return {k: list(v) for k, v in ours.items()} == grid

    rms = {"rule": grids["dynamic"].pop("rule"), "train_tokens": grids["dynamic"].pop("train_tokens"),
           "lr": grids["dynamic"].pop("rms_lr"), "decay": grids["dynamic"].pop("decay")}
    assert same(grids["cache"], tune.CACHE_GRID) and same(grids["dynamic"], tune.DYNAMIC_GRID)
    assert not same(grids["dynamic"], {**tune.DYNAMIC_GRID, "lr": (1.0, 3.0)})
    # rule sgd by default; rule rms's grid is RMS_GRID (its segment axis is the shared one)
    assert rms.pop("rule") == "sgd" and rms.pop("train_tokens") == dynamic.TRAIN_TOKENS
    assert same({**rms, "segment": grids["dynamic"]["segment"]}, tune.RMS_GRID)
    assert not same({**rms, "segment": grids["dynamic"]["segment"]}, {**tune.RMS_GRID, "decay": (0.1,)})


def test_dynamic_mode_rule_rms_reads_the_train_split(cells_dir, tmp_path, monkeypatch):
    """The pipeline's dynamic mode with the grid of adapt.dynamic.rule rms (combine.adapted.grid_of) reads the train
    split given to write_scores (token-scores --train) for its gradient statistics, records rule rms in adapt.json,
    and refuses in one line when no train split is given.  Mutation killed: the train path dropped on its way from
    write_scores to the mode (the mode then refuses)."""
    c = cells_dir
    p = c["corpus"]["paths"]
    grid = adapted.grid_of("dynamic", {"dynamic": {"lr": [1.0], "segment": [10], "rule": "rms", "rms_lr": [1e-3],
                                                   "decay": [0.01], "train_tokens": 300}})
    seen = []
    real = tune.gradient_stats
    monkeypatch.setattr(tune, "gradient_stats", lambda model, ids, *a: seen.append(len(ids)) or real(model, ids, *a))

    def run(out):
        return cells.write_scores(c["rnn"], p["valid"], p["test"], c["corpus"]["vocab_path"], "dynamic", out, grid,
                                  train=p["train"])

    run(tmp_path / "rms")
    record = read_json(tmp_path / "rms" / adapted.SETTINGS_FILE)
    train_len = len(adapt_cli.split_stream(Vocab.load(c["corpus"]["vocab_path"]), p["train"]))
    assert record["settings"]["rule"] == "rms" and record["settings"]["train_tokens"] == 300
    assert seen == [train_len]
    with pytest.raises(LmgridError) as e:
        cells.write_scores(c["rnn"], p["valid"], p["test"], c["corpus"]["vocab_path"], "dynamic", tmp_path / "no",
                           grid)
    assert "needs the train split" in str(e.value) and "\n" not in str(e.value)
    mode = cells.MODES["dynamic"]
    monkeypatch.setitem(cells.MODES, "dynamic", lambda run_dir, paths, vocab, grid: mode(
        run_dir, {k: v for k, v in paths.items() if k != "train"}, vocab, grid))  # mutation: train dropped
    with pytest.raises(LmgridError, match="needs the train split"):
        run(tmp_path / "dropped")
