"""Embeddings (lmgrid.embed): word2vec export, sentence vectors, the benchmark scores and their intervals, PPMI.

Each test names the mutation it kills and runs that mutant too, asserting that the check catches it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmgrid import cli
from lmgrid.embed import evaluate, export, ppmi
from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.neural.train import save_model
from lmgrid.data.vocab import Vocab

WORDS = [f"w{i}" for i in range(12)]


def make_run(tmp_path, arch="lstm", regime="stream", tie=False, layers=1, n_step=4, seed=0):
    """A run folder holding an untrained model of `arch` (what `lmgrid embed` reads; training adds nothing here)."""
    torch.manual_seed(seed)
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>", *WORDS], {w: 100 - i for i, w in enumerate(WORDS)})
    cfg = {"arch": arch, "vocab_size": len(vocab), "layers": layers, "emb_dim": 8, "hidden_dim": 8,
           "tie_weights": tie, "n_step": n_step if regime == "window" else 2,
           "max_len": n_step - 1 if regime == "window" else 20, "context_len": 0 if regime == "window" else 10}
    model = build_model(model_config_defaults(**cfg))
    run_dir = tmp_path / f"{arch}_{regime}_{'tied' if tie else 'untied'}"
    run_dir.mkdir()
    save_model(run_dir / "model.ckpt", model, cfg, vocab,
               {"arch": arch, "impl": "torch", "n_step": n_step if regime == "window" else 0, "layers": layers,
                "regime": regime, "seed": 1}, {})
    return run_dir


def kv_of(words, vectors):
    return export.keyed_vectors(list(words), np.asarray(vectors, dtype=np.float32))


# ---- word vectors: the word2vec round trip --------------------------------------------------------------------

def _round_trip_equal(run_dir, out_dir) -> bool:
    from gensim.models import KeyedVectors

    lm = export.load_neural(run_dir)
    assert cli.main(["embed", "--run", str(run_dir), "--words", str(out_dir)]) == 0
    want = {"input": lm.model.embedding.weight}
    if not lm.model.cfg.tie_weights:
        want["output"] = lm.model.head.decoder.weight
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(f"{n}.w2v.txt" for n in want)
    for name, matrix in want.items():
        kv = KeyedVectors.load_word2vec_format(str(out_dir / f"{name}.w2v.txt"))
        # every row but <pad>'s (row 0), in vocabulary order
        if kv.index_to_key != lm.vocab.tokens[1:] or not np.array_equal(kv.vectors, matrix.detach().numpy()[1:]):
            return False
    return True


@pytest.mark.parametrize("arch,tie", [("lstm", False), ("gru", True), ("transformer", False), ("ffnn", False)])
def test_word2vec_round_trip_equals_the_embedding_matrix(tmp_path, monkeypatch, arch, tie):
    """gensim reads back exactly the model's input embedding (and output layer when untied), row by row in vocabulary
    order, <pad>'s row left out.  kills: the output matrix exported as the input one; vectors written rounded (lost
    float32 digits)."""
    run_dir = make_run(tmp_path, arch, "window" if arch == "ffnn" else "stream", tie)
    assert _round_trip_equal(run_dir, tmp_path / "ok")
    if not tie:
        swapped = lambda lm: {"input": lm.model.head.decoder.weight.detach().numpy(),  # noqa: E731
                              "output": lm.model.embedding.weight.detach().numpy()}
        with monkeypatch.context() as m:
            m.setattr(export, "word_matrices", swapped)
            assert not _round_trip_equal(run_dir, tmp_path / "swapped")
    real = export.keyed_vectors
    with monkeypatch.context() as m:
        m.setattr(export, "keyed_vectors", lambda words, matrix: real(words, np.round(matrix, 4)))
        assert not _round_trip_equal(run_dir, tmp_path / "rounded")


def _w2v_rows_are_the_trained_words(path, tokens) -> bool:
    """The word2vec file, read as text: its header's row count is the rows it has, and those rows are the
    vocabulary's tokens in order without <pad> (never read nor predicted, so never trained)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    count, _ = (int(x) for x in lines[0].split())
    words = [line.split(" ", 1)[0] for line in lines[1:]]
    return count == len(words) and "<pad>" not in words and words == [t for t in tokens if t != "<pad>"]


