"""The embedded default corpus: an English-like probabilistic grammar with an exact oracle.

Every sentence is produced by a sequence of random choices, and the generator
multiplies the probabilities of the choices it makes.  The grammar is built so
that each sentence has exactly one derivation (word classes are disjoint, each
noun phrase carries at most one post-modifier, and every optional element
starts with a token of its own), so that product *is* the probability of the
sentence.  ``enumerate_sentences`` walks every derivation of a small grammar;
the tests check that the probabilities sum to 1 and that no two derivations
yield the same sentence.

Long-distance dependencies an n-gram model cannot capture:
  * subject-verb number agreement across prepositional phrases and relative
    clauses ("the keys to the old cabinet that she painted are ..."), also for
    the verb of a subject relative clause, which agrees with the head noun;
  * an aside opened after the subject with ``(`` or ``[`` must be closed with
    the matching ``)`` or ``]`` after an arbitrarily long clause.

The grammar and the oracle are documented in docs/synthetic_corpus.md.
"""
from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field

SG, PL = 0, 1
DETERMINERS = (("the", "a", "this", "every"), ("the", "some", "these", "many"))
DETERMINER_P = (0.5, 0.25, 0.15, 0.10)
PREPOSITIONS = ("to", "of", "near", "behind", "under", "with", "from", "beside")
ASIDE_MARKERS = (("(", ")"), ("[", "]"))
END = "."


@dataclass(frozen=True)
class GrammarConfig:
    """Sizes and branching probabilities of the grammar (all defaults are the shipped corpus)."""

    nouns: int = 300
    adjectives: int = 120
    intransitive_verbs: int = 80
    transitive_verbs: int = 120
    adverbs: int = 40
    determiners: int = 4           # per number; the closed classes shrink for enumeration tests
    prepositions: int = 8
    zipf_exponent: float = 1.0
    lexicon_seed: int = 7          # the made-up words; the sentences use their own seed
    p_plural: float = 0.4
    p_adjective: float = 0.35      # each further adjective, geometric
    max_adjectives: int = 2
    p_pp: float = 0.25             # post-modifier of a noun phrase: PP ...
    p_relative: float = 0.15       # ... or relative clause (else none)
    p_subject_relative: float = 0.5
    max_depth: int = 2             # nesting of noun phrases inside modifiers
    p_transitive: float = 0.55
    p_adverb: float = 0.2
    p_aside: float = 0.12


class Lexicon:
    """Made-up word forms with Zipfian frequencies, disjoint across word classes."""

    def __init__(self, cfg: GrammarConfig):
        rng = random.Random(cfg.lexicon_seed)
        onsets = "b d f g k l m n p r t v z br dr gl kr pl sk st tr".split()
        vowels = "a e i o u ai ou ea".split()
        codas = ["", "n", "m", "l", "r", "k", "p", "t", "x"]
        taken = set(DETERMINERS[0] + DETERMINERS[1] + PREPOSITIONS) | {"that", "as", "s", "is", "are"}

        def fresh(suffix: str = "") -> str:
            while True:
                n_syl = rng.choice((1, 2, 2, 3))
                stem = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(n_syl)) + rng.choice(codas)
                if stem not in taken and stem + "s" not in taken and stem + suffix not in taken:
                    taken.update((stem, stem + "s", stem + suffix))
                    return stem

        def zipf(n: int) -> list[float]:
            w = [1.0 / (r ** cfg.zipf_exponent) for r in range(1, n + 1)]
            z = sum(w)
            return [x / z for x in w]

        # Plural nouns and singular verbs add "s"; stems are reserved with their "s" form,
        # so a singular and a plural form can never coincide with any other word.
        self.nouns = [(s, s + "s") for s in (fresh() for _ in range(cfg.nouns))]
        self.noun_p = zipf(cfg.nouns)
        self.adjectives = [fresh("ish") + "ish" for _ in range(cfg.adjectives)]
        self.adjective_p = zipf(cfg.adjectives)
        self.iverbs = [(s + "s", s) for s in (fresh() for _ in range(cfg.intransitive_verbs))]
        self.iverb_p = zipf(cfg.intransitive_verbs)
        self.tverbs = [(s + "es", s + "e") for s in (fresh("e") for _ in range(cfg.transitive_verbs))]
        self.tverb_p = zipf(cfg.transitive_verbs)
        self.adverbs = [fresh("ly") + "ly" for _ in range(cfg.adverbs)]
        self.adverb_p = zipf(cfg.adverbs)
        if not (1 <= cfg.determiners <= len(DETERMINER_P) and 1 <= cfg.prepositions <= len(PREPOSITIONS)):
            raise ValueError(f"determiners must be 1..{len(DETERMINER_P)} and prepositions 1..{len(PREPOSITIONS)}")
        self.prepositions = PREPOSITIONS[: cfg.prepositions]
        self.preposition_p = zipf(cfg.prepositions)
        det_w = DETERMINER_P[: cfg.determiners]
        self.determiner_p = [w / sum(det_w) for w in det_w]
        forms = [w for pair in self.nouns + self.iverbs + self.tverbs for w in pair] + self.adjectives + self.adverbs
        if len(set(forms)) != len(forms):  # a collision would give a sentence two derivations
            raise ValueError(f"lexicon_seed {cfg.lexicon_seed} produced a duplicate word form")

    def words(self) -> set[str]:
        dets = DETERMINERS[0][: len(self.determiner_p)] + DETERMINERS[1][: len(self.determiner_p)]
        out = set(dets + self.prepositions) | {"that", "as", END}
        out |= {w for pair in self.nouns + self.iverbs + self.tverbs for w in pair}
        out |= set(self.adjectives) | set(self.adverbs)
        out |= {m for pair in ASIDE_MARKERS for m in pair}
        return out


