"""N-gram models on small corpora: counting, each smoothing method against its definition, ARPA and
KenLM interop, the pipeline commands, and the edge cases of issue 3."""
from __future__ import annotations

import collections
import json
import logging
import math
import random

import numpy as np
import pytest

from lmgrid.cli import main
from lmgrid.common.errors import LmgridError
from lmgrid.ngram import arpa
from lmgrid.ngram.counts import count_sentences, load, save
from lmgrid.ngram.estimate import METHODS, estimate
from lmgrid.ngram.model import NgramModel, load_run
from lmgrid.data.ppl import BOS, EOS, PAD, UNK
from lmgrid.data.vocab import Vocab, build

WORDS = "the a cat dog sat ran on mat fast slowly".split()


def corpus(n: int, seed: int, words=WORDS, max_len: int = 9) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(words[: rng.randint(3, len(words))]) for _ in range(rng.randint(1, max_len))]
            for _ in range(n)]


def brute_counts(sentences, order):
    out = collections.Counter()
    for s in sentences:
        padded = [BOS, *s, EOS]
        for i in range(len(padded) - order + 1):
            out[tuple(padded[i:i + order])] += 1
    return out


def model(train, method, order, **kw):
    vocab = build(train)
    counts = count_sentences(train, vocab, order)
    bo = estimate(counts, method, order, vocab.index[BOS], vocab.index[PAD], **kw)
    return NgramModel(bo, vocab)


def reference_mkn(train, order):
    """Interpolated modified Kneser-Ney written straight from Chen & Goodman with dicts, for comparison."""
    raw = {k: brute_counts(train, k) for k in range(1, order + 1)}
    adj = {order: raw[order]}
    for k in range(order - 1, 0, -1):
        cont = collections.Counter(g[1:] for g in raw[k + 1])
        adj[k] = {g: (c if g[0] == BOS else cont[g]) for g, c in raw[k].items()}
    disc = {}
    for k in range(1, order + 1):
        vals = [c for g, c in adj[k].items() if g != (BOS,)]
        n = [sum(1 for c in vals if c == i) for i in (1, 2, 3, 4)]
        if min(n) == 0:  # lmplz --discount_fallback
            disc[k] = [0.0, 0.5, 1.0, 1.5]
            continue
        y = n[0] / (n[0] + 2 * n[1])
        disc[k] = [0.0] + [i - (i + 1) * y * n[i] / n[i - 1] for i in (1, 2, 3)]
    n_words = len(build(train)) - 2  # the uniform covers every vocabulary entry but <pad> and <s>

    def prob(w, h):
        k = len(h) + 1
        if k == 1:
            a = {g: c for g, c in adj[1].items() if g != (BOS,)}
            total = sum(a.values())
            gamma = sum(disc[1][min(c, 3)] for c in a.values()) / total
            c = a.get((w,), 0)
            return (c - disc[1][min(c, 3)]) / total + gamma / n_words
        ext = {g: c for g, c in adj[k].items() if g[:-1] == tuple(h)}
        if not ext:
            return prob(w, h[1:])
        total = sum(ext.values())
        gamma = sum(disc[k][min(c, 3)] for c in ext.values()) / total
        c = ext.get((*h, w), 0)
        return (c - disc[k][min(c, 3)]) / total + gamma * prob(w, h[1:])

    return prob


def test_counts_match_brute_force():
    train = corpus(300, 1)
    vocab = build(train)
    counts = count_sentences(train, vocab, 4)
    for k in range(1, 5):
        cols = counts.words(k)
        ours = {tuple(vocab.tokens[c[i]] for c in cols): int(counts.count[k - 1][i])
                for i in range(len(cols[0])) if counts.count[k - 1][i] > 0}
        assert ours == dict(brute_counts(train, k))


def test_keys_cannot_overflow_with_a_large_vocabulary():
    words = [f"w{i}" for i in range(10_000)]
    train = corpus(200, 2, words=words, max_len=12)
    train.append(words)  # every word once: a vocabulary of 10004 ids, 10004**5 > 2**63
    train.append(sorted(words)[-6:])  # among the rarest, so among the highest ids
    vocab = build(train)
    assert len(vocab) ** 5 > 2**63
    counts = count_sentences(train, vocab, 5)
    assert counts.keys[4].dtype == np.int64 and (counts.keys[4] >= 0).all()
    cols = counts.words(5)
    got = collections.Counter({tuple(vocab.tokens[c[i]] for c in cols): int(counts.count[4][i])
                               for i in range(len(cols[0]))})
    assert got == brute_counts(train, 5)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("method", METHODS)