@pytest.mark.parametrize("tie", [False, True])
def test_word2vec_export_leaves_out_the_pad_row(tmp_path, monkeypatch, tie):
    """`lmgrid embed --words` and the workflow's vectors (export.exported) write no <pad> row, and the header counts
    the rows written.  kills: the untrained <pad> row exported (export.NEVER_SEEN emptied: the old export)."""
    run_dir = make_run(tmp_path, "lstm", "stream", tie)
    tokens = export.load_neural(run_dir).vocab.tokens
    assert tokens[0] == "<pad>"
    names = ["input.w2v.txt"] + ([] if tie else ["output.w2v.txt"])
    assert cli.main(["embed", "--run", str(run_dir), "--words", str(tmp_path / "ok")]) == 0
    assert all(_w2v_rows_are_the_trained_words(tmp_path / "ok" / n, tokens) for n in names)
    with monkeypatch.context() as m:  # the mutant: the filter gone, every vocabulary row exported
        m.setattr(export, "NEVER_SEEN", frozenset())
        assert cli.main(["embed", "--run", str(run_dir), "--words", str(tmp_path / "old")]) == 0
        assert not any(_w2v_rows_are_the_trained_words(tmp_path / "old" / n, tokens) for n in names)


def _output_vectors_give_the_heads_logits(head, x) -> bool:
    """Each word's exported output vector, dotted with the features, gives the head's logit for it within its
    cluster (up to the cluster's bias)."""
    vectors = head.word_vectors()
    feats = head.proj(x)
    for cluster in range(len(head.bounds)):
        lo = head.bounds[cluster - 1] if cluster else 0
        rows = head._rows(cluster)
        want = feats @ rows.T if cluster == 0 else head.tail_proj[cluster - 1](feats) @ rows.T
        if not torch.allclose(feats @ vectors[lo:head.bounds[cluster]].T, want, atol=1e-5):
            return False
    return True


def test_untied_adaptive_output_vectors_are_the_words_logit_directions(tmp_path, monkeypatch):
    """An untied adaptive softmax has no [V, d] output matrix; `lmgrid embed` exports, per word, the vector whose dot
    product with the features is the word's logit in its cluster (head rows; P_i^T r_w in tail i).
    kills: the tail rows exported without their projection (zero-padded to the head's width)."""
    from lmgrid.models.adaptive import AdaptiveHead

    torch.manual_seed(0)
    cfg = model_config_defaults(arch="lstm", vocab_size=16, layers=1, emb_dim=8, hidden_dim=8, n_step=2, max_len=20,
                      context_len=10, output_layer="adaptive", cutoffs=[6, 11])
    head = build_model(cfg).head
    assert isinstance(head, AdaptiveHead) and head.word_vectors().shape == (16, 8)
    x = torch.randn(5, 8)
    with torch.no_grad():
        assert _output_vectors_give_the_heads_logits(head, x)
        def unprojected(self):  # the tail rows zero-padded to the head's width: the projection left out
            dim = self._rows(0).shape[1]
            return torch.cat([self._rows(0), *(F.pad(self._rows(i + 1), (0, dim - self._rows(i + 1).shape[1]))
                                               for i in range(len(self.tail_proj)))])

        monkeypatch.setattr(AdaptiveHead, "word_vectors", unprojected)
        assert not _output_vectors_give_the_heads_logits(head, x)


# ---- the benchmark scores and their intervals ------------------------------------------------------------------

def _wordsim_words() -> list[str]:
    pairs = evaluate.read_pairs(evaluate.benchmark("wordsim353.tsv"))
    return sorted({w for a, b, _ in pairs for w in (a, b)})


def test_random_control_interval_contains_zero_at_its_confidence(monkeypatch):
    """Random vectors know nothing of the words: over 20 draws the 95% interval of their WordSim-353 rho contains 0
    in at least 17 (expected 19; 17 or more has probability 0.98).  kills: an interval too narrow for its stated
    level (here: computed at 50%, which contains 0 in about half the draws)."""
    words = _wordsim_words()
    path = evaluate.benchmark("wordsim353.tsv")

    def hits() -> int:
        out = 0
        for seed in range(20):
            s = evaluate.pair_scores(kv_of(*ppmi.random_vectors(words, 16, seed)), path, seed=seed, resamples=2000)
            assert s["coverage"] == 1.0 and s["pairs"] == 353
            out += s["rho_low"] <= 0.0 <= s["rho_high"]
        return out

    assert hits() >= 17
    monkeypatch.setattr(evaluate, "CONFIDENCE", 0.5)
    assert hits() < 17


