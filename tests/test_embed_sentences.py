"""Sentence vectors on the synthetic corpus (lmgrid.embed.export.sentence_vectors, issue 47 item 6): a model trained
here in a few hundred steps, and the SIF vectors of its word states compared with the last-state vectors they
replace (every synthetic sentence ends in '.', so a last state is mostly the state after '.').

Each test names the mutation it kills and runs that mutant too, asserting that the check catches it."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmgrid import cli
from lmgrid.data import vocab as vocab_mod
from lmgrid.data.synth import Grammar, GrammarConfig
from lmgrid.embed import export
from lmgrid.models import build_model
from lmgrid.neural.train import save_model
from lmgrid.run.spec import model_config_defaults

# tests/tinygrid.py's grammar: a vocabulary small enough that a sentence's content words recur in the file
GRAMMAR = {"nouns": 30, "adjectives": 10, "intransitive_verbs": 10, "transitive_verbs": 10, "adverbs": 5}
TRAIN_SENTENCES, FILE_SENTENCES = 2000, 300


@pytest.fixture(autouse=True)
def one_thread():
    """Training and embedding at 1 thread: the same arithmetic on any machine, and no OpenMP threads waiting on each
    other on a loaded one (measured: at 2 threads on a loaded 2-core machine, embedding the reference and the last
    states took 68 s; at 1 thread, 0.4 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def content_words(grammar: Grammar) -> set[str]:
    """Nouns, adjectives, verbs and adverbs: the words that say what a sentence is about (not determiners,
    prepositions, 'that', 'as', brackets or '.')."""
    lex = grammar.lex
    return {w for pair in lex.nouns + lex.iverbs + lex.tverbs for w in pair} | set(lex.adjectives) | set(lex.adverbs)


def train_run(tmp_path, arch="lstm", steps=300, seed=0):
    """A run folder with `arch` trained in the stream regime on the synthetic corpus (rows of 32 tokens of the
    stream '</s> s1 </s> s2 ...', Adam), and the grammar, training and held-out sentences."""
    torch.manual_seed(seed)
    grammar = Grammar(GrammarConfig(**GRAMMAR))
    sample = [s for s, _ in grammar.sample(TRAIN_SENTENCES + FILE_SENTENCES, seed=3)]
    train, held_out = sample[:TRAIN_SENTENCES], sample[TRAIN_SENTENCES:]
    vocab = vocab_mod.build(train)
    cfg = {"arch": arch, "vocab_size": len(vocab), "layers": 1, "emb_dim": 32, "hidden_dim": 32, "n_step": 2,
           "max_len": 64, "context_len": 0, "tie_weights": False, "dropout": 0.0}
    model = build_model(model_config_defaults(**cfg))
    stream = torch.tensor([i for s in train for i in [vocab.index["</s>"], *vocab.encode(s)]])
    rows = stream[: len(stream) // 33 * 33].view(-1, 33)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = rows[torch.randint(len(rows), (32,), generator=gen)]
        logits, _, _ = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    run_dir = tmp_path / f"{arch}_stream"
    run_dir.mkdir()
    save_model(run_dir / "model.ckpt", model.eval(), cfg, vocab,
               {"arch": arch, "impl": "torch", "n_step": 0, "layers": 1, "regime": "stream", "seed": seed}, {})
    return run_dir, grammar, train, held_out


def _last_states(lm, sentences, reference=None, component=None):
    """The vectors this module gave before (stream regime): the top layer's state after '</s> w1 .. wn'."""
    with torch.no_grad():
        return np.stack([lm.model.features(torch.tensor([[lm.eos, *lm.vocab.encode(s)]]))[0][0, -1].numpy()
                         for s in sentences])


def _neighbour_check(vectors, sentences, content) -> tuple[float, float, float, float]:
    """Every sentence a query: (a typical query's median cosine to the other sentences; the mean number of content
    words a query shares with its nearest neighbour, and with a random other sentence (the mean over all others);
    the one-sided p-value of the paired t-test that the first exceeds the second)."""
    from scipy.stats import ttest_1samp

    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cos = unit @ unit.T
    sets = [set(s) & content for s in sentences]
    medians, nearest, random = [], [], []
    for q in range(len(sentences)):
        others = np.delete(np.arange(len(sentences)), q)
        medians.append(np.median(cos[q, others]))
        shared = np.array([len(sets[q] & sets[j]) for j in others])
        nearest.append(shared[np.argmax(cos[q, others])])
        random.append(shared.mean())
    p_value = ttest_1samp(np.subtract(nearest, random), 0.0, alternative="greater").pvalue
    return float(np.median(medians)), float(np.mean(nearest)), float(np.mean(random)), float(p_value)


def separates(lm, sentences, train, content) -> bool:
    """(a) a typical other sentence is nearer orthogonal than parallel to a query: median cosine below 0.5, the
    midpoint between 'unrelated' (0) and 'the same direction' (1); the complaint was every cosine ~1, which leaves
    a ranking no room (cosines printed to 4 decimals all read 0.999x).  (b) the nearest neighbour shares more content
    words with the query than a random sentence does, on average over queries, beyond chance (paired t-test,
    one-sided p < 0.01: 300 queries, so a mapping that ignores content passes only by a 1% chance)."""
    median_cos, nearest, random, p_value = _neighbour_check(
        export.sentence_vectors(lm, sentences, reference=train), sentences, content)
    return median_cos < 0.5 and nearest > random and p_value < 0.01


def test_sentence_vectors_separate_synthetic_sentences(tmp_path, monkeypatch):
    """A model trained here on the synthetic corpus: its sentence vectors spread the held-out sentences' cosines and
    put a sentence next to one that shares its content words (`separates`).  Kills: the last-state vectors the
    module gave before (every sentence ends in '.', so all cosines ~1); the vectors handed to the wrong sentences
    (rows permuted: the cosines stay spread, the neighbours no longer share content)."""
    run_dir, grammar, train, held_out = train_run(tmp_path)
    lm = export.load_neural(run_dir)
    content = content_words(grammar)
    assert separates(lm, held_out, train, content)
    with monkeypatch.context() as m:
        m.setattr(export, "sentence_vectors", _last_states)
        assert not separates(lm, held_out, train, content)
    real = export.sentence_vectors
    shift = lambda lm, s, **kw: np.roll(real(lm, s, **kw), 1, axis=0)  # noqa: E731
    with monkeypatch.context() as m:
        m.setattr(export, "sentence_vectors", shift)
        assert not separates(lm, held_out, train, content)


def test_query_uses_the_corpus_training_split_as_reference(tmp_path, capsys, monkeypatch):
    """A run in a results tree: `lmgrid embed` takes the common component from results/<corpus>/corpus/train.txt
    (its first REFERENCE_SENTENCES), and a sentence of the file as the query is its own nearest, cosine 1 (the query
    and the file share the component).  Kills: the query's component taken from the query alone (its own vector is
    then ~0 after removal, and the cosine with its file twin is not 1)."""
    run_dir, _, train, held_out = train_run(tmp_path, steps=50)
    cell = tmp_path / "results" / "synth" / "runs" / "lstm" / "torch" / "s0_stream"
    cell.parent.mkdir(parents=True)
    run_dir.rename(cell)
    (tmp_path / "results" / "synth" / "corpus").mkdir()
    train = train[:500]  # a shorter reference: less to embed
    (tmp_path / "results" / "synth" / "corpus" / "train.txt").write_text("\n".join(map(" ".join, train)) + "\n")
    text = tmp_path / "held_out.txt"
    text.write_text("\n".join(map(" ".join, held_out[:50])) + "\n")
    query = " ".join(held_out[7])

    def top() -> tuple[float, str]:
        assert cli.main(["embed", "--run", str(cell), "--sentences", str(text), "--query", query, "-k", "2"]) == 0
        out, err = capsys.readouterr()
        reference = tmp_path.resolve() / "results" / "synth" / "corpus" / "train.txt"
        assert f"common component: from {len(train)} sentences of {reference}" in err
        rank1 = out.splitlines()[1].split("\t")
        return float(rank1[1]), rank1[2]

    assert top() == (pytest.approx(1.0, abs=1e-5), query)
    real = export.sentence_vectors
    def own(lm, s, component=None):  # the mutant: a one-sentence call (the query) takes its own component
        return real(lm, s) if len(s) == 1 else real(lm, s, component=component)

    monkeypatch.setattr(export, "sentence_vectors", own)
    assert top() != (pytest.approx(1.0, abs=1e-5), query)
