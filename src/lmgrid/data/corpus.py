"""Corpus stage: raw input -> normalised train/valid/test token files and corpus_stats.json.

Three kinds of input: the synthetic grammar, PTB-style split files, and one plain-text
file split by ratio.  Normalisation: any whitespace separates tokens, CRLF and a UTF-8
BOM are accepted, blank lines are skipped, optional lowercasing, and sentences longer
than ``max_len`` tokens are dropped (counted in the stats).  ``max_sentences`` then keeps the
first N sentences of a split (a quick run on a cut of the corpus, e.g. presets/smoke.yaml); corpus_stats.json
records each cut and the sha256 of the split file it wrote.  Literal ``<unk>`` stays the
unknown token.  The other special strings ``<s>``, ``</s>`` and ``<pad>`` would collide
with the model's own markers, so a literal occurrence becomes ``<unk>`` and is counted
under ``special_literals_replaced``.
"""
from __future__ import annotations

import collections
import random
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write, sha256_of, write_json
from lmgrid.data.ppl import BOS, EOS, PAD, UNK

SPLITS = ("train", "valid", "test")  # the one list of split names (raw data, workflow, benchmarks import it)
REPLACED_LITERALS = frozenset({BOS, EOS, PAD})


def read_sentences(path: str | Path, lowercase: bool = False) -> tuple[list[list[str]], int]:
    """Sentences of a text file, one per non-blank line, and how many special literals were replaced."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise LmgridError(f"{path}: is a directory, expected a text file") from None
    if not raw:
        raise LmgridError(f"{path}: file is empty")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise LmgridError(f"{path}: looks like a binary file (NUL byte at offset {nul})")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise LmgridError(f"{path}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    if lowercase:
        text = text.lower()
    sentences, replaced = [], 0
    for line in text.splitlines():  # \n, \r\n and \r alike
        tokens = line.split()
        if not tokens:
            continue
        for i, tok in enumerate(tokens):
            if tok in REPLACED_LITERALS:
                tokens[i] = UNK
                replaced += 1
        sentences.append(tokens)
    if not sentences:
        raise LmgridError(f"{path}: has no sentences (only blank lines)")
    return sentences, replaced


def split_by_ratio(sentences: list, ratios: dict[str, float], seed: int, source: str) -> dict[str, list]:
    """Shuffle with a fixed seed and cut into train/valid/test; every split must get a sentence."""
    n = len(sentences)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_valid = round(n * ratios["valid"])
    n_test = round(n * ratios["test"])
    n_train = n - n_valid - n_test
    if min(n_train, n_valid, n_test) < 1:
        raise LmgridError(
            f"{source}: {n} sentences are too few to split by ratios "
            f"train={ratios['train']} valid={ratios['valid']} test={ratios['test']} (a split would be empty)")
    cut = {"train": order[:n_train], "valid": order[n_train:n_train + n_valid], "test": order[n_train + n_valid:]}
    return {k: [sentences[i] for i in sorted(idx)] for k, idx in cut.items()}


def stats(splits: dict[str, list[list[str]]], dropped: dict[str, int], replaced: int) -> dict:
    out = {"special_literals_replaced": replaced, "splits": {}}
    for name in SPLITS:
        sents = splits[name]
        lengths = collections.Counter(len(s) for s in sents)
        types = collections.Counter(t for s in sents for t in s)
        out["splits"][name] = {
            "sentences": len(sents),
            "tokens": sum(len(s) for s in sents),  # words only; PPL adds one </s> per sentence
            "types": len(types),
            "unk_tokens": types.get(UNK, 0),
            "dropped_too_long": dropped.get(name, 0),
            "length_histogram": {str(k): lengths[k] for k in sorted(lengths)},
        }
    return out


def write_split(path: str | Path, sentences: list[list[str]]) -> None:
    with atomic_write(path) as fh:
        for s in sentences:
            fh.write(" ".join(s))
            fh.write("\n")


def prepare(kind: str, inputs: dict[str, str], out_dir: str | Path, *, lowercase: bool = False,
            max_len: int = 0, ratios: dict[str, float] | None = None, seed: int = 0,
            max_sentences: dict[str, int] | None = None) -> dict:
    """Run the corpus stage. `inputs` maps split -> file (kinds synth and ptb) or {"text": file}.
    `max_sentences`: split -> N, keep that split's first N sentences (0 or absent: all of them)."""
    cut = {name: n for name, n in (max_sentences or {}).items() if n}
    for name, n in cut.items():
        if name not in SPLITS:
            raise LmgridError(f"corpus.max_sentences: unknown split {name!r} (expected train, valid or test)")
        if not isinstance(n, int) or n < 0:
            raise LmgridError(f"corpus.max_sentences.{name}: {n!r} is not a count of sentences (an integer >= 0)")
    if kind in ("synth", "ptb"):
        splits, replaced = {}, 0
        for name in SPLITS:
            splits[name], r = read_sentences(inputs[name], lowercase)
            replaced += r
    elif kind == "text":
        sentences, replaced = read_sentences(inputs["text"], lowercase)
        splits = split_by_ratio(sentences, ratios, seed, inputs["text"])
    else:
        raise LmgridError(f"corpus.kind: unknown kind {kind!r} (expected synth, ptb or text)")
    dropped = {}
    if max_len > 0:
        for name in SPLITS:
            kept = [s for s in splits[name] if len(s) <= max_len]
            dropped[name] = len(splits[name]) - len(kept)
            if not kept:
                raise LmgridError(f"corpus.max_len: {max_len} drops every sentence of the {name} split")
            splits[name] = kept
    # The cut comes last, so a cut split is a prefix of what the stage writes without it (ratios and max_len as
    # they were), whatever else is set.
    whole = {name: len(splits[name]) for name in cut}
    for name, n in cut.items():
        splits[name] = splits[name][:n]
    result = stats(splits, dropped, replaced)
    out_dir = Path(out_dir)
    for name in SPLITS:
        write_split(out_dir / f"{name}.txt", splits[name])
    if cut:
        # Only with a cut: a corpus stage without one writes the corpus_stats.json it always wrote.  The sha256 is of
        # the split file as written, so a reader can tell that the file beside it is the cut this names.
        result["max_sentences"] = {name: {"limit": n, "sentences": len(splits[name]), "of": whole[name],
                                          "sha256": sha256_of(out_dir / f"{name}.txt")}
                                   for name, n in sorted(cut.items(), key=lambda kv: SPLITS.index(kv[0]))}
    write_json(out_dir / "corpus_stats.json", result)
    return result


def load_split(path: str | Path) -> list[list[str]]:
    """Read a split written by `prepare` (already normalised)."""
    return read_sentences(path)[0]


__all__ = ["SPLITS", "read_sentences", "split_by_ratio", "prepare", "load_split", "EOS"]
