"""`lmgrid embeddings`: the workflow's one embeddings job per corpus.

Every neural cell of the config is evaluated once (a cell shared by studies too), and the baselines once per
dimension the cells have: one process, so the added cost is one interpreter start (torch, gensim, scikit-learn)
rather than one per cell.  It writes
* results/<corpus>/embeddings/vectors/<arch>/<impl>/<cell>/{input,output}.w2v.txt: every cell's word vectors
  (output: only when untied; <pad> left out, export.NEVER_SEEN), and vectors/baselines/{ppmi-svd,random}_d<dim>.w2v.txt;
* results/<corpus>/embeddings/embeddings.csv: one row per cell and embedding, and per baseline, with the scores of
  embed.evaluate; neighbours.csv: the nearest words of the probe words;
* per study with neural cells (studies/<name>/): the table, the neighbours and the map (embed.study).
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from lmgrid.analysis.layout import EMBEDDING_VECTORS, EMBEDDINGS_DIR, STUDIES_DIR, embedding_plan, model_label
from lmgrid.analysis.names import display
from lmgrid.data.corpus import load_split
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.run.key import RunKey, all_runs, expand_study
from lmgrid.data.vocab import SPECIALS, Vocab
from lmgrid.embed import evaluate, export, paired, ppmi, study

BASELINES = {"ppmi-svd": "PPMI-SVD", "random": "random"}
ID_COLUMNS = ["model", "run", "arch", "impl", "n_step", "layers", "regime", "seed", "embedding", "dim"]


def cell_label(key: RunKey) -> str:
    """'LSTM n5 l1 window s1': the display name and the run key."""
    return f"{display(model_label(key))} {key.name.split(' ', 1)[1]}"


def baseline_label(kind: str, dim: int) -> str:
    return f"{BASELINES[kind]} d{dim}"


def run(corpus: str, studies: dict, train_path: str, vocab_path: str, root: str | Path = ".", window: int = 5,
        probes: list[str] | None = None, n_probes: int = 8, k: int = 5, seed: int = 0) -> list[str]:
    root = Path(root)
    base = root / EMBEDDINGS_DIR.format(corpus=corpus)
    vocab = Vocab.load(vocab_path)
    words = [t for t in vocab.tokens if t not in SPECIALS]  # by descending train count (vocab.build)
    probe_list = evaluate.probe_words(words, n_probes, probes)
    keys = [key for key in all_runs(studies) if not key.is_ngram]
    rows, near, maps, written = [], [], {}, []
    sims = {}  # (model, embedding) -> each word-pair benchmark's cosines: the studies' paired comparisons

    def add(ids: dict, kv) -> None:
        rows.append({**ids, **evaluate.scores(kv, seed)})
        sims[ids["model"], ids["embedding"]] = paired.benchmark_similarities(kv)
        near.extend({"model": ids["model"], "embedding": ids["embedding"], **r}
                    for r in evaluate.neighbours(kv, probe_list, k))

    for key in keys:
        run_dir = root / key.run_dir(corpus)
        lm = export.load_neural(run_dir)
        if lm.vocab.tokens != vocab.tokens:
            raise LmgridError(f"{run_dir}: its vocabulary differs from {vocab_path}; retrain the run")
        folder = root / key.beside(corpus, EMBEDDING_VECTORS)
        matrices = export.word_matrices(lm)
        for name, matrix in matrices.items():
            written.append(export.save_word2vec(export.exported(vocab.tokens, matrix), folder / f"{name}.w2v.txt"))
            kv = export.without_specials(vocab.tokens, matrix)
            add({"model": cell_label(key), "run": key.run_dir(corpus), **asdict(key), "embedding": name,
                 "dim": matrix.shape[1]}, kv)
            if name == "input":
                maps[key] = kv
        print(f"{key.name}: {' and '.join(matrices)} embedding evaluated", file=sys.stderr)
    sentences = load_split(train_path)
    for dim in sorted({r["dim"] for r in rows}):
        baselines = {"random": ppmi.random_vectors(words, dim, seed)}
        if dim < len(words):
            baselines = {"ppmi-svd": ppmi.ppmi_svd(sentences, words, dim, window, seed), **baselines}
        else:  # a toy vocabulary: SVD cannot reduce to a dimension it does not have
            print(f"PPMI-SVD d{dim}: left out (the vocabulary has only {len(words)} words)", file=sys.stderr)
        for kind, (kept, vectors) in baselines.items():
            kv = export.keyed_vectors(kept, vectors)
            written.append(export.save_word2vec(kv, base / "vectors" / "baselines" / f"{kind}_d{dim}.w2v.txt"))
            add({"model": baseline_label(kind, dim), "run": "", "arch": kind, "embedding": "-", "dim": dim}, kv)
    table = pd.DataFrame(rows)
    table = table[ID_COLUMNS + [c for c in table.columns if c not in ID_COLUMNS]]
    neighbours = pd.DataFrame(near, columns=["model", "embedding", "probe", "rank", "neighbour", "cosine"])
    for df, name in ((table, "embeddings.csv"), (neighbours, "neighbours.csv")):
        with atomic_write(base / name) as fh:
            df.to_csv(fh, index=False, float_format="%.6g")
        written.append(str(base / name))
    for name, spec in studies.items():
        if embedding_plan(spec):
            written += study_outputs(corpus, name, spec, table, neighbours, maps, words, root, sims, seed)
    return written


def study_outputs(corpus, name, spec, table, neighbours, maps, words, root, sims, seed=0) -> list[str]:
    """The study's cells and the baselines of their dimensions, compared on their common pairs against the study's
    cell of lowest valid PPL (chosen on valid, not test), input embedding, which the map also shows."""
    keys = [k for k in expand_study(spec) if not k.is_ngram]
    runs = {k.run_dir(corpus) for k in keys}
    mine = table[table["run"].isin(runs)]
    dims = set(mine["dim"])
    rows = pd.concat([mine, table[(table["run"] == "") & table["dim"].isin(dims)]])
    near = neighbours[neighbours["model"].isin(set(rows["model"]))]
    valid = {k: RunRecord.read(Path(root) / k.run_dir(corpus) / RECORD_FILE).valid.ppl for k in keys}
    best = min(keys, key=lambda k: (valid[k], k))
    out = Path(root) / STUDIES_DIR.format(corpus=corpus) / name
    rows = paired.study_columns(rows, sims, (cell_label(best), "input"), seed)
    written = study.write_table(rows, out / "embeddings")
    written += study.write_neighbours(near, out / "embeddings_neighbours")
    written += study.write_map(maps[best], words, f"{cell_label(best)}, input embedding", out / "embeddings_map")
    planned = {str(out / f"{s}.{e}") for s, exts in embedding_plan(spec).items() for e in exts}
    if planned != set(written):  # a bug, not a user error: Snakemake would miss or reject files
        raise RuntimeError(f"study {name}: wrote {sorted(set(written) ^ planned)} against the plan")
    return written