def test_every_distribution_sums_to_one(method, order):
    m = model(corpus(400, 3), method, order)
    for ctx in ([], ["the"], ["the", "cat"], ["cat", "sat", "on"], ["unseen", "the"], ["mat", "mat", "mat"]):
        p = np.exp(np.array(m.next_logprobs(ctx)))
        assert p.sum() == pytest.approx(1.0, abs=1e-9)
        assert (p[[m.vocab.index[w] for w in m.vocab.tokens if w not in (PAD, BOS)]] > 0).all()


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_mkn_equals_the_textbook_formula(order):
    words = [f"w{i}" for i in range(60)]
    train, test = corpus(800, 4, words=words), corpus(40, 5, words=words + ["unseen"])
    m = model(train, "mkn", order)
    ref = reference_mkn(train, order)
    ours = m.sentence_logprobs(test)
    for s, lps in zip(test, ours):
        padded = [BOS, *m.vocab.map(s), EOS]
        for i, lp in enumerate(lps, 1):
            h = padded[max(0, i - order + 1):i]
            assert lp == pytest.approx(math.log(ref(padded[i], h)), rel=1e-9)


def test_katz_and_addk_follow_their_definitions():
    train = corpus(500, 6)
    raw2 = brute_counts(train, 2)
    m = model(train, "addk", 2, addk_k=0.5)
    n_words = len(m.vocab) - 2
    lp = m.next_logprobs(["cat"])
    c_ctx = sum(c for g, c in raw2.items() if g[0] == "cat")
    for w in ("sat", "mat", EOS):
        assert lp[m.vocab.index[w]] == pytest.approx(math.log((raw2[("cat", w)] + 0.5) / (c_ctx + 0.5 * n_words)))
    # Katz with no discounting at all (every count trusted): a seen bigram gets its relative frequency,
    # scaled by c(h)/(c(h)+1) to leave mass for the unseen words, unless h was followed by every word.
    train = corpus(500, 6, words=[f"w{i}" for i in range(60)])
    raw2 = brute_counts(train, 2)
    m = model(train, "katz", 2, katz_max_count=0)
    followers = {g[1] for g in raw2 if g[0] == "w0"}
    assert len(followers) < len(m.vocab) - 2
    lp = m.next_logprobs(["w0"])
    c_ctx = sum(c for g, c in raw2.items() if g[0] == "w0")
    for w in followers:
        assert lp[m.vocab.index[w]] == pytest.approx(math.log(raw2[("w0", w)] / (c_ctx + 1)))
    small = [["a", "b"], ["a", "a"], ["a", UNK], ["b", "a"]]  # a precedes a, b, <unk>, </s> x2: every word
    m = model(small, "katz", 2, katz_max_count=0)
    lp = m.next_logprobs(["a"])
    assert [lp[m.vocab.index[w]] for w in ("a", "b", UNK, EOS)] == pytest.approx(np.log([0.2, 0.2, 0.2, 0.4]))


def kenlm_logprob(kenlm, path, m: NgramModel, test) -> float:
    """KenLM's total natural-log probability of `test` (each sentence with <s> and </s>) under the ARPA file."""
    lm = kenlm.Model(str(path))
    return sum(lm.score(" ".join(m.vocab.map(s)), bos=True, eos=True) for s in test) * math.log(10)


def writer_with_bows(monkeypatch, change):
    """arpa.write with each order's back-off column (log10, as it is about to be written) passed through
    change(bows, word_columns): a mutated ARPA writer, for the negative controls below."""
    real = arpa._write_lines

    def mutated(fh, buf, tokens, cols, logp, bow):
        real(fh, buf, tokens, cols, logp, None if bow is None else change(bow, cols))

    monkeypatch.setattr(arpa, "_write_lines", mutated)


@pytest.mark.parametrize("method", METHODS)
def test_kenlm_scores_our_arpa_like_we_do(method, tmp_path, kenlm, monkeypatch):
    """KenLM scoring our ARPA file (orders 2, 3, 5) gives the test log-probability we compute from the model in
    memory, and reading the file back gives the same model.  Kills: back-off weights written in natural log (the
    writer's `* LOG10E` left off the back-off column; KenLM then backs off with the wrong weight).  Negative control,
    run here: that writer, and KenLM's total moves far outside the tolerance."""
    train, test = corpus(500, 7), corpus(60, 8, words=WORDS + ["zebra"])
    for order in (2, 3, 5):
        m = model(train, method, order)
        path = tmp_path / f"{method}{order}.arpa"
        arpa.write(path, m.backoff, m.vocab.tokens)
        ours = sum(sum(lps) for lps in m.sentence_logprobs(test))
        assert kenlm_logprob(kenlm, path, m, test) == pytest.approx(ours, rel=1e-6)
        back, tokens = arpa.read(path)
        assert tokens == m.vocab.tokens
        again = NgramModel(back, m.vocab)
        assert sum(sum(lps) for lps in again.sentence_logprobs(test)) == pytest.approx(ours, rel=1e-6)
    writer_with_bows(monkeypatch, lambda bow, cols: bow / arpa.LOG10E)  # back to natural log: not converted
    arpa.write(tmp_path / "natural.arpa", m.backoff, m.vocab.tokens)
    assert kenlm_logprob(kenlm, tmp_path / "natural.arpa", m, test) != pytest.approx(ours, rel=1e-6)


