"""`lmgrid ngram-counts` (one counting job per corpus) and `lmgrid ngram` (one grid cell)."""
from __future__ import annotations

import logging
import sys
import time

MEMORY_MB = 512  # the schema's default of ngram.memory_mb


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def cmd_counts(a) -> None:
    from lmgrid.data.vocab import Vocab
    from lmgrid.ngram.external import count_to_npz

    _logging()
    t0 = time.perf_counter()
    vocab = Vocab.load(a.vocab)
    sizes = count_to_npz(a.train, vocab, a.max_order, a.out, a.memory_mb)
    logging.getLogger("lmgrid.ngram").info("counted orders 1..%d: %s n-grams in %.2f s", a.max_order,
                                           sizes, time.perf_counter() - t0)


def cmd_ngram(a) -> None:
    from lmgrid.ngram.model import train_run

    _logging()
    m = train_run(counts_path=a.counts, vocab_path=a.vocab, valid_path=a.valid, test_path=a.test, arch=a.arch,
                  order=a.order, arpa_path=a.arpa, metrics_path=a.metrics, addk_k=a.addk_k,
                  katz_max_count=a.katz_max_count, memory_mb=a.memory_mb, write_arpa=a.write_arpa)
    logging.getLogger("lmgrid.ngram").info("%s: valid PPL %.3f, test PPL %.3f, %d n-grams, %.2f s", m["name"],
                                           m["valid"]["ppl"], m["test"]["ppl"], m["params"], m["wall_s"])


def register(sub) -> None:
    s = sub.add_parser("ngram-counts", help="count every n-gram of train up to an order (counts.npz)")
    s.add_argument("--train", required=True, help="the train split")
    s.add_argument("--vocab", required=True, help="vocab.json")
    s.add_argument("--max-order", type=int, required=True, help="count n-grams up to this order")
    s.add_argument("--out", required=True, help="output: counts.npz")
    s.add_argument("--memory-mb", type=float, default=MEMORY_MB, help="memory budget (ngram.memory_mb)")
    s.set_defaults(func=cmd_counts)

    s = sub.add_parser("ngram", help="estimate one n-gram model, write model.arpa and metrics.json")
    s.add_argument("--counts", required=True, help="counts.npz (lmgrid ngram-counts)")
    s.add_argument("--vocab", required=True, help="vocab.json")
    s.add_argument("--valid", required=True, help="the valid split, scored")
    s.add_argument("--test", required=True, help="the test split, scored")
    s.add_argument("--arch", required=True, choices=["addk", "katz", "kn", "mkn"], help="the smoothing method")
    s.add_argument("--order", type=int, required=True, help="the model's order (the cell's n_step)")
    s.add_argument("--arpa", required=True, help="output: the model as an ARPA file (or a one-line note, "
                                                 "when --write-arpa says no)")
    s.add_argument("--write-arpa", default="auto", choices=["auto", "true", "false"],
                   help="ngram.write_arpa: auto writes models of up to 10 million n-grams")
    s.add_argument("--memory-mb", type=float, default=MEMORY_MB, help="memory budget (ngram.memory_mb)")
    s.add_argument("--metrics", required=True, help="output: metrics.json")
    s.add_argument("--addk-k", type=float, default=1.0, help="add-k constant (addk)")
    s.add_argument("--katz-max-count", type=int, default=7, help="counts above this are not discounted (katz)")
    s.set_defaults(func=cmd_ngram)
