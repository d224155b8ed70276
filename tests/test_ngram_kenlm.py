"""Our modified Kneser-Ney against KenLM's own estimator: `lmplz` on PTB train, n-gram by n-gram.

Both models come from the same sentences; ours through lmgrid's estimator and ARPA writer, KenLM's through `lmplz`
(`make kenlm` builds it). Settings matched, on lmplz's side only (its flags and how its input is presented):
- `<unk>`: PTB's text holds `<unk>`, an ordinary word to us (counted, discounted, predicted). lmplz refuses it in
  its input (or, with --skip_symbols, deletes it, which joins its neighbours into n-grams that never occurred), so
  it reads it spelt STAND_IN, an ordinary word to it too; our ARPA is written with the same spelling. lmplz then
  adds its own `<unk>` with count 0, left out of the comparison: it widens lmplz's uniform distribution from 1/V
  to 1/(V+1), which bounds every probability's difference by log10((V+1)/V) (the uniform term shrinks by
  V/(V+1) at most, and interpolation carries a relative change up the orders unchanged; back-offs do not see it).
- `<s>` and `</s>`: one `<s>` before and one `</s>` after each line in both; n-grams starting with `<s>` keep
  their raw counts in both. `<s>`'s own probability is a placeholder (never predicted), -99 in ours and 0 in
  lmplz's, so only its back-off is compared.
- unigrams interpolated with the uniform (`--interpolate_unigrams 1`, lmplz's default), no pruning (`--prune 0`),
  no --discount_fallback: the closed-form discounts hold on PTB at every order, in both.
- sentence order: lmplz reads the sentences last to first (n-gram counts do not depend on sentence order). lmplz
  0.3.0 puts into its count-of-counts, for the last n-gram of each lower order (the word it numbers last, the one
  first seen latest), the raw count instead of the adjusted one (adjust_counts.cc, the loop after the main one).
  In file order that word is "unilab" (adjusted count 4, raw 6), which moves lmplz's unigram D3+ from 1.26227 to
  1.26492 (unigram log10 probabilities then differ by up to 5.3e-4). Read last to first, that word is "wachter",
  a singleton (adjusted = raw = 1, as are its n-grams), and the quirk changes nothing (checked below).
Tolerances: back-offs 2e-6 (each file rounds log10 values to 6 decimals, lmplz computes in float32), log10
probabilities 2e-6 + log10((V+1)/V); test PPL (lmplz's through KenLM's `query`) within the same bound in nats.
"""
from __future__ import annotations

import io
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lmgrid.ngram.estimate as estimate_mod
from lmgrid.data.corpus import load_split
from lmgrid.data.ppl import BOS, PAD, UNK
from lmgrid.data.vocab import build
from lmgrid.ngram import arpa
from lmgrid.ngram.counts import count_sentences
from lmgrid.ngram.estimate import estimate
from lmgrid.ngram.model import NgramModel

pytestmark = pytest.mark.ptb
STAND_IN = "<ptb-unk>"
FLOAT_LOG10 = 2e-6
LMPLZ_FLAGS = ("--interpolate_unigrams", "1", "--prune", "0", "-S", "256M")


def kenlm_last_word(text: Path) -> str:
    """The word lmplz numbers last in a file it reads: it numbers words by first appearance."""
    return list(dict.fromkeys(text.read_text(encoding="utf-8").split()))[-1]