# ---- edge cases: every method, finite PPL ---------------------------------------------------------

def finite_everywhere(train, test, order, caplog=None):
    out = {}
    for method in METHODS:
        m = model(train, method, order)
        r = m.evaluate(test)
        assert math.isfinite(r["ppl"]) and r["ppl"] > 1
        assert r["tokens"] == sum(len(s) + 1 for s in test)
        out[method] = r
    return out


def test_order_larger_than_every_sentence(caplog):
    train = [["a", "b"], ["b"], ["a", "a"], ["b", "a"]] * 3
    with caplog.at_level(logging.WARNING):
        res = finite_everywhere(train, [["a", "b"], ["b", "b", "a", "a"]], order=7)
    assert "estimating a 4-gram model" in caplog.text
    assert res["mkn"]["ppl"] < 3


def test_order_one():
    train, test = corpus(300, 9), corpus(30, 10)
    res = finite_everywhere(train, test, order=1)
    unigram = collections.Counter(w for s in train for w in [*s, EOS])
    entropy = -sum(c / unigram.total() * math.log(c / unigram.total()) for c in unigram.values())
    assert res["katz"]["ppl"] == pytest.approx(math.exp(entropy), rel=0.5)  # close to the MLE unigram


def test_unseen_test_words_are_unk_and_counted():
    train = corpus(300, 11)  # no <unk> in train
    test = [["the", "platypus", "sat"], ["wombat"]]
    res = finite_everywhere(train, test, order=3)
    assert all(r["oov_tokens"] == 2 for r in res.values())


def test_corpus_without_singletons_falls_back_with_a_warning(caplog):
    train = [["a", "b", "c"], ["b", "c", "a"], ["c"]] * 2  # every n-gram at least twice
    with caplog.at_level(logging.WARNING):
        finite_everywhere(train, [["a", "b", "c"], ["c", "a", "d"]], order=3)  # d: unseen, <unk> never in train
    assert "fallback discounts" in caplog.text


def test_single_token_sentences(tmp_path, kenlm, monkeypatch):
    """Sentences of one word (and an unseen one, scored as <unk>) at order 3: every method gives a finite PPL, and
    KenLM scores our ARPA file as we do, although each sentence is shorter than the order.  Kills: the <s> unigram
    written without its back-off weight (every word here is a sentence's first, predicted after <s>; the unseen
    "c" backs off from <s> to the unigram <unk>).  Negative control, run here: that writer, and KenLM's total
    differs."""
    train = [["a"], ["b"], ["a", "b"], ["a"]] * 3
    test = [["a"], ["b"], ["c"]]
    finite_everywhere(train, test, order=3)
    m = model(train, "mkn", 3)
    arpa.write(tmp_path / "m.arpa", m.backoff, m.vocab.tokens)
    ours = sum(sum(x) for x in m.sentence_logprobs(test))
    assert kenlm_logprob(kenlm, tmp_path / "m.arpa", m, test) == pytest.approx(ours, rel=1e-6)
    bos = m.vocab.index[BOS]
    writer_with_bows(monkeypatch, lambda bow, cols: np.where(cols[0] == bos, 0.0, bow) if len(cols) == 1 else bow)
    arpa.write(tmp_path / "no_bos_bow.arpa", m.backoff, m.vocab.tokens)
    assert kenlm_logprob(kenlm, tmp_path / "no_bos_bow.arpa", m, test) != pytest.approx(ours, rel=1e-6)


# ---- files and commands ---------------------------------------------------------------------------

def test_counts_file_is_checked_against_its_vocabulary(tmp_path):
    train = corpus(50, 12)
    vocab = build(train)
    save(tmp_path / "c.npz", count_sentences(train, vocab, 3), vocab)
    assert load(tmp_path / "c.npz", vocab, 2).max_order == 2
    with pytest.raises(LmgridError, match="order 4 requested"):
        load(tmp_path / "c.npz", vocab, 4)
    with pytest.raises(LmgridError, match="recount"):
        load(tmp_path / "c.npz", build(train + [["new"]]), 3)
    same_size = Vocab(vocab.tokens[:4] + vocab.tokens[:3:-1], {})  # same words, other ids
    with pytest.raises(LmgridError, match="recount"):
        load(tmp_path / "c.npz", same_size, 3)