def planted(tmp_path, n: int = 100, seed: int = 0):
    """A word-pair file of n disjoint pairs with distinct human scores, and 2-D unit vectors whose cosine for each
    pair falls as its score does not: angle between the pair's words = pi * (1 - score / 10)."""
    rng = np.random.default_rng(seed)
    scores = rng.permutation(np.linspace(0.5, 9.5, n))
    words, vectors, lines = [], [], ["# planted\tpairs\tscore"]
    for i, s in enumerate(scores):
        phi = rng.uniform(0, 2 * np.pi)
        theta = np.pi * (1 - s / 10)
        words += [f"a{i}", f"b{i}"]
        vectors += [[np.cos(phi), np.sin(phi)], [np.cos(phi + theta), np.sin(phi + theta)]]
        lines.append(f"a{i}\tb{i}\t{s:.4f}")
    path = tmp_path / "planted.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path, words, np.array(vectors)


def test_planted_embedding_gets_rho_one(tmp_path):
    """Cosine similarity ordered exactly as the human scores: rho 1 and the interval [1, 1], every pair covered.
    kills: each word scored with another word's vector (the shuffled control below)."""
    path, words, vectors = planted(tmp_path)
    s = evaluate.pair_scores(kv_of(words, vectors), path)
    assert (s["rho"], s["rho_low"], s["rho_high"]) == pytest.approx((1.0, 1.0, 1.0))
    assert (s["pairs_covered"], s["pairs"], s["coverage"]) == (100, 100, 1.0)
    shuffled = vectors[np.random.default_rng(1).permutation(len(words))]
    assert evaluate.pair_scores(kv_of(words, shuffled), path)["rho"] < 0.5


def test_vectors_shuffled_across_words_lose_the_correlation(tmp_path):
    """The negative control: the planted vectors permuted across words keep their distribution but not their words;
    rho falls within 3 standard errors of 0 (|rho| < 3 / sqrt(n - 1)) and its interval contains 0.
    kills: a score that does not depend on which word has which vector (here: the unshuffled planted vectors, which
    must fail the same check)."""
    path, words, vectors = planted(tmp_path)

    def uncorrelated(v) -> bool:
        s = evaluate.pair_scores(kv_of(words, v), path)
        return abs(s["rho"]) < 3 / math.sqrt(s["pairs_covered"] - 1) and s["rho_low"] <= 0 <= s["rho_high"]

    assert uncorrelated(vectors[np.random.default_rng(1).permutation(len(words))])
    assert not uncorrelated(vectors)


def test_the_interval_resamples_the_pairs_gensim_scored(tmp_path, monkeypatch):
    """pair_scores takes rho and coverage from gensim and resamples its own reading of the pairs; the two must be the
    same pairs.  kills: pairs read misaligned with their scores (each pair given the next pair's score)."""
    path, words, vectors = planted(tmp_path)
    evaluate.pair_scores(kv_of(words, vectors), path)
    real = evaluate.covered_pairs

    def misaligned(kv, pairs):
        got = real(kv, pairs)
        return [(a, b, got[(i + 1) % len(got)][2]) for i, (a, b, _) in enumerate(got)]

    monkeypatch.setattr(evaluate, "covered_pairs", misaligned)
    with pytest.raises(RuntimeError, match="not the 100.0% gensim scored"):
        evaluate.pair_scores(kv_of(words, vectors), path)


def _interval_is_scipys_paired_bootstrap(tmp_path, seed: int) -> bool:
    """pair_scores' interval on planted pairs whose cosines tie in places, against scipy's own paired bootstrap of
    the re-ranked resamples (stats.bootstrap(paired=True) with evaluate.spearman: every resample sorted anew)."""
    from scipy import stats

    tmp_path.mkdir()
    path, words, vectors = planted(tmp_path, n=120, seed=seed)
    # noise for a rho well below 1, rounded for ties among the cosines (pairs drawn twice tie as well)
    vectors = np.round(vectors + np.random.default_rng(seed).normal(0, 0.5, vectors.shape), 1)
    kv = kv_of(words, vectors)
    got = evaluate.pair_scores(kv, path, seed=seed, resamples=999)
    covered = evaluate.covered_pairs(kv, evaluate.read_pairs(path))
    human = np.array([s for *_, s in covered])
    model = np.array([kv.similarity(a, b) for a, b, _ in covered], dtype=np.float64)
    ci = stats.bootstrap((human, model), evaluate.spearman, paired=True, vectorized=True, n_resamples=999,
                         confidence_level=evaluate.CONFIDENCE, method="percentile",
                         rng=np.random.default_rng(seed)).confidence_interval
    return (got["rho_low"], got["rho_high"]) == pytest.approx((ci.low, ci.high), rel=0, abs=1e-12)


