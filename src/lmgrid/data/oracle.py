"""The oracle perplexity of the synthetic corpus: the true model, scored by the shared convention.

The grammar gives each sentence's exact probability p(s), which already includes the
end of the sentence.  Summing -log p(s) over a split and dividing by the counted tokens
(words + one </s> per sentence) is the perplexity of the data-generating distribution
itself: no model can beat it in expectation on fresh samples, so one that does on the
test split signals a bug or leakage.  If the vocabulary maps some test words to <unk>,
a model that predicts <unk> pools the mass of many words, and the figure is no longer
a strict floor; `is_floor` says which case holds.
"""
from __future__ import annotations

from pathlib import Path

from lmgrid.data.corpus import load_split
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import write_json
from lmgrid.data.ppl import counted_tokens, perplexity
from lmgrid.data.vocab import Vocab


def write_sample(sentences_with_logp, text_path, logp_path) -> None:
    from lmgrid.data.corpus import write_split
    from lmgrid.common.fileio import atomic_write

    write_split(text_path, [s for s, _ in sentences_with_logp])
    with atomic_write(logp_path) as fh:
        for _, lp in sentences_with_logp:
            fh.write(f"{lp!r}\n")


def read_logprobs(path: str | Path) -> list[float]:
    try:
        return [float(x) for x in Path(path).read_text(encoding="utf-8").split()]
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except ValueError as e:
        raise LmgridError(f"{path}: not a list of log-probabilities ({e})") from None


def split_oracle(corpus_path, logp_path, vocab: Vocab) -> dict:
    sentences = load_split(corpus_path)
    logps = read_logprobs(logp_path)
    if len(sentences) != len(logps):
        raise LmgridError(f"{logp_path}: {len(logps)} log-probabilities for {len(sentences)} sentences in {corpus_path}")
    nll = -sum(logps)
    tokens = counted_tokens(sentences)
    oov = sum(1 for s in sentences for t in s if t not in vocab.index)
    return {"ppl": perplexity(nll, tokens), "nll_nats": nll, "tokens": tokens, "oov_tokens": oov,
            "is_floor": oov == 0}


def run(vocab_path, out_path, **splits: tuple[str, str]) -> dict:
    vocab = Vocab.load(vocab_path)
    result = {name: split_oracle(c, lp, vocab) for name, (c, lp) in splits.items()}
    write_json(out_path, result)
    return result