def test_file_reader_matches_the_corpus_reader(tmp_path):
    from lmgrid.data.corpus import load_split
    from lmgrid.ngram.counts import read_stream, stream

    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffthe cat  sat\r\n\n  a <s> dog </s>\r\nzebra\n\n".encode("utf-8"))
    vocab = build([["the", "cat", "sat", "a", "dog"]])
    got, want = read_stream(path, vocab), stream(load_split(path), vocab)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert len(want[1]) == 3


def test_arpa_without_backoff_fields_reads(tmp_path):
    """Other tools omit zero back-off weights; a missing field is log10 1 = 0."""
    path = tmp_path / "model.arpa"
    path.write_text("\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n-0.5\t<unk>\n-99\t<s>\t-0.25\n"
                    "-0.5\t</s>\n-1\ta\n\n\\2-grams:\n-0.1\t<s> a\n-0.2\ta </s>\n\n\\end\\\n")
    m = load_run(tmp_path)
    lps = m.sentence_logprobs([["a", "a"]])[0]
    ln10 = math.log(10)
    assert lps == pytest.approx([-0.1 * ln10, -1 * ln10, -0.2 * ln10])  # a|<s>, a|a backs off with bow 0
    assert m.sentence_logprobs([["zz"]])[0][0] == pytest.approx((-0.25 - 0.5) * ln10)  # <unk>|<s>


def test_bad_arpa_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.arpa"
    bad.write_text("hello\n")
    with pytest.raises(LmgridError, match="not an ARPA file"):
        arpa.read(bad)
    bad.write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\tword\n\n\\end\\\n")
    with pytest.raises(LmgridError, match="lack <unk>"):
        arpa.read(bad)


def write_lines(path, sentences):
    path.write_text("".join(" ".join(s) + "\n" for s in sentences))


def test_pipeline_commands_then_score_and_generate(tmp_path, capsys):
    for name, seed in (("train", 13), ("valid", 14), ("test", 15)):
        write_lines(tmp_path / f"{name}.txt", corpus(200 if name == "train" else 30, seed))
    t = str(tmp_path)
    assert main(["vocab", "--train", f"{t}/train.txt", "--valid", f"{t}/valid.txt", "--test", f"{t}/test.txt",
                 "--out", f"{t}/vocab.json", "--report", f"{t}/vr.json"]) == 0
    assert main(["ngram-counts", "--train", f"{t}/train.txt", "--vocab", f"{t}/vocab.json", "--max-order", "3",
                 "--out", f"{t}/counts.npz"]) == 0
    run = tmp_path / "run"
    assert main(["ngram", "--counts", f"{t}/counts.npz", "--vocab", f"{t}/vocab.json", "--valid", f"{t}/valid.txt",
                 "--test", f"{t}/test.txt", "--arch", "mkn", "--order", "3", "--arpa", f"{run}/model.arpa",
                 "--metrics", f"{run}/metrics.json"]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    for key in ("name", "arch", "impl", "n_step", "layers", "regime", "seed", "params", "order", "method"):
        assert key in metrics
    assert (metrics["name"], metrics["impl"], metrics["seed"]) == ("mkn n3 l1 window s0", "ngram", 0)
    assert metrics["test"]["tokens"] == sum(len(s) + 1 for s in corpus(30, 15))
    capsys.readouterr()
    assert main(["score", "--run", str(run), "--text", f"{t}/test.txt", "--out", f"{t}/scores.tsv"]) == 0
    err = capsys.readouterr().err
    assert f"PPL {metrics['test']['ppl']:.3f}" in err
    assert len((tmp_path / "scores.tsv").read_text().splitlines()) == 31
    assert main(["generate", "--run", str(run), "-n", "5", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and all(w in set(WORDS) | {UNK} for line in lines for w in line.split())
    assert main(["ngram", "--counts", f"{t}/counts.npz", "--vocab", f"{t}/vocab.json", "--valid", f"{t}/valid.txt",
                 "--test", f"{t}/test.txt", "--arch", "kn", "--order", "4", "--arpa", f"{t}/x.arpa",
                 "--metrics", f"{t}/x.json"]) == 2
    assert load_run(run).next_logprobs(["the"])[load_run(run).vocab.index[BOS]] == -math.inf
