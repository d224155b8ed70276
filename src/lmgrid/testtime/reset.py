"""The reset pass: a finished stream-regime run scored with its state reset at every sentence start (no retraining).

A stream run's metrics.json PPL carries the state through rows of whole sentences, so each sentence is conditioned
on the sentences before it in its row (lmgrid.data.ppl).  This pass scores every sentence alone: sentence
w1 .. wn is read as `</s> w1 .. wn` from a zero state (</s> is the stream layout's sentence-start symbol: every
row of lmgrid.neural.data.sentence_rows starts so, and training rows do too) and predicts w1 .. wn </s>.  Nothing
of another sentence is seen, as in the window regime; what differs from a window model is only the context length
within the sentence (all of it, not the last n-1 tokens).  The counted targets are the stream test PPL's, every
word and one </s> per sentence: the count must equal the run's metrics.json token count, or nothing is written.

The arithmetic is the run's own evaluation's (lmgrid.testtime.combine.cells.neural_base): model.ckpt on the device
kind it was evaluated on, in the precision it trained in (bf16-mixed autocast where it did), with its thread count,
through lmgrid.neural.module.evaluate in chunks of its bptt (the state, or a transformer's context, carried within
a sentence).  Only the rows differ: one sentence per row instead of stream_eval_batch_size rows of many.

Batching: the sentences are sorted by length (longest first, so the largest batch comes first) and cut into
batches of `batch_sentences` rows.  A row is padded at its tail (input <pad>, target IGNORE): padding is neither
scored nor counted, and since every model is causal it changes no real position.  The per-token NLLs go back to
corpus order and are summed there in float64, so the PPL does not depend on the batch size beyond the rounding of
batched matrix products (tests/test_reset.py).
"""
from __future__ import annotations

import time
from pathlib import Path

from lmgrid.common.argtypes import count
from lmgrid.common.errors import LmgridError
from lmgrid.data.corpus import load_split
from lmgrid.data.ppl import EOS, PAD, counted_tokens, perplexity
from lmgrid.run import reset_scores
from lmgrid.run.record import EVAL_SPLITS, RECORD_FILE, RunRecord

BATCH_SENTENCES = 64  # rows per batch; the result does not depend on it (module docstring)


def length_order(ids: list[list[int]]) -> list[int]:
    """Sentence indices, longest first (stable: equal lengths keep corpus order): batches of like lengths pad little."""
    return sorted(range(len(ids)), key=lambda i: -len(ids[i]))


def reset_token_nll(model, ids: list[list[int]], *, eos: int, pad: int, bptt: int,
                    batch_sentences: int = BATCH_SENTENCES, device="cpu"):
    """NLL (nats, float32 tensor [N]) of every counted target, each sentence from a zero state after one </s>, in
    corpus order: sentence 0's words and </s>, then sentence 1's, ...  ids: the sentences as vocabulary ids."""
    import torch

    from lmgrid.neural.data import StreamChunks, sentence_rows
    from lmgrid.neural.evaluation import corpus_order, evaluate

    if batch_sentences < 1:
        raise LmgridError(f"batch_sentences: {batch_sentences} is not a whole number >= 1")
    order = length_order(ids)
    per_sentence: list = [None] * len(ids)
    for start in range(0, len(order), batch_sentences):
        batch = order[start:start + batch_sentences]
        x, y = sentence_rows([ids[i] for i in batch], len(batch), eos, pad)  # one sentence per row
        chunks = StreamChunks(x.to(device), y.to(device), bptt)
        collected: list = []
        evaluate(model, (chunks[i] for i in range(len(chunks))), "stream", device, token_nll=collected)
        nll, _ = corpus_order(collected, "stream")  # row by row: the batch's sentences in batch order
        for i, part in zip(batch, nll.split([len(ids[i]) + 1 for i in batch])):
            per_sentence[i] = part
    return torch.cat(per_sentence) if per_sentence else torch.zeros(0)