def test_the_interval_is_scipys_paired_bootstrap_of_the_rho(tmp_path, monkeypatch):
    """Each resample's rho is computed from how often it drew each pair (embed.ranks), not by re-ranking it: the
    interval is still scipy's paired bootstrap of Spearman's rho, the same resamples and the same rhos, ties
    included.  Kills: a resample's pairs counted once however often drawn (the resample read as a set; run here)."""
    assert all(_interval_is_scipys_paired_bootstrap(tmp_path / str(seed), seed) for seed in (0, 1, 2))
    real = evaluate.draw_counts
    monkeypatch.setattr(evaluate, "draw_counts", lambda draws, n: np.minimum(real(draws, n), 1))
    assert not _interval_is_scipys_paired_bootstrap(tmp_path / "mutant", 0)


def test_too_few_covered_pairs_give_no_score_but_the_coverage(tmp_path):
    """A vocabulary that meets the benchmarks in under MIN_PAIRS pairs (the synthetic corpus) gets no rho, no
    interval and no analogy accuracy, with its coverage.  kills: gensim's ValueError (no pair covered) escaping, or
    a rho reported from a handful of pairs."""
    s = evaluate.scores(kv_of(["zork", "tiger", "cat"], np.eye(3)))  # WordSim-353: tiger-cat and tiger-tiger
    assert s["wordsim353_pairs_covered"] == 2 and s["wordsim353_coverage"] == pytest.approx(2 / 353)
    assert all(math.isnan(s[k]) for k in ("wordsim353_rho", "wordsim353_rho_low", "simlex999_rho",
                                          "analogy_accuracy"))
    assert (s["analogy_questions_covered"], s["analogy_questions"]) == (0, 19544)


# ---- PPMI-SVD --------------------------------------------------------------------------------------------------

def test_cooccurrence_counts_within_sentences_only():
    """Window 1 over 'a b c' and 'c a': pairs a-b, b-c, c-a, each both ways.  kills: counting across the sentence
    boundary (c of the first sentence with c of the second)."""
    words = ["a", "b", "c"]
    want = np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]])
    got = ppmi.cooccurrence([["a", "b", "c"], ["c", "a"]], words, 1).toarray()
    assert np.array_equal(got, want)
    crossing = ppmi.cooccurrence([["a", "b", "c", "c", "a"]], words, 1).toarray()
    assert not np.array_equal(crossing, want)


def test_ppmi_is_its_definition_with_smoothed_contexts():
    """Dense PPMI on a small count matrix: max(0, log #(w,c) sum_c' #c'^0.75 / (#w #c^0.75)).  kills: unsmoothed
    context counts (alpha 1)."""
    from scipy import sparse

    counts = np.array([[0, 4, 1, 0], [4, 0, 2, 3], [1, 2, 0, 5], [0, 3, 5, 0]], dtype=float)
    w, c = counts.sum(1), counts.sum(0) ** 0.75
    with np.errstate(divide="ignore"):
        want = np.maximum(np.log(counts * c.sum() / np.outer(w, c)), 0)
    assert np.allclose(ppmi.ppmi(sparse.csr_matrix(counts)).toarray(), want)
    assert not np.allclose(ppmi.ppmi(sparse.csr_matrix(counts), alpha=1.0).toarray(), want)


def test_ppmi_svd_puts_words_of_one_context_class_together():
    """Two word classes that never share a context: every word's nearest word is of its own class under PPMI-SVD,
    not under the random control.  kills: vectors that ignore the counts."""
    rng = np.random.default_rng(0)
    a, b = [f"a{i}" for i in range(6)], [f"b{i}" for i in range(6)]
    sentences = [list(rng.choice(cls, 6)) for _ in range(400) for cls in (a, b)]
    words = a + b

    def same_class(kv) -> bool:
        return all(kv.most_similar(w, topn=1)[0][0][0] == w[0] for w in words)

    assert same_class(kv_of(*ppmi.ppmi_svd(sentences, words, 4, 2)))
    assert not same_class(kv_of(*ppmi.random_vectors(words, 4)))


