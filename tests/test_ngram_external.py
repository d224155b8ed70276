"""N-gram counting and estimation on disk in slices (bounded memory) against the in-memory single pass."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lmgrid.cli import main
from lmgrid.common.errors import LmgridError
from lmgrid.ngram import arpa
from lmgrid.ngram.counts import count_file, open_tables, save
from lmgrid.ngram.estimate import METHODS, estimate, estimate_tables
from lmgrid.ngram.external import count_to_npz
from lmgrid.ngram.model import NgramModel, load_run, score_splits
from lmgrid.ngram.store import Filler
from lmgrid.data.ppl import BOS, PAD
from lmgrid.data.vocab import build


def zipf_corpus(n: int, seed: int, v: int = 300) -> list[list[str]]:
    """Skewed word frequencies, so frequent contexts have more continuations than a slice holds."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(v)]
    weights = [1 / (i + 1) for i in range(v)]
    return [rng.choices(words, weights, k=rng.randint(1, 14)) for _ in range(n)]


def write(path, sentences, blank_every: int = 0) -> None:
    lines = []
    for i, s in enumerate(sentences):
        lines.append(" ".join(s))
        if blank_every and i % blank_every == 0:
            lines.append("")  # blank lines are no sentences, in both readers
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ext")
    train = zipf_corpus(1500, 1)
    write(tmp / "train.txt", train, blank_every=97)
    vocab = build(train[:1200])  # words seen only late in train are <unk>
    return tmp, vocab


def test_chunked_counting_gives_exactly_the_single_pass_counts(setup):
    tmp, vocab = setup
    save(tmp / "single.npz", count_file(tmp / "train.txt", vocab, 5), vocab)
    # ~13k stream positions in slices of 500 and buckets of 50 occurrences (over 256: merged to 256)
    sizes = count_to_npz(tmp / "train.txt", vocab, 5, tmp / "chunked.npz", slice_positions=500, bucket_rows=50)
    single, chunked = np.load(tmp / "single.npz"), np.load(tmp / "chunked.npz")
    assert sorted(single.files) == sorted(chunked.files)
    for name in single.files:
        assert single[name].dtype == chunked[name].dtype and np.array_equal(single[name], chunked[name]), name
    assert sizes == [int(single[f"keys{k}"].size) for k in range(1, 6)] and sizes[4] > 1000
    # the budget alone, as the CLI sets it, gives the same file
    count_to_npz(tmp / "train.txt", vocab, 5, tmp / "budget.npz", memory_mb=64)
    assert (tmp / "budget.npz").read_bytes() == (tmp / "chunked.npz").read_bytes()


@pytest.mark.parametrize("method", METHODS)
def test_estimation_and_scoring_in_slices_equal_the_in_memory_ones(setup, method, tmp_path):
    tmp, vocab = setup
    if not (tmp / "chunked.npz").exists():
        count_to_npz(tmp / "train.txt", vocab, 5, tmp / "chunked.npz", slice_positions=500, bucket_rows=50)
    counts = open_tables(tmp / "chunked.npz", vocab, 4)
    counts.step = 64  # many slices; frequent contexts are longer than one
    bos, pad = vocab.index[BOS], vocab.index[PAD]
    disk, settings = estimate_tables(counts, Filler(tmp_path / "model"), method, 4, bos, pad)
    from lmgrid.ngram.counts import load

    mem = estimate(load(tmp / "chunked.npz", vocab, 4), method, 4, bos, pad)
    assert settings == mem.settings
    for k in range(1, 5):
        for name, ref in (("keys", mem.keys), ("logp", mem.logp), ("bow", mem.bow)):
            assert np.array_equal(disk.dense(f"{name}{k}"), ref[k - 1]), (name, k)
    evals = {"valid": zipf_corpus(60, 2), "test": zipf_corpus(60, 3)}
    disk.step = 50
    scores = score_splits(disk, vocab, evals)
    for split, sentences in evals.items():
        assert scores[split] == NgramModel(mem, vocab).evaluate(sentences)
    arpa.write(tmp_path / "disk.arpa", disk, vocab.tokens)
    arpa.write(tmp_path / "mem.arpa", mem, vocab.tokens)
    assert (tmp_path / "disk.arpa").read_bytes() == (tmp_path / "mem.arpa").read_bytes()


def test_write_arpa_off_leaves_a_note_and_the_same_scores(setup, tmp_path):
    tmp, vocab = setup
    (tmp_path / "vocab.json").write_text(json.dumps(vocab.to_json()))
    write(tmp_path / "valid.txt", zipf_corpus(40, 4))
    t = str(tmp_path)
    assert main(["ngram-counts", "--train", str(tmp / "train.txt"), "--vocab", f"{t}/vocab.json", "--max-order", "3",
                 "--out", f"{t}/counts.npz", "--memory-mb", "64"]) == 0
    metrics = {}
    for flag in ("true", "false"):
        run = tmp_path / flag
        assert main(["ngram", "--counts", f"{t}/counts.npz", "--vocab", f"{t}/vocab.json", "--valid",
                     f"{t}/valid.txt", "--test", f"{t}/valid.txt", "--arch", "mkn", "--order", "3", "--arpa",
                     f"{run}/model.arpa", "--metrics", f"{run}/metrics.json", "--write-arpa", flag]) == 0
        metrics[flag] = json.loads((run / "metrics.json").read_text())
        assert metrics[flag]["arpa_written"] == (flag == "true")
    assert metrics["true"]["test"] == metrics["false"]["test"]
    assert (tmp_path / "false" / "model.arpa").stat().st_size < 200
    assert sorted(p.name for p in (tmp_path / "false").iterdir()) == ["metrics.json", "model.arpa"]  # no leftovers
    with pytest.raises(LmgridError, match="write_arpa"):
        load_run(tmp_path / "false")
    assert load_run(tmp_path / "true").evaluate(zipf_corpus(40, 4))["ppl"] == pytest.approx(
        metrics["true"]["test"]["ppl"], rel=1e-6)