def score_run(run_dir, paths: dict, vocab_path: str, batch_sentences: int = BATCH_SENTENCES) -> dict:
    """reset_scores.json's record for a stream run: each split in `paths` ({valid, test}) scored with the reset."""
    import torch

    from lmgrid.data.vocab import Vocab
    from lmgrid.neural.data import encode
    from lmgrid.neural.model_io import load_run
    from lmgrid.neural.precision import autocast, full_fp32
    from lmgrid.testtime.combine.adapted import run_threads

    t0 = time.time()
    run_dir = Path(run_dir)
    record = RunRecord.read(run_dir / RECORD_FILE)
    if record.regime != "stream" or not (run_dir / "model.ckpt").is_file():
        what = f"a {record.regime}-regime {record.arch} run" if (run_dir / "model.ckpt").is_file() else "no model.ckpt"
        raise LmgridError(f"{run_dir}: the reset pass needs a stream-regime neural run, this is {what} "
                          "(a window run is scored per sentence already)")
    hp = record.get("hparams") or {}
    if "bptt" not in hp:
        raise LmgridError(f"{run_dir / RECORD_FILE}: no hparams.bptt (a run older than its evaluation settings)")
    threads = run_threads(record)
    if threads:
        torch.set_num_threads(threads)
    vocab = Vocab.load(vocab_path)
    lm = load_run(run_dir)
    cuda = str(record.get("device", "")).startswith("cuda") and torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = lm.model.to(device)
    out = {"name": record.name, "run_dir": str(run_dir)}
    with full_fp32(), autocast(lm.precision, device.type):
        for split in EVAL_SPLITS:
            sentences = load_split(paths[split])
            nll = reset_token_nll(model, encode(vocab, sentences), eos=vocab.index[EOS], pad=vocab.index[PAD],
                                  bptt=int(hp["bptt"]), batch_sentences=batch_sentences, device=device)
            n, expected = int(nll.numel()), record.score(split).tokens
            if n != counted_tokens(sentences) or n != expected:
                raise LmgridError(f"{run_dir} ({split}): the reset pass counted {n} targets, the run's metrics.json "
                                  f"{expected}: not the run's corpus")
            total = float(nll.double().sum())
            out.update({f"{split}_ppl_reset": perplexity(total, n), f"{split}_nll_nats": total,
                        f"{split}_tokens": n, f"{split}_sentences": len(sentences)})
    out.update({"valid_ppl": record.valid.ppl, "test_ppl": record.test.ppl, "precision": lm.precision,
                "device": str(record.get("device", device.type)), "threads": torch.get_num_threads(),
                "bptt": int(hp["bptt"]), "batch_sentences": batch_sentences, "wall_s": round(time.time() - t0, 3)})
    return out


def cmd_reset_scores(a) -> None:
    record = score_run(a.run_dir, {"valid": a.valid, "test": a.test}, a.vocab, a.batch_sentences)
    reset_scores.write(a.out or Path(a.run_dir) / reset_scores.RESET_FILE, record)
    print(f"{record['name']}: state reset at every sentence: valid PPL {record['valid_ppl_reset']:.3f} (carried "
          f"{record['valid_ppl']:.3f}), test PPL {record['test_ppl_reset']:.3f} (carried {record['test_ppl']:.3f}), "
          f"{record['test_tokens']} test tokens, {record['wall_s']:.1f} s", flush=True)


def register(sub) -> None:
    s = sub.add_parser("reset-scores", help="a stream run's PPL with its state reset at every sentence start "
                                            "(reset_scores.json)")
    s.add_argument("--run-dir", required=True, help="the stream run's folder (results/<corpus>/runs/...)")
    s.add_argument("--valid", required=True, help="the valid split")
    s.add_argument("--test", required=True, help="the test split")
    s.add_argument("--vocab", required=True, help="vocab.json")
    s.add_argument("--batch-sentences", type=count(1), default=BATCH_SENTENCES,
                   help=f"sentences scored at once (default {BATCH_SENTENCES}; the PPL does not depend on it)")
    s.add_argument("--out", default="", help=f"output (default: RUN_DIR/{reset_scores.RESET_FILE})")
    s.set_defaults(func=cmd_reset_scores)