# ---- sentence vectors and the query ----------------------------------------------------------------------------

SENTENCES = [["w1", "w2", "w3"], ["w4"], ["w5", "w1", "w2", "w6", "w7"], ["w2", "w3"], ["w8", "w9", "w1"]]


@torch.no_grad()
def _direct(lm, sentence, with_separator=True):
    """The contract's word states computed from the model's own outputs, one word at a time: [n, H]."""
    model, ids = lm.model, lm.vocab.encode(sentence)
    rows = []
    for i in range(1, len(ids) + 1):
        if model.cfg.arch == "lstm":  # stream regime: the top layer's final hidden state after </s> + w1..wi
            _, (h, _), _ = model(torch.tensor([[lm.eos, *ids[:i]] if with_separator else ids[:i]]))
            rows.append(h[-1, 0].numpy())
        else:  # ffnn, window regime: the hidden layer over the n_step-1 tokens ending at wi, left-padded with <s>
            k = lm.n_step - 1
            window = ([lm.bos] * k + ids[:i] if with_separator else [lm.bos] * k + ids[:i - 1])[-k:]
            x = model.embedding(torch.tensor([window])).flatten(1)
            rows.append(model.act(model.hidden[0](x))[0].numpy())
    return np.stack(rows)


def _sif(lm, sentence, states, component):
    weights = [1e-3 / (1e-3 + lm.vocab.counts[w] / sum(lm.vocab.counts.values())) for w in sentence]
    v = (np.array(weights)[:, None] * states).sum(0) / len(sentence)
    return v - (v @ component) * component


@pytest.mark.parametrize("arch,regime", [("lstm", "stream"), ("ffnn", "window")])
def test_sentence_vector_is_the_contracts_sif_mean_whatever_the_batch(tmp_path, arch, regime):
    """LSTM: the top layer's state after '</s> w1 .. wi' for each word i; FFNN: its hidden layer over the window
    ending at word i; weighted a / (a + p(w)) and averaged, less the projection on the common component (the first
    singular vector of the reference's weighted means); sentences of mixed lengths batched together give each the
    vector it gets alone.  kills: the LSTM read without its </s> separator (checked against the same comparison),
    the </s> position's state taken for the first word's and the last word's left out, the FFNN's windows shifted
    by one token (both run as mutants of export._word_states: they fail here)."""
    lm = export.load_neural(make_run(tmp_path, arch, regime, layers=2 if arch == "lstm" else 1))
    u = export.common_component(lm, SENTENCES)
    means = np.stack([(export.sif_weights(lm.vocab)[lm.vocab.encode(s)][:, None] * _direct(lm, s)).mean(0)
                      for s in SENTENCES])
    assert np.allclose(np.abs(u), np.abs(np.linalg.svd(means)[2][0]), atol=1e-5)
    got = export.sentence_vectors(lm, SENTENCES, reference=SENTENCES)
    for i, s in enumerate(SENTENCES):
        assert np.allclose(got[i], _sif(lm, s, _direct(lm, s), u), atol=1e-6)
        assert np.allclose(export.sentence_vectors(lm, [s], component=u)[0], got[i], atol=1e-6)
    assert not all(np.allclose(got[i], _sif(lm, s, _direct(lm, s, with_separator=False), u), atol=1e-6)
                   for i, s in enumerate(SENTENCES))


def test_transformer_sentence_vector_does_not_depend_on_the_batch(tmp_path, monkeypatch):
    """The transformer's vector of each sentence is the same in a mixed batch as alone (the same common component).
    kills: every position of a batch padded to its longest sentence read (run as a mutant of export._word_states:
    inputs left-padded with </s>; it fails here)."""
    lm = export.load_neural(make_run(tmp_path, "transformer", "stream"))
    u = export.common_component(lm, SENTENCES)
    together = export.sentence_vectors(lm, SENTENCES, component=u)
    alone = np.stack([export.sentence_vectors(lm, [s], component=u)[0] for s in SENTENCES])
    assert np.allclose(together, alone, atol=1e-6)
    assert not np.allclose(together[0], together[3], atol=1e-3)  # 'w1 w2 w3' and 'w2 w3': pooled, not last only