class _Sampler:
    """Makes each choice at random and accumulates its log-probability."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.logp = 0.0
        self._cumulative: dict[int, list[float]] = {}  # by id(): the lexicon's lists live as long as we do

    def choose(self, probs) -> int:
        cum = self._cumulative.get(id(probs))
        if cum is None:
            cum = list(itertools.accumulate(probs))
            if len(probs) > 3:
                self._cumulative[id(probs)] = cum
        # min() guards against a float sum a hair below 1.0
        i = min(bisect.bisect_right(cum, self.rng.random() * cum[-1]), len(probs) - 1)
        while probs[i] <= 0.0:  # never land on an impossible option
            i -= 1
        self.logp += math.log(probs[i])
        return i


class _Replayer:
    """Follows a fixed prefix of choices, then takes option 0, recording the branching points."""

    def __init__(self, prefix: list[int]):
        self.prefix = prefix
        self.made: list[tuple[int, list[int]]] = []  # (choice, the options of non-zero probability)
        self.logp = 0.0

    def choose(self, probs) -> int:
        k = len(self.made)
        options = [j for j, p in enumerate(probs) if p > 0.0]
        i = self.prefix[k] if k < len(self.prefix) else options[0]
        self.made.append((i, options))
        self.logp += math.log(probs[i])
        return i


@dataclass
class Grammar:
    cfg: GrammarConfig = field(default_factory=GrammarConfig)

    def __post_init__(self):
        self.lex = Lexicon(self.cfg)

    # Each method appends tokens to `out`; `ch.choose(probs)` returns the index picked.
    # Options with probability 0 are never offered, so log(0) cannot occur.
    def _bernoulli(self, ch, p: float) -> bool:
        if p <= 0.0:
            return False
        if p >= 1.0:
            return True
        return ch.choose((1.0 - p, p)) == 1

    def _np(self, ch, out: list[str], depth: int) -> int:
        c = self.cfg
        num = PL if self._bernoulli(ch, c.p_plural) else SG
        out.append(DETERMINERS[num][ch.choose(self.lex.determiner_p)])
        for _ in range(c.max_adjectives):
            if not self._bernoulli(ch, c.p_adjective):
                break
            out.append(self.lex.adjectives[ch.choose(self.lex.adjective_p)])
        out.append(self.lex.nouns[ch.choose(self.lex.noun_p)][num])
        if depth < c.max_depth:
            mod = ch.choose((1.0 - c.p_pp - c.p_relative, c.p_pp, c.p_relative))
            if mod == 1:
                out.append(self.lex.prepositions[ch.choose(self.lex.preposition_p)])
                self._np(ch, out, depth + 1)
            elif mod == 2:
                out.append("that")
                if self._bernoulli(ch, c.p_subject_relative):
                    self._vp(ch, out, num, depth + 1)   # "that open the door": agrees with the head
                else:
                    inner = self._np(ch, out, depth + 1)  # "that the man opens": object gap
                    out.append(self.lex.tverbs[ch.choose(self.lex.tverb_p)][inner])
        return num

    def _vp(self, ch, out: list[str], num: int, depth: int) -> None:
        c = self.cfg
        if self._bernoulli(ch, c.p_transitive):
            out.append(self.lex.tverbs[ch.choose(self.lex.tverb_p)][num])
            self._np(ch, out, depth)
        else:
            out.append(self.lex.iverbs[ch.choose(self.lex.iverb_p)][num])
            if self._bernoulli(ch, c.p_adverb):
                out.append(self.lex.adverbs[ch.choose(self.lex.adverb_p)])

    def _sentence(self, ch) -> list[str]:
        out: list[str] = []
        num = self._np(ch, out, 0)
        if self._bernoulli(ch, self.cfg.p_aside):
            open_, close = ASIDE_MARKERS[ch.choose((0.5, 0.5))]
            out += [open_, "as"]
            inner = self._np(ch, out, 1)
            self._vp(ch, out, inner, 1)
            out.append(close)
        self._vp(ch, out, num, 0)
        out.append(END)
        return out

    def sample(self, n: int, seed: int) -> list[tuple[list[str], float]]:
        """`n` sentences with their exact natural-log probabilities, deterministic in `seed`."""
        ch = _Sampler(random.Random(seed))
        result = []
        for _ in range(n):
            ch.logp = 0.0
            result.append((self._sentence(ch), ch.logp))
        return result

    def enumerate_sentences(self, limit: int = 2_000_000):
        """Yield (sentence, log-prob) for every derivation, depth-first (small grammars only)."""
        stack: list[list[int]] = [[]]
        count = 0
        while stack:
            prefix = stack.pop()
            ch = _Replayer(prefix)
            tokens = self._sentence(ch)
            count += 1
            if count > limit:
                raise ValueError(f"grammar has more than {limit} derivations; shrink it to enumerate")
            yield tokens, ch.logp
            # Every choice past the prefix took its first option; its siblings are new derivations.
            for k in range(len(ch.made) - 1, len(prefix) - 1, -1):
                _, options = ch.made[k]
                base = [i for i, _ in ch.made[:k]]
                for alt in options[1:]:
                    stack.append(base + [alt])
