"""`lmgrid embed` (a run's word and sentence vectors, and a nearest-sentence query) and `lmgrid embeddings` (the
workflow's job: every neural cell and the baselines evaluated, each study's table and map)."""
from __future__ import annotations

import json
import sys

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write


def cmd_embed(a) -> None:
    from lmgrid.data.corpus import read_sentences
    from lmgrid.embed import export

    if (a.query is not None or a.out) and not a.sentences:
        raise LmgridError(f"{'--query' if a.query is not None else '--out'}: needs --sentences FILE")
    if not (a.words or a.sentences):
        raise LmgridError("lmgrid embed: nothing to do (give --words DIR and/or --sentences FILE)")
    if a.k < 1:
        raise LmgridError(f"-k: must be >= 1, got {a.k}")
    lm = export.load_neural(a.run)
    if a.words:
        for path in export.export_words(lm, a.words):
            print(f"wrote {path}", file=sys.stderr)
    if not a.sentences:
        return
    query = None
    if a.query is not None:
        query = a.query.split()
        if not export.known_words(lm, query):
            raise LmgridError(f"--query: none of its words ({' '.join(query) or 'empty'}) is in the vocabulary "
                              f"of {a.run}")
    sentences, _ = read_sentences(a.sentences)
    reference, where = export.reference_sentences(a.run, a.reference, sentences, a.sentences)
    component = export.common_component(lm, reference)
    print(f"common component: from {len(reference)} sentences of {where}", file=sys.stderr)
    vectors = export.sentence_vectors(lm, sentences, component=component)
    if a.out:
        with atomic_write(a.out) as fh:
            for v in vectors:
                fh.write("\t".join(f"{x:.9g}" for x in v) + "\n")  # 9 digits: float32 exactly
        print(f"wrote {a.out}: {len(vectors)} sentence vectors of dimension {vectors.shape[1]}", file=sys.stderr)
    if query is not None:
        q = export.sentence_vectors(lm, [query], component=component)[0]
        print("rank\tcosine\tsentence")
        for rank, (row, cos) in enumerate(export.nearest_sentences(vectors, q, a.k), 1):
            print(f"{rank}\t{cos:.4f}\t{' '.join(sentences[row])}")


def cmd_embeddings(a) -> None:
    from lmgrid.analysis.cli import _studies
    from lmgrid.embed.pipeline import run

    try:
        probes = json.loads(a.probes)
    except json.JSONDecodeError as e:
        raise LmgridError(f"--probes: not valid JSON ({e})") from None
    files = run(a.corpus, _studies(a.studies), a.train, a.vocab, a.root, a.window, probes, a.n_probes, a.neighbours)
    print(f"wrote {len(files)} files", file=sys.stderr)


def register(sub) -> None:
    s = sub.add_parser("embed", help="a neural run's word vectors (word2vec format), sentence vectors, and the "
                                     "nearest sentences of a file to a query")
    s.add_argument("--run", required=True, help="a neural run folder (results/<corpus>/runs/...)")
    s.add_argument("--words", metavar="DIR", help="write DIR/input.w2v.txt (and DIR/output.w2v.txt when untied)")
    s.add_argument("--sentences", metavar="FILE", help="a text file, one sentence per line")
    s.add_argument("--out", help="write FILE's sentence vectors here, one tab-separated line per sentence")
    s.add_argument("--reference", metavar="FILE",
                   help="the sentences whose common component every sentence vector loses (the first 2,000 "
                        "of FILE; default: the run's corpus/train.txt when the run is in a results tree, else "
                        "--sentences FILE)")
    s.add_argument("--query", help="a sentence: print the nearest sentences of FILE by cosine similarity")
    s.add_argument("-k", type=int, default=5, help="how many nearest sentences (default 5)")
    s.set_defaults(func=cmd_embed)

    s = sub.add_parser("embeddings", help="every neural cell's word vectors and the baselines against the "
                                          "benchmarks; each study's embeddings table, neighbours and map")
    s.add_argument("--corpus", required=True, help="the corpus name: results/<corpus>/ holds its runs")
    s.add_argument("--studies", required=True, help="JSON object: study name -> grid (the config's studies)")
    s.add_argument("--train", required=True, help="the training split (the PPMI-SVD baseline counts it)")
    s.add_argument("--vocab", required=True, help="the corpus vocabulary (vocab.json)")
    # The workflow passes the config's embeddings section (defaults: the schema's).
    s.add_argument("--window", type=int, required=True, help="PPMI: words each side of a word that count as context")
    s.add_argument("--probes", required=True, help="JSON list of probe words ([]: chosen from the vocabulary)")
    s.add_argument("--n-probes", type=int, required=True, help="how many probe words are chosen")
    s.add_argument("--neighbours", type=int, required=True, help="nearest words listed per probe")
    s.add_argument("--root", default=".", help="the folder results/ is in (default: here)")
    s.set_defaults(func=cmd_embeddings)