def test_query_returns_the_nearest_sentences_by_cosine(tmp_path, capsys, monkeypatch):
    """A sentence of the file as the query is its own nearest sentence, cosine 1, and the list falls in cosine.
    kills: the farthest sentences returned (distance taken for similarity)."""
    run_dir = make_run(tmp_path, "gru", "stream")
    text = tmp_path / "s.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n")

    def ranked() -> list[tuple[float, str]]:
        assert cli.main(["embed", "--run", str(run_dir), "--sentences", str(text), "--query", "w5 w1 w2 w6 w7",
                         "-k", "3", "--out", str(tmp_path / "v.tsv")]) == 0
        rows = capsys.readouterr().out.splitlines()[1:]
        return [(float(r.split("\t")[1]), r.split("\t")[2]) for r in rows]

    rows = ranked()
    assert len(rows) == 3 and rows[0] == (pytest.approx(1.0), "w5 w1 w2 w6 w7")
    assert [c for c, _ in rows] == sorted((c for c, _ in rows), reverse=True)
    assert np.loadtxt(tmp_path / "v.tsv").shape == (len(SENTENCES), 8)
    real = export.nearest_sentences
    monkeypatch.setattr(export, "nearest_sentences", lambda v, q, k: real(-v, q, k))
    assert ranked()[0][1] != "w5 w1 w2 w6 w7"


