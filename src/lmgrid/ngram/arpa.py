"""ARPA back-off files: writing a `Backoff` model and reading one back (ours or any tool's).

ARPA stores log10 probabilities; `<s>` is listed with the conventional -99 (never predicted).
Unigrams are written in vocabulary-id order without `<pad>`, so reading rebuilds the same ids.
Both directions are vectorised (fixed-width byte rows with the padding squeezed out; pandas' C reader).
"""
from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.data.ppl import BOS, EOS, PAD, UNK
from lmgrid.ngram.estimate import Backoff
from lmgrid.ngram.store import Appender

LOG10E = 1 / np.log(10)
NEG_INF_LOG10 = -99.0


FIELD = 11  # "-ddd.dddddd": log10 values with 6 decimals
_DIGITS3 = np.frombuffer("".join(f"{i:03d}" for i in range(1000)).encode(), dtype="V3")
_INT3 = np.frombuffer(b"".join(str(i).encode().rjust(3, b"\0") for i in range(1000)), dtype="V3")


def _float_field(values: np.ndarray, tab: bool = False) -> np.ndarray:
    """log10 values as NUL-padded ASCII (one void item of FIELD bytes, or FIELD+1 after a tab, per value),
    -99 for minus infinity.  Built from 3-digit lookup tables: per-value string formatting is what
    makes ARPA writers slow."""
    x = np.clip(np.where(np.isfinite(values), values, NEG_INF_LOG10), -999.0, 999.0)
    q = np.rint(np.abs(x) * 1e6).astype(np.int64)
    frac = q % 1_000_000
    row = np.dtype([("tab", "S1")] * tab + [("sign", "S1"), ("int", "V3"), ("dot", "S1"), ("hi", "V3"),
                                            ("lo", "V3")])
    out = np.empty(x.size, dtype=row)
    if tab:
        out["tab"] = b"\t"
    out["sign"] = np.where((x < 0) & (q > 0), b"-", b"")
    out["int"] = _INT3[q // 1_000_000]
    out["dot"] = b"."
    out["hi"] = _DIGITS3[frac // 1000]
    out["lo"] = _DIGITS3[frac % 1000]
    return out.view(f"V{row.itemsize}")


def _token_items(tokens: list[str], sep: str) -> np.ndarray:
    """Each token after `sep`, NUL-padded to one width, as one void item per token."""
    enc = [(sep + t).encode("utf-8") for t in tokens]
    width = max(len(e) for e in enc)
    return np.frombuffer(b"".join(e.ljust(width, b"\0") for e in enc), dtype=f"V{width}")


CHUNK_BYTES = 16 << 20


def _write_lines(fh, buf: bytearray, tokens: tuple[np.ndarray, np.ndarray], cols: list[np.ndarray],
                 logp: np.ndarray, bow: np.ndarray | None) -> None:
    """ARPA lines 'logp<TAB>w1 .. wk[<TAB>bow]' of one order: rows of fixed-width fields (a structured
    array over `buf`, filled by whole-item copies), then the NUL padding squeezed out in one C pass.
    One buffer serves every chunk, so its pages are faulted in once."""
    first, rest = tokens
    fields = [("p", f"V{FIELD}")] + [(f"w{j}", (first if j == 0 else rest).dtype) for j in range(len(cols))]
    if bow is not None:
        fields.append(("b", f"V{FIELD + 1}"))
    fields.append(("nl", "S1"))
    row = np.dtype(fields)
    chunk = max(1, len(buf) // row.itemsize)
    for lo in range(0, logp.size, chunk):
        hi = min(lo + chunk, logp.size)
        m = np.frombuffer(buf, dtype=row, count=hi - lo)
        m["p"] = _float_field(logp[lo:hi])
        for j, c in enumerate(cols):
            m[f"w{j}"] = (first if j == 0 else rest)[c[lo:hi]]
        if bow is not None:
            m["b"] = _float_field(bow[lo:hi], tab=True)
        m["nl"] = b"\n"
        used = (hi - lo) * row.itemsize
        fh.write(buf[:used].translate(None, b"\0"))  # drop the NUL padding (C speed)


def write(path: str | Path, model, tokens: list[str]) -> None:
    """Write a model (`Backoff`, or its `Tables`, in memory or on disk) as ARPA text.  Orders are read
    in slices; each slice's n-grams are spelt from the word columns of their prefix rows (previous order, on
    disk beside the output) and their last word."""
    import tempfile

    t = model.tables() if isinstance(model, Backoff) else model
    v = t.vocab_size
    tok = (_token_items(tokens, "\t"), _token_items(tokens, " "))
    keep = np.array([w != PAD for w in tokens])
    sizes = [int(keep.sum())] + [t.size(f"keys{k}") for k in range(2, t.order + 1)]
    buf = bytearray(max(CHUNK_BYTES, 4 * tok[0].itemsize * t.order))
    width = np.int32 if v < 2**31 else np.int64
    with atomic_write(path, "wb") as fh, tempfile.TemporaryDirectory(prefix=".arpa-", dir=Path(path).parent) as tmp:
        fh.write(("\\data\\\n" + "".join(f"ngram {k}={n}\n" for k, n in enumerate(sizes, 1))).encode())
        fh.write(b"\n\\1-grams:\n")
        bow = t.dense("bow1")[keep] * LOG10E if t.order > 1 else None
        _write_lines(fh, buf, tok, [np.arange(v, dtype=width)[keep]], t.dense("logp1")[keep] * LOG10E, bow)
        cols = None  # the previous order's word columns w0..w{k-2} (Tables on disk); order 1: row r is word r
        for k in range(2, t.order + 1):
            fh.write(f"\n\\{k}-grams:\n".encode())
            top = k == t.order
            # This order's word columns, for the next order's prefixes: appended to raw files, never held whole
            # (at 10 x PTB that was ~200 MiB of the 5-gram job's peak). The next order's keys are sorted, so one of
            # its slices needs only a contiguous range of these rows (its prefix rows, key // v).
            out = None if top else Appender(Path(tmp) / f"order{k}")
            for _, s in t.slices(k, ("keys", "logp") + (() if top else ("bow",)), v, whole_contexts=False):
                if not s["keys"].size:
                    continue
                prefix = s["keys"] // v
                lo, hi = int(prefix[0]), int(prefix[-1]) + 1
                prev = [np.arange(lo, hi, dtype=width)] if cols is None else [cols.read(f"w{j}", lo, hi)
                                                                              for j in range(k - 1)]
                words = [c[prefix - lo] for c in prev] + [(s["keys"] % v).astype(width)]
                _write_lines(fh, buf, tok, words, s["logp"] * LOG10E, None if top else s["bow"] * LOG10E)
                if out is not None:
                    for j, w in enumerate(words):
                        out.append(f"w{j}", w)
            if out is not None:
                cols = out.tables()
        fh.write(b"\n\\end\\\n")


_SECTION = re.compile(r"^\\(\d+)-grams:\s*$", re.M)


def read(path: str | Path) -> tuple[Backoff, list[str]]:
    """A back-off model and its token list (specials first, then the unigrams in file order)."""
    import pandas as pd  # its C CSV reader parses ARPA sections; imported here, only readers pay for it

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
    order = len(heads)

    def section(k: int):
        """Columns of section k: log10 p, k word columns, back-off (NaN where absent)."""
        body = text[heads[k - 1].end(): heads[k].start() if k < order else end]
        if not body.strip():
            raise LmgridError(f"{path}: section \\{k}-grams: is empty")
        names = ["p"] + [f"w{j}" for j in range(k)] + ["b"]
        try:  # words are separated by spaces, fields by tabs: make both tabs for the C parser
            df = pd.read_csv(io.StringIO(body.replace(" ", "\t")), sep="\t", header=None, names=names,
                             dtype={n: (np.float64 if n == "p" else object) for n in names}, quoting=3,
                             engine="c", keep_default_na=False, skip_blank_lines=True)
        except (ValueError, pd.errors.ParserError) as e:
            raise LmgridError(f"{path}: bad line in \\{k}-grams: ({str(e).splitlines()[0]})") from None
        if df[f"w{k - 1}"].isna().any():
            raise LmgridError(f"{path}: a line in \\{k}-grams: does not have {k} words")
        return df["p"].to_numpy(), [df[f"w{j}"] for j in range(k)], pd.to_numeric(df["b"], errors="coerce")

    def ln(values) -> np.ndarray:
        x = np.asarray(values, dtype=np.float64)
        return np.where(x <= NEG_INF_LOG10, -np.inf, x / LOG10E)

    p1, (w1,), b1 = section(1)
    words = w1.tolist()
    for special in (UNK, BOS, EOS):
        if special not in words:
            raise LmgridError(f"{path}: the unigrams lack {special}")
    tokens = [PAD, UNK, BOS, EOS] + [w for w in words if w not in (PAD, UNK, BOS, EOS)]
    index = pd.Index(tokens)
    v = len(tokens)
    ids1 = index.get_indexer(words)
    lp, b = np.full(v, -np.inf), np.zeros(v)
    lp[ids1] = ln(p1)
    b[ids1] = ln(b1.fillna(0.0))
    keys, logp, bow = [np.arange(v, dtype=np.int64)], [lp], [b]
    for k in range(2, order + 1):
        p, cols, b = section(k)
        ids = [index.get_indexer(c) for c in cols]
        del cols
        if any((i < 0).any() for i in ids):
            raise LmgridError(f"{path}: a {k}-gram uses a word missing from the unigrams")
        row = ids[0]
        for j in range(2, k):  # row of the prefix in each lower order
            key = row * v + ids[j - 1]
            srt = keys[j - 1]
            row = np.minimum(np.searchsorted(srt, key), max(srt.size - 1, 0))
            if srt.size == 0 or (srt[row] != key).any():
                raise LmgridError(f"{path}: a {k}-gram's prefix is not listed among the {j}-grams")
        key = row * v + ids[k - 1]
        by_key = np.argsort(key, kind="stable")
        keys.append(key[by_key])
        logp.append(ln(p)[by_key])
        bow.append(ln(b.fillna(0.0))[by_key])
    bow[-1] = np.zeros(keys[-1].size)  # the highest order backs off nowhere
    bo = Backoff(v, keys, logp, bow, method="arpa", settings={"source": str(path)})
    return bo, tokens
