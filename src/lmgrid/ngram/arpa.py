"""ARPA back-off files: writing a `Backoff` model and reading one back (ours or any tool's).

ARPA stores log10 probabilities; `<s>` is listed with the conventional -99 (never predicted).
Unigrams are written in vocabulary-id order without `<pad>`, so reading rebuilds the same ids.
Both directions are vectorised (string columns via numpy object arrays, parsing via pandas' C reader).
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import LmgridError, atomic_write
from ..ppl import BOS, EOS, PAD, UNK
from .estimate import Backoff

LOG10E = 1 / np.log(10)
NEG_INF_LOG10 = -99.0


def _fmt(values: np.ndarray) -> np.ndarray:
    """log10 values as short decimal strings (7 decimals), -99 for minus infinity."""
    v = np.where(np.isfinite(values), values, NEG_INF_LOG10)
    return np.char.mod("%.7g", v).astype(object) if v.size < 64 else np.round(v, 7).astype(str).astype(object)


def _word_columns(bo: Backoff, k: int) -> list[np.ndarray]:
    v = bo.vocab_size
    cols = [bo.keys[0]]
    for j in range(2, k + 1):
        prefix = bo.keys[j - 1] // v
        cols = [c[prefix] for c in cols] + [bo.keys[j - 1] % v]
    return cols


def write(path: str | Path, bo: Backoff, tokens: list[str]) -> None:
    tok = np.array(tokens, dtype=object)
    keep = tok != PAD
    sizes = [int(keep.sum())] + [int(k.size) for k in bo.keys[1:]]
    parts = ["\\data\\\n"] + [f"ngram {k}={n}\n" for k, n in enumerate(sizes, 1)]
    for k in range(1, bo.order + 1):
        cols = _word_columns(bo, k)
        sel = keep if k == 1 else slice(None)
        text = tok[cols[0][sel]]
        for c in cols[1:]:
            text = text + " " + tok[c]
        line = _fmt(bo.logp[k - 1][sel] * LOG10E) + "\t" + text
        if k < bo.order:
            line = line + "\t" + _fmt(bo.bow[k - 1][sel] * LOG10E)
        parts.append(f"\n\\{k}-grams:\n")
        parts.append("\n".join(line.tolist()))
        parts.append("\n")
    parts.append("\n\\end\\\n")
    with atomic_write(path) as fh:
        fh.writelines(parts)


_SECTION = re.compile(r"^\\(\d+)-grams:\s*$", re.M)


def read(path: str | Path) -> tuple[Backoff, list[str]]:
    """A back-off model and its token list (specials first, then the unigrams in file order)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise LmgridError(f"{path}: not valid UTF-8 ({e})") from None
    if "\\data\\" not in text or "\\end\\" not in text:
        raise LmgridError(f"{path}: not an ARPA file (no \\data\\ or \\end\\ marker)")
    heads = list(_SECTION.finditer(text))
    if not heads or [int(m.group(1)) for m in heads] != list(range(1, len(heads) + 1)):
        raise LmgridError(f"{path}: ARPA sections must be \\1-grams: .. \\N-grams: in order")
    end = text.index("\\end\\")
    tables = []
    for i, m in enumerate(heads):
        body = text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else end]
        if not body.strip():
            raise LmgridError(f"{path}: section \\{i + 1}-grams: is empty")
        df = pd.read_csv(io.StringIO(body), sep="\t", header=None, names=["p", "g", "b"], usecols=[0, 1, 2]
                         if i + 1 < len(heads) else [0, 1], dtype={"p": np.float64, "g": object},
                         quoting=3, keep_default_na=False, na_filter=False, engine="c")
        tables.append(df)
    words = tables[0]["g"].tolist()
    for special in (UNK, BOS, EOS):
        if special not in words:
            raise LmgridError(f"{path}: the unigrams lack {special}")
    tokens = [PAD, UNK, BOS, EOS] + [w for w in words if w not in (PAD, UNK, BOS, EOS)]
    index = pd.Index(tokens)
    v = len(tokens)

    def ln(values) -> np.ndarray:
        x = np.asarray(values, dtype=np.float64)
        return np.where(x <= NEG_INF_LOG10, -np.inf, x / LOG10E)

    keys, logp, bow = [np.arange(v, dtype=np.int64)], [], []
    ids1 = index.get_indexer(words)
    lp = np.full(v, -np.inf)
    lp[ids1] = ln(tables[0]["p"])
    logp.append(lp)
    order = len(tables)
    for k, df in enumerate(tables, 1):
        if k >= 2:
            cols = df["g"].str.split(" ", n=k - 1, expand=True)
            if cols.shape[1] != k or cols.isna().any().any():
                raise LmgridError(f"{path}: a line in \\{k}-grams: does not have {k} words")
            ids = [index.get_indexer(cols[j]) for j in range(k)]
            if any((i < 0).any() for i in ids):
                raise LmgridError(f"{path}: a {k}-gram uses a word missing from the unigrams")
            row = ids[0]
            for j in range(2, k + 1):
                key = row * v + ids[j - 1]
                srt = keys[j - 1]
                at = np.minimum(np.searchsorted(srt, key), max(srt.size - 1, 0))
                if j < k:
                    if srt.size == 0 or (srt[at] != key).any():
                        raise LmgridError(f"{path}: a {k}-gram's prefix is not listed among the {j}-grams")
                    row = at
            order_idx = np.argsort(key, kind="stable")
            keys.append(key[order_idx])
            logp.append(ln(df["p"].to_numpy())[order_idx])
            b = np.zeros(len(df)) if k == order else ln(pd.to_numeric(df["b"], errors="coerce").fillna(0.0))
            bow.append(b[order_idx])
        elif order > 1:
            b = np.zeros(v)
            b[ids1] = ln(pd.to_numeric(df["b"], errors="coerce").fillna(0.0))
            bow.append(b)
    if order == 1:
        bow.append(np.zeros(v))
    bo = Backoff(v, keys, logp, bow, method="arpa", settings={"source": str(path)})
    return bo, tokens
