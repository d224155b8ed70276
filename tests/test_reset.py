"""The reset pass (lmgrid.testtime.reset): a stream run scored with its state reset at every sentence start.

The corpus makes context across sentences matter: a topic (its own three words) persists from sentence to sentence
and switches with probability 0.1, and sentences have 2 to 8 words, so rows of one batch have different lengths
and padding is there to be mishandled.  One stream RNN is trained on it in fp32 (32-true: the comparisons are exact
to float32 rounding on any CPU) and shared by the tests.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from lmgrid import cli
from lmgrid.common.errors import LmgridError
from lmgrid.data.corpus import load_split
from lmgrid.data.ppl import EOS, PAD, perplexity
from lmgrid.data.vocab import Vocab
from lmgrid.neural import data as data_mod
from lmgrid.neural.data import encode
from lmgrid.neural.model_io import load_run
from lmgrid.run import reset_scores
from lmgrid.testtime import reset

from test_neural_support import write_corpus
from test_neural_train import train


def topic_sentences(n: int, rng: np.random.Generator, state: list) -> list[list[str]]:
    out = []
    for _ in range(n):
        if rng.random() < 0.1:
            state[0] = int(rng.integers(2))
        out.append([f"t{state[0]}w{int(w)}" for w in rng.integers(3, size=int(rng.integers(2, 9)))])
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("reset")
    rng, state = np.random.default_rng(7), [0]
    corpus = write_corpus(root, {"train": topic_sentences(1200, rng, state), "valid": topic_sentences(150, rng, state),
                                 "test": topic_sentences(300, rng, state)})
    metrics, run_dir = train(corpus, root, arch="rnn", regime="stream", epochs=3, emb_dim=16, hidden_dim=32, lr=0.01,
                             stream_batch_size=16, bptt=10, lr_decays=0, precision="32-true")
    vocab = Vocab.load(corpus["vocab_path"])
    ids = encode(vocab, load_split(corpus["paths"]["test"]))
    return {"corpus": corpus, "metrics": metrics, "run_dir": run_dir, "model": load_run(run_dir).model,
            "vocab": vocab, "ids": ids}


def _reset_nll(t, batch_sentences: int) -> torch.Tensor:
    v = t["vocab"]
    return reset.reset_token_nll(t["model"], t["ids"], eos=v.index[EOS], pad=v.index[PAD], bptt=10,
                                 batch_sentences=batch_sentences)


def _ppl(nll: torch.Tensor) -> float:
    return perplexity(float(nll.double().sum()), nll.numel())


def _hand_loop(t) -> torch.Tensor:
    """Each sentence alone, one at a time: `</s> w1 .. wn` from a zero state (state None), the whole sentence in one
    forward, NLL of w1 .. wn </s>."""
    eos, out = t["vocab"].index[EOS], []
    model = t["model"].eval()
    with torch.no_grad():
        for s in t["ids"]:
            logits, _, _ = model(torch.tensor([[eos, *s]]), None)
            logp = torch.log_softmax(logits[0].float(), -1)
            out.append(-logp.gather(1, torch.tensor([*s, eos])[:, None])[:, 0])
    return torch.cat(out)


def _one_row_per_batch(monkeypatch, corpus_order: bool = False):
    """The mutation "state carried across the reset": a batch's sentences in one row, the state carried across them;
    with corpus_order, also unsorted, so that one batch of every sentence is the whole split read as one stream
    (a reset that resets nothing)."""
    real = data_mod.sentence_rows
    monkeypatch.setattr(data_mod, "sentence_rows", lambda ids, rows, eos, pad: real(ids, 1, eos, pad))
    if corpus_order:
        monkeypatch.setattr(reset, "length_order", lambda ids: list(range(len(ids))))


def test_reset_pass_equals_each_sentence_scored_alone(trained, monkeypatch):
    """Every counted target's NLL equals a hand loop that scores each sentence on its own from a zero state, in
    corpus order, and the count is the run's test token count.  Kills: state carried across the reset (the
    negative control, run here: a batch's sentences read as one row, the state carried from sentence to sentence,
    no longer equals the hand loop)."""
    hand = _hand_loop(trained)
    got = _reset_nll(trained, 16)
    assert got.numel() == hand.numel() == trained["metrics"]["test"]["tokens"]
    torch.testing.assert_close(got, hand, rtol=1e-5, atol=1e-5)

    _one_row_per_batch(monkeypatch)
    carried = _reset_nll(trained, 16)
    assert carried.numel() == hand.numel()
    assert not torch.allclose(carried, hand, rtol=1e-5, atol=1e-5)


def test_reset_ppl_is_above_the_carried_ppl_where_earlier_sentences_matter(trained, monkeypatch):
    """On the topic corpus a sentence's first words are predictable only from the sentences before it: the reset
    PPL is clearly above the run's own test PPL (state carried).  Kills: a reset that resets nothing (the negative
    control, run here: the split read as one row, in corpus order, comes within 3% of the carried PPL)."""
    carried = trained["metrics"]["test"]["ppl"]
    reset_ppl = _ppl(_reset_nll(trained, 64))
    assert reset_ppl > 1.05 * carried, (reset_ppl, carried)

    _one_row_per_batch(monkeypatch, corpus_order=True)
    nothing_reset = _ppl(_reset_nll(trained, len(trained["ids"])))
    assert nothing_reset < 1.03 * carried, (nothing_reset, carried)


def test_reset_ppl_does_not_depend_on_the_batch_size(trained, monkeypatch):
    """The PPL (and every token's NLL) is the same for 1, 7 and 64 sentences a batch, though sentences of 2 to 8
    words make rows of one batch differ in length.  Kills: padding unmasked (the negative control, run here: each
    row's padding moved before its sentence, so the state reads padding before </s>: the PPL changes with the batch
    size) and padding counted (padded targets scored as <pad>: the count or the PPL changes)."""
    ppls = {b: _ppl(_reset_nll(trained, b)) for b in (1, 7, 64)}
    assert ppls[7] == pytest.approx(ppls[1], rel=1e-6) and ppls[64] == pytest.approx(ppls[1], rel=1e-6), ppls

    real = data_mod.sentence_rows

    def left_padded(ids, rows, eos, pad):  # mutation 1: padding before each row's sentence
        x, y = real(ids, rows, eos, pad)
        for r in range(len(x)):
            k = int((y[r] == data_mod.IGNORE).sum())
            x[r], y[r] = torch.roll(x[r], k), torch.roll(y[r], k)
        return x, y

    monkeypatch.setattr(data_mod, "sentence_rows", left_padded)
    unmasked = _ppl(_reset_nll(trained, 64))
    assert unmasked != pytest.approx(ppls[1], rel=1e-4)

    def counted(ids, rows, eos, pad):  # mutation 2: padded targets scored as <pad>
        x, y = real(ids, rows, eos, pad)
        return x, torch.where(y == data_mod.IGNORE, torch.full_like(y, pad), y)

    monkeypatch.setattr(data_mod, "sentence_rows", counted)
    try:
        padded = _ppl(_reset_nll(trained, 64))
    except RuntimeError:  # the per-sentence split no longer adds up: as much a failure as a wrong PPL
        padded = math.nan
    assert padded != pytest.approx(ppls[1], rel=1e-6)


def test_reset_scores_command_writes_the_record(trained, tmp_path):
    """`lmgrid reset-scores` writes reset_scores.json beside metrics.json: the reset PPLs the pass gives, the run's
    token counts and carried PPLs, and the test PPL `lmgrid score` gives the test split (which docs/configuration.md
    says); a window run is refused with one line.  Kills: a record whose test PPL is not the
    pass's, or whose token count is not the run's."""
    paths, run_dir = trained["corpus"]["paths"], trained["run_dir"]
    argv = ["reset-scores", "--run-dir", str(run_dir), "--valid", paths["valid"], "--test", paths["test"],
            "--vocab", trained["corpus"]["vocab_path"], "--batch-sentences", "5"]
    assert cli.main(argv) == 0
    record = reset_scores.read(run_dir / reset_scores.RESET_FILE)
    assert record["test_ppl_reset"] == pytest.approx(_ppl(_reset_nll(trained, 64)), rel=1e-6)
    assert record["test_tokens"] == trained["metrics"]["test"]["tokens"]
    assert record["valid_tokens"] == trained["metrics"]["valid"]["tokens"]
    assert record["test_ppl"] == trained["metrics"]["test"]["ppl"] and record["batch_sentences"] == 5
    assert record["precision"] == "32-true"
    # `lmgrid score` reads a stream cell's sentences each on its own (lmgrid.neural.model_io): the same convention
    from lmgrid import lm

    assert lm.score_file(lm.load(run_dir), paths["test"], tmp_path / "score.tsv")["ppl"] == pytest.approx(
        record["test_ppl_reset"], rel=1e-5)

    window = json.loads((run_dir / "metrics.json").read_text())
    window["regime"] = "window"
    fake = tmp_path / "window_run"
    fake.mkdir()
    (fake / "metrics.json").write_text(json.dumps(window))
    (fake / "model.ckpt").write_bytes((run_dir / "model.ckpt").read_bytes())
    with pytest.raises(LmgridError, match="needs a stream-regime neural run"):
        reset.score_run(fake, paths, trained["corpus"]["vocab_path"])
    bad = dict(record, test_tokens=1.5)
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(LmgridError, match="test_tokens"):
        reset_scores.read(tmp_path / "bad.json")


def _runs_with_reset(trained, tmp_path) -> tuple[list[str], list[str]]:
    """Two run folders with the trained run's metrics.json, one as a stream run with a reset_scores.json (test PPL
    12.345), one as a window run: (metrics files, reset files)."""
    stream_dir = tmp_path / "runs" / "rnn" / "torch" / "n0_l1_stream_s1"
    window_dir = tmp_path / "runs" / "rnn" / "torch" / "n3_l1_window_s1"
    record = json.loads((trained["run_dir"] / "metrics.json").read_text())
    for folder, regime, n_step in ((stream_dir, "stream", 0), (window_dir, "window", 3)):
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({**record, "regime": regime, "n_step": n_step}))
    fields = {k: 1.0 for k in ("valid_nll_nats", "test_nll_nats", "valid_ppl", "test_ppl", "valid_ppl_reset", "wall_s")}
    reset_scores.write(stream_dir / reset_scores.RESET_FILE, {
        **fields, "name": "rnn n0 l1 stream s1", "run_dir": str(stream_dir), "test_ppl_reset": 12.345,
        **{f"{s}_{k}": 10 for s in ("valid", "test") for k in ("tokens", "sentences")}, "precision": "32-true",
        "device": "cpu (1 threads)", "threads": 1, "bptt": 10, "batch_sentences": 64})
    metrics = [str(stream_dir / "metrics.json"), str(window_dir / "metrics.json")]
    return metrics, [str(stream_dir / reset_scores.RESET_FILE)]


def test_summary_shows_the_reset_column_for_stream_rows_only(trained, tmp_path, monkeypatch):
    """summary.ppl_table and its Markdown: the stream row's test_ppl_reset is its reset_scores.json figure, the
    window row's is empty (scored per sentence already), and the headline shows it for the stream cell.  Kills: the
    summary not reading the reset files (the negative control, run here: with the files' reader returning nothing
    the stream row's column is empty)."""
    from lmgrid.analysis import summary

    metrics, resets = _runs_with_reset(trained, tmp_path)
    table = summary.ppl_table(None, metrics, resets).set_index("regime")
    assert table.loc["stream", "test_ppl_reset"] == 12.345 and math.isnan(table.loc["window", "test_ppl_reset"])
    md = tmp_path / "summary.md"
    summary.write("c", *_stats(tmp_path), None, metrics, str(tmp_path / "s.csv"), str(md), None, resets)
    assert "Test PPL (reset)" in md.read_text() and "12.35" in md.read_text()
    top = summary.headline(summary.ppl_table(None, metrics, resets))
    assert top[summary.RESET_HEAD].tolist() == ["12.35"]  # one rnn model: its best cell on valid is the stream one
    with pytest.raises(LmgridError, match="no run in --metrics"):
        summary.ppl_table(None, metrics[1:], resets)

    monkeypatch.setattr(summary, "_reset_by_run", lambda reset_paths, metrics_paths: {})
    assert math.isnan(summary.ppl_table(None, metrics, resets).set_index("regime").loc["stream", "test_ppl_reset"])


def test_reference_shows_the_reset_mean_beside_stream_rows(trained, tmp_path):
    """reference.py: a row of stream runs gets their mean reset test PPL (column test_ppl_reset_mean, shown as
    'ours (reset)'), a row of window runs none, and the verdict is the same with or without it.  Kills: the table
    not reading the reset files (the negative control, run here: with the files left out the stream row's value is
    empty)."""
    from lmgrid.analysis import reference

    metrics, resets = _runs_with_reset(trained, tmp_path)
    rows = [{"model": f"rnn {r}", "published_test_ppl": 10.0, "source": "s", "runs": {"arch": "rnn", "regime": r}}
            for r in ("stream", "window")]
    table = reference.reference_table(rows, metrics, [], resets)
    assert table.loc[0, "test_ppl_reset_mean"] == 12.345 and math.isnan(table.loc[1, "test_ppl_reset_mean"])
    out = {ext: str(tmp_path / f"ref.{ext}") for ext in ("csv", "md", "tex", "html")}
    reference.write(rows, metrics, out["csv"], out["md"], out["tex"], out["html"], [], resets)
    assert "ours (reset)" in (tmp_path / "ref.md").read_text() and "12.3" in (tmp_path / "ref.md").read_text()
    without = reference.reference_table(rows, metrics, [])
    assert without["verdict"].tolist() == table["verdict"].tolist()
    assert math.isnan(without.loc[0, "test_ppl_reset_mean"])


def _stats(folder) -> tuple[str, str]:
    """A corpus_stats.json and vocab_report.json of one split, for summary.write."""
    stats, report = folder / "corpus_stats.json", folder / "vocab_report.json"
    stats.write_text(json.dumps({"splits": {"test": {"sentences": 2, "tokens": 8, "types": 4}}}))
    report.write_text(json.dumps({"vocab_size": 10, "splits": {"test": {"oov_tokens": 0, "oov_rate": 0.0}}}))
    return str(stats), str(report)
