"""The two regimes' data: targets and counted tokens are exactly the shared convention (lmgrid.data.ppl)."""
from __future__ import annotations

import pytest
import torch

from lmgrid.common.errors import LmgridError
from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.neural.data import IGNORE, StreamChunks, batchify, stream_tokens, window_examples
from lmgrid.neural.module import batch_nll, evaluate
from lmgrid.data.ppl import BOS, EOS, PAD, counted_tokens, targets
from lmgrid.data.vocab import build

SENTS = [["the", "cat", "sat"], ["a"], ["the", "dog", "saw", "a", "cat", "today"], ["zebra", "x"]]


@pytest.fixture
def vocab():
    return build(SENTS[:3])  # "zebra" and "x" stay out of the vocabulary: <unk>


@pytest.mark.parametrize("n_step", [2, 3, 5, 9])
def test_window_targets_equal_ngram_convention(vocab, n_step):
    ids = [vocab.encode(s) for s in SENTS]
    x, y = window_examples(ids, n_step, vocab.index[BOS], vocab.index[EOS])
    expected = [t for s in SENTS for t in targets(vocab.map(s))]
    assert [vocab.tokens[i] for i in y.tolist()] == expected
    assert len(y) == counted_tokens(SENTS)
    assert x.shape == (len(y), n_step - 1)
    assert vocab.index[PAD] not in x.tolist() and vocab.index[PAD] not in y.tolist()
    # Context = the previous n_step-1 tokens of the same sentence, left-padded with <s>.
    row = 0
    for s in SENTS:
        padded = [BOS] * (n_step - 1) + vocab.map(s)
        for j in range(len(s) + 1):
            assert [vocab.tokens[i] for i in x[row].tolist()] == padded[j:j + n_step - 1]
            row += 1


@pytest.mark.parametrize("n_step", [1, 0, -3])
def test_window_n_step_below_2_is_an_error(vocab, n_step):
    with pytest.raises(LmgridError, match="n_step: .* below 2"):
        window_examples([vocab.encode(s) for s in SENTS], n_step, 2, 3)


@pytest.mark.parametrize("rows", [1, 3, 4, 7, 100])
def test_stream_counts_every_target_once(vocab, rows):
    ids = [vocab.encode(s) for s in SENTS]
    eos = vocab.index[EOS]
    stream = stream_tokens(ids, eos)
    assert stream[0] == eos  # context of the first word, never a target
    x, y = batchify(stream, rows, vocab.index[PAD])
    real = y != IGNORE
    assert int(real.sum()) == counted_tokens(SENTS)
    # Row-major order of the real targets is the stream of targets: words + </s>, <s> never.
    expected = [t for s in SENTS for t in targets(vocab.map(s))]
    assert [vocab.tokens[i] for i in y[real].tolist()] == expected
    assert vocab.index[BOS] not in x.tolist()
    # Each input is the token before its target; padded cells are <pad> inputs with ignored targets.
    assert torch.equal(x[real], stream[:-1])
    assert (x[~real] == vocab.index[PAD]).all()
    chunks = StreamChunks(x, y, bptt=3)
    assert torch.equal(torch.cat([chunks[i][1] for i in range(len(chunks))], 1), y)


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_stream_nll_never_counts_padding(vocab, arch):
    """The loss over a padded stream equals the loss over exactly the counted targets."""
    torch.manual_seed(0)
    model = build_model(model_config_defaults(arch=arch, vocab_size=len(vocab), emb_dim=8, hidden_dim=8, heads=2, max_len=64)).eval()
    ids = [vocab.encode(s) for s in SENTS]
    stream = stream_tokens(ids, vocab.index[EOS])
    x, y = batchify(stream, 1, vocab.index[PAD])
    x_pad = torch.cat([x, torch.full((1, 5), vocab.index[PAD])], 1)  # extra padded tail
    y_pad = torch.cat([y, torch.full((1, 5), IGNORE)], 1)
    with torch.no_grad():
        nll, n, _ = batch_nll(model, x, y, "stream")
        nll_pad, n_pad, _ = batch_nll(model, x_pad, y_pad, "stream")
        logp = torch.log_softmax(model(stream[None, :-1])[0][0], -1)
    reference = -logp.gather(1, stream[1:, None]).sum()
    assert int(n) == int(n_pad) == counted_tokens(SENTS)
    assert float(nll) == pytest.approx(float(reference), rel=1e-5)
    assert float(nll_pad) == pytest.approx(float(reference), rel=1e-5)


def test_stream_state_carried_across_chunks(vocab):
    """Evaluating chunk by chunk with the carried state equals one pass over the whole stream."""
    torch.manual_seed(0)
    model = build_model(model_config_defaults(arch="lstm", vocab_size=len(vocab), emb_dim=8, hidden_dim=8)).eval()
    stream = stream_tokens([vocab.encode(s) for s in SENTS], vocab.index[EOS])
    x, y = batchify(stream, 1, vocab.index[PAD])
    whole, n_whole = evaluate(model, [(x, y)], "stream", "cpu")
    chunked, n_chunked = evaluate(model, StreamChunks(x, y, 4), "stream", "cpu")
    assert n_whole == n_chunked == counted_tokens(SENTS)
    assert chunked == pytest.approx(whole, rel=1e-5)