@pytest.fixture(scope="module")
def ptb(ptb_dir, tmp_path_factory):
    splits = {s: load_split(ptb_dir / f"ptb.{s}.txt") for s in ("train", "test")}
    vocab = build(splits["train"])
    folder = tmp_path_factory.mktemp("kenlm")
    for split, sentences in (("train", splits["train"][::-1]), ("test", splits["test"])):
        lines = (" ".join(STAND_IN if w == UNK else w for w in s) + "\n" for s in sentences)
        (folder / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
    return splits, vocab, count_sentences(splits["train"], vocab, 5), folder


@pytest.fixture(scope="module")
def lmplz_arpa(ptb, kenlm_tools):
    """lmplz_arpa(order) -> the path of lmplz's ARPA file on PTB train (run once per order)."""
    folder, made = ptb[3], {}

    def get(order: int) -> Path:
        if order not in made:
            out = folder / f"lmplz{order}.arpa"
            run = subprocess.run([kenlm_tools["lmplz"], "-o", str(order), *LMPLZ_FLAGS, "-T", f"{folder}/",
                                  "--text", folder / "train.txt", "--arpa", out], capture_output=True, text=True)
            assert run.returncode == 0, f"lmplz -o {order} failed:\n{run.stderr[-2000:]}"
            made[order] = out
        return made[order]
    return get


def ours_arpa(ptb, order: int, path: Path) -> NgramModel:
    _, vocab, counts, _ = ptb
    model = NgramModel(estimate(counts, "mkn", order, vocab.index[BOS], vocab.index[PAD]), vocab)
    arpa.write(path, model.backoff, [STAND_IN if t == UNK else t for t in vocab.tokens])
    return model


def arpa_orders(path: Path) -> dict[int, pd.DataFrame]:
    """Per order, the n-grams (words joined by blanks) with log10 p and log10 back-off (0 when absent), sorted by a
    64-bit hash of the n-gram, so two files line up row by row without a join on strings."""
    data = path.read_bytes()
    order = int(re.findall(rb"^ngram (\d+)=", data[:data.index(b"\\1-grams:")], re.M)[-1])
    marks = [data.index(f"\n\\{k}-grams:\n".encode()) for k in range(1, order + 1)] + [data.index(b"\n\\end\\")]
    out = {}
    for k in range(1, order + 1):
        body = data[data.index(b"\n", marks[k - 1] + 1) + 1:marks[k]]
        df = pd.read_csv(io.BytesIO(body), sep="\t", header=None, names=["p", "ngram", "b"], quoting=3,
                         keep_default_na=False, na_values={"b": [""]}, dtype={"ngram": object})
        df["b"] = df["b"].fillna(0.0)
        df["key"] = pd.util.hash_array(df["ngram"].to_numpy(dtype=object))
        out[k] = df.sort_values("key", ignore_index=True)
    return out


def compare(ours: Path, theirs: Path, tol_p: float) -> tuple[list[str], list[str]]:
    """One line per order (the n-gram counts and the largest differences, with where), and the mismatches."""
    a_all, b_all = arpa_orders(ours), arpa_orders(theirs)
    b_all[1] = b_all[1][b_all[1]["ngram"] != UNK].reset_index(drop=True)  # lmplz's own <unk>, count 0 (above)
    if sorted(a_all) != sorted(b_all):
        return [], [f"orders {sorted(a_all)} against lmplz's {sorted(b_all)}"]
    lines, bad = [], []
    for k in sorted(a_all):
        a, b = a_all[k], b_all[k]
        if len(a) != len(b) or not np.array_equal(a["key"], b["key"]):
            unmatched = sorted(set(a["ngram"]) ^ set(b["ngram"]))
            bad.append(f"{k}-grams: {len(a)} ours, {len(b)} lmplz, {len(unmatched)} in one only, e.g. {unmatched[:3]}")
            continue
        # <s> is never predicted, so its probability is a placeholder: -99 in ours, 0 in lmplz's
        dp = np.where(a["ngram"] == BOS, 0.0, np.abs(a["p"] - b["p"]))
        db = np.abs(a["b"] - b["b"]).to_numpy()
        lines.append(f"{k}-grams: {len(a)} in both; max |d log10 p| {dp.max():.1e} ({a['ngram'][dp.argmax()]!r}), "
                     f"max |d log10 bow| {db.max():.1e} ({a['ngram'][db.argmax()]!r})")
        if dp.max() > tol_p or db.max() > FLOAT_LOG10:
            bad.append(lines[-1])
    return lines, bad


def tolerance(vocab) -> float:
    """2e-6 of rounding plus log10((V+1)/V), V our predictable words (all but <s> and <pad>)."""
    v = len(vocab) - 2
    return FLOAT_LOG10 + math.log10((v + 1) / v)


def query_ppl(kenlm_tools, model: Path, text: Path) -> dict:
    run = subprocess.run([kenlm_tools["query"], "-v", "summary", model], stdin=text.open("rb"), capture_output=True)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    out = run.stdout.decode()
    grab = {key: re.search(rf"^{pat}:\s*(\S+)", out, re.M) for key, pat in
            (("ppl", "Perplexity including OOVs"), ("oov", "OOVs"), ("tokens", "Tokens"))}
    assert all(grab.values()), f"query's summary not understood:\n{out[-1000:]}"
    return {key: float(m.group(1)) for key, m in grab.items()}


def test_lmplz_reads_the_sentences_where_its_count_of_counts_quirk_changes_nothing(ptb):
    """The reversed order's premise: in the text lmplz reads, the word it numbers last is a singleton (adjusted =
    raw count, and so are its n-grams'), so its raw-count slip at the end of each lower order changes no
    count-of-counts.
    Kills: lmplz fed PTB train in file order (its last word "unilab": raw count 6, adjusted 4)."""
    _, vocab, counts, folder = ptb
    last = kenlm_last_word(folder / "train.txt")
    assert counts.count[0][vocab.index[UNK if last == STAND_IN else last]] == 1, last


@pytest.mark.parametrize("order", [3, 5])
def test_our_mkn_arpa_equals_lmplz_ngram_by_ngram(ptb, lmplz_arpa, kenlm_tools, order, tmp_path):
    """Every n-gram of our modified-KN ARPA is in lmplz's and back (lmplz's own <unk> aside), their log10
    probabilities and back-offs agree to the module's tolerances, and so do their test PPLs (KenLM's `query` on
    lmplz's file, our scorer on ours: 82,430 tokens, no OOV).
    Kills: a discount, a continuation count, the <s> raw-count rule or the uniform term off in our estimator; any
    n-gram missing or added; our ARPA writer rounding or misplacing a value (the negative control below)."""
    splits, vocab, _, folder = ptb
    ours = ours_arpa(ptb, order, tmp_path / "ours.arpa")
    tol = tolerance(vocab)
    lines, bad = compare(tmp_path / "ours.arpa", lmplz_arpa(order), tol)
    print(f"\norder {order}, tolerance log10 p {tol:.2e}, bow {FLOAT_LOG10:.0e}:\n" + "\n".join(lines))
    assert not bad, "our ARPA and lmplz's differ:\n" + "\n".join(bad)
    result = ours.evaluate(splits["test"])
    theirs = query_ppl(kenlm_tools, lmplz_arpa(order), folder / "test.txt")
    print(f"test PPL ours {result['ppl']:.6f}, lmplz + query {theirs['ppl']:.6f}")
    assert (theirs["tokens"], theirs["oov"]) == (result["tokens"], 0) == (82_430, 0)
    assert abs(math.log(theirs["ppl"] / result["ppl"])) <= tol * math.log(10)


def test_a_perturbed_discount_fails_the_comparison(ptb, lmplz_arpa, monkeypatch, tmp_path):
    """Negative control of the comparison above, at order 3.
    Kills: a comparison that cannot see a wrong discount. Mutation: `estimate.kn_discounts` returns every D1,
    D2, D3+ 1% larger (monkeypatched); the same comparison must then report mismatches."""
    real = estimate_mod.kn_discounts
    monkeypatch.setattr(estimate_mod, "kn_discounts", lambda *a, **kw: tuple(d * 1.01 for d in real(*a, **kw)))
    ours_arpa(ptb, 3, tmp_path / "ours.arpa")
    lines, bad = compare(tmp_path / "ours.arpa", lmplz_arpa(3), tolerance(ptb[1]))
    print("\nperturbed:\n" + "\n".join(lines))
    assert bad and all("in one only" not in b for b in bad)  # the values differ, not the n-grams
