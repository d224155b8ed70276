"""Vocabulary stage: train only, specials first, cut-offs, OOV report."""
from lmgrid.common.fileio import read_json
from lmgrid.data.vocab import SPECIALS, Vocab, build, oov_report, run


def test_specials_order_counts_and_cutoffs():
    train = [["b", "a", "b"], ["c", "b", "<unk>"], ["a"]]
    v = build(train)
    assert v.tokens == [*SPECIALS, "b", "a", "c"]
    assert v.counts["</s>"] == 3 and v.counts["<unk>"] == 1 and v.counts["b"] == 3
    v2 = build(train, min_count=2)
    assert v2.tokens == [*SPECIALS, "b", "a"] and v2.counts["<unk>"] == 2  # literal <unk> + dropped "c"
    v3 = build(train, max_size=1)
    assert v3.tokens == [*SPECIALS, "b"]
    assert v3.map(["a", "b", "zzz"]) == ["<unk>", "b", "<unk>"]
    assert v3.encode(["b", "zzz"]) == [4, 1]


def test_oov_report_counts_unseen_words_only():
    v = build([["a", "b"]])
    rep = oov_report(v, {"test": [["a", "x", "<unk>"], ["y"]]})
    assert rep["test"] == {"tokens": 4, "oov_tokens": 2, "oov_rate": 0.5, "unk_tokens": 3}


def test_roundtrip_and_files(tmp_path):
    for split, text in (("train", "a b b\n"), ("valid", "b c\n"), ("test", "a\n")):
        (tmp_path / f"{split}.txt").write_text(text)
    v = run(tmp_path / "train.txt", tmp_path / "valid.txt", tmp_path / "test.txt",
            tmp_path / "vocab.json", tmp_path / "report.json")
    loaded = Vocab.load(tmp_path / "vocab.json")
    assert loaded.tokens == v.tokens == [*SPECIALS, "b", "a"]
    assert loaded.counts == v.counts
    rep = read_json(tmp_path / "report.json")
    assert rep["vocab_size"] == 6 and rep["splits"]["valid"]["oov_tokens"] == 1