def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch):
    """A folder without a model, an n-gram run, a query of unknown words: exit 2 and one line naming the problem.
    kills: the unknown-word check left out (the query then embeds only <unk>s and answers)."""
    run_dir = make_run(tmp_path, "gru", "stream")
    text = tmp_path / "s.txt"
    text.write_text("w1 w2\nw3\n")
    ngram = tmp_path / "kn"
    ngram.mkdir()
    (ngram / "model.arpa").write_text("# lmgrid: ARPA file not written\n")
    cases = [(["--run", str(tmp_path / "none"), "--words", "x"], "none: run folder not found"),
             (["--run", str(tmp_path), "--words", "x"], "no trained neural model here (expected model.ckpt)"),
             (["--run", str(ngram), "--words", "x"], "kn: an n-gram run has no embeddings"),
             (["--run", str(run_dir), "--sentences", str(text), "--query", "foo BAR"],
              "--query: none of its words (foo BAR) is in the vocabulary of"),
             (["--run", str(run_dir), "--query", "w1"], "--query: needs --sentences FILE")]
    for args, message in cases:
        assert cli.main(["embed", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("lmgrid: error: ") and message in err[0], err
    monkeypatch.setattr(export, "known_words", lambda lm, words: words)
    assert cli.main(["embed", "--run", str(run_dir), "--sentences", str(text), "--query", "foo BAR"]) == 0


def test_mlflow_payload_is_the_cells_own_scores_and_vectors(tmp_path):
    """A cell's MLflow metrics are its own rows of embeddings.csv (embed_<embedding>_<score>, empty scores left
    out) and its artifacts its own vector files.  kills: the rows selected by another key than the run folder (here:
    the first rows of the table, another cell's)."""
    import pandas as pd

    from lmgrid.tracking import mirror as tracking
    from lmgrid.run.key import RunKey

    keys = [RunKey("ffnn", "torch", n, 1, "window", 1) for n in (2, 3)]
    rows = [{"model": k.name, "run": k.run_dir("c"), "arch": "ffnn", "embedding": e, "dim": 8,
             "wordsim353_rho": float("nan"), "wordsim353_pairs_covered": 3 + k.n_step, "analogy_accuracy": 0.1 * i}
            for k in keys for i, e in enumerate(("input", "output"))]
    (tmp_path / "results/c/embeddings").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "results/c/embeddings/embeddings.csv", index=False)
    for k in keys:
        folder = tmp_path / k.beside("c", "embeddings/vectors")
        folder.mkdir(parents=True)
        (folder / "input.w2v.txt").write_text("1 1\nx 0.5\n")
    want = {"embed_input_wordsim353_pairs_covered": 6.0, "embed_input_analogy_accuracy": 0.0,
            "embed_output_wordsim353_pairs_covered": 6.0, "embed_output_analogy_accuracy": 0.1}
    metrics, files = tracking.embedding_payload(tmp_path, "c", keys[1])
    assert metrics == pytest.approx(want) and files == [tmp_path / keys[1].beside("c", "embeddings/vectors") /
                                                        "input.w2v.txt"]
    wrong = tracking.embedding_payload(tmp_path, "c", keys[0])[0]
    assert wrong != pytest.approx(want)
    assert tracking.embedding_payload(tmp_path, "c", RunKey("kn", "ngram", 2, 1, "window", 0)) == ({}, [])


# ---- the study's benchmark table -------------------------------------------------------------------------------

def _study_rows(wordsim_covered: int):
    """Two rows of embeddings.csv (a cell and the random baseline): SimLex-999 and the analogies uncovered (0 of
    999, 0 of 19,544), WordSim-353 covered in `wordsim_covered` pairs (scored when at least MIN_PAIRS)."""
    import pandas as pd

    nan = math.nan
    scored = wordsim_covered >= evaluate.MIN_PAIRS
    return pd.DataFrame([{"model": m, "run": r, "arch": a, "embedding": e, "dim": 8,
                          "wordsim353_rho": 0.4 if scored else nan, "wordsim353_rho_low": 0.1 if scored else nan,
                          "wordsim353_rho_high": 0.6 if scored else nan, "wordsim353_pairs_covered": wordsim_covered,
                          "wordsim353_pairs": 353, "wordsim353_coverage": wordsim_covered / 353,
                          "simlex999_rho": nan, "simlex999_rho_low": nan, "simlex999_rho_high": nan,
                          "simlex999_pairs_covered": 0, "simlex999_pairs": 999, "simlex999_coverage": 0.0,
                          "analogy_accuracy": nan, "analogy_questions_covered": 0, "analogy_questions": 19544,
                          "analogy_coverage": 0.0}
                         for m, r, a, e in (("LSTM n0 l1 stream s1", "runs/x", "lstm", "input"),
                                            ("random d8", "", "random", "-"))])


def _empty_benchmarks_left_out(stem, wordsim_covered: int) -> bool:
    """The study's table files as the issue wants them: the three files written; no uncovered benchmark's column
    and no row of n/a; one line naming each uncovered benchmark and its coverage; with none covered, that line and
    no table at all."""
    import pandas as pd

    md, html = (stem.with_suffix(e).read_text() for e in (".md", ".html"))
    if len(pd.read_csv(stem.with_suffix(".csv"))) != 2:  # the csv keeps every row and figure
        return False
    lines = [line for line in md.splitlines() if line.strip()]
    said = "SimLex-999: 0 of 999 pairs in the vocabulary; analogies: 0 of 19,544 questions in the vocabulary"
    if "SimLex" in "".join(lines[2:]) or "analog" in "".join(lines[2:]) or "n/a" in md:
        return False  # an uncovered benchmark's column (or a cell of n/a) in the table
    if sum(said in line for line in lines) != 1:
        return False
    if not wordsim_covered:  # nothing covered: the title and one line, no table
        return (len(lines) == 2 and "WordSim-353: 0 of 353 pairs in the vocabulary" in lines[1]
                and "<table" not in html and "|" not in md
                and "class='no-data'" in html)  # the line the report's browser check accepts in a table's place
    return "WordSim-353 rho" in md and "<table" in html and "SimLex" not in html.split("<table", 1)[1]


@pytest.mark.parametrize("wordsim_covered", [0, 40])
def test_study_table_leaves_out_benchmarks_the_vocabulary_misses(tmp_path, monkeypatch, wordsim_covered):
    """A benchmark that covers no pair or question of the vocabulary is left out of the study's embeddings table
    (.md, .html) with one line saying which and why ('SimLex-999: 0 of 999 pairs in the vocabulary'); when none is
    covered (the synthetic corpus) that line replaces the table.  The .csv, .md and .html are still written (the
    workflow's outputs).  kills: every benchmark shown whatever its coverage (study.empty_benchmarks finding none:
    the old table of n/a columns)."""
    from lmgrid.embed import study

    rows = _study_rows(wordsim_covered)
    stem = tmp_path / "new" / "embeddings"
    stem.parent.mkdir()
    assert study.write_table(rows, stem) == [f"{stem}.{e}" for e in ("csv", "md", "html")]
    assert _empty_benchmarks_left_out(stem, wordsim_covered)
    with monkeypatch.context() as m:  # the mutant: no benchmark counted as empty, n/a columns everywhere
        m.setattr(study, "empty_benchmarks", lambda rows: [])
        old = tmp_path / "old" / "embeddings"
        old.parent.mkdir()
        study.write_table(rows, old)
        assert "n/a" in old.with_suffix(".md").read_text()
        assert not _empty_benchmarks_left_out(old, wordsim_covered)
