"""The synthetic grammar: determinism, an exact oracle, and sampling that follows it."""
import collections
import math

import pytest

from lmgrid.data.synth import Grammar, GrammarConfig

# Small enough to enumerate (6120 derivations) yet exercising every construction:
# number, PP and both relative clauses, adverbs, and the bracketed aside.
TINY = GrammarConfig(nouns=1, adjectives=1, intransitive_verbs=1, transitive_verbs=1, adverbs=1,
                     max_depth=1, p_adjective=0.0, determiners=1, prepositions=1)


@pytest.fixture(scope="module")
def tiny_distribution():
    dist = {}
    for tokens, logp in Grammar(TINY).enumerate_sentences():
        key = " ".join(tokens)
        assert key not in dist, f"two derivations of {key!r}: the grammar is ambiguous"
        dist[key] = logp
    return dist


def test_enumerated_probabilities_sum_to_one(tiny_distribution):
    total = math.fsum(math.exp(lp) for lp in tiny_distribution.values())
    assert len(tiny_distribution) > 1000
    assert total == pytest.approx(1.0, abs=1e-12)


def test_sampled_logprob_matches_enumeration(tiny_distribution):
    for tokens, logp in Grammar(TINY).sample(500, seed=3):
        assert logp == pytest.approx(tiny_distribution[" ".join(tokens)], abs=1e-12)


def test_sampling_frequencies_follow_probabilities(tiny_distribution):
    """Pearson chi-square over the 20 most probable sentences plus an 'other' bin, at a fixed seed."""
    n = 20000
    counts = collections.Counter(" ".join(t) for t, _ in Grammar(TINY).sample(n, seed=11))
    top = sorted(tiny_distribution, key=tiny_distribution.get, reverse=True)[:20]
    expected = [n * math.exp(tiny_distribution[s]) for s in top]
    observed = [counts[s] for s in top]
    expected.append(n - sum(expected))
    observed.append(n - sum(observed))
    assert min(expected) > 5  # chi-square approximation is valid
    chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    # 20 degrees of freedom: the 0.999 quantile of chi-square(20) is 45.31.
    assert chi2 < 45.31, f"chi2={chi2:.1f}"


def test_sampling_is_deterministic_in_the_seed():
    g = Grammar()
    assert g.sample(50, seed=5) == g.sample(50, seed=5)
    assert g.sample(50, seed=5) != g.sample(50, seed=6)


def test_default_grammar_is_zipfian_and_has_long_agreement():
    g = Grammar()
    words = g.lex.words()
    assert 300 <= len(words) <= 3000
    sample = g.sample(3000, seed=1)
    counts = collections.Counter(t for s, _ in sample for t in s)
    nouns = [counts[sg] + counts[pl] for sg, pl in g.lex.nouns]
    assert nouns[0] > 5 * nouns[20] > 0  # rank 1 far more frequent than rank 21
    # Some subject is separated from its verb by a modifier longer than an n-gram window.
    assert any("that" in s and len(s) > 12 for s, _ in sample)
    opens = sum(counts[o] for o in ("(", "["))
    assert opens > 0 and counts["("] == counts[")"] and counts["["] == counts["]"]


def test_asides_close_with_the_matching_marker():
    for tokens, _ in Grammar().sample(2000, seed=2):
        stack = []
        for t in tokens:
            if t in "([":
                stack.append(t)
            elif t in ")]":
                assert stack and {"(": ")", "[": "]"}[stack.pop()] == t
        assert not stack


def test_bad_grammar_settings_are_rejected():
    with pytest.raises(ValueError, match="determiners"):
        Grammar(GrammarConfig(determiners=9))
