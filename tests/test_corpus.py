"""Corpus stage: normalisation, the three input kinds, and bad input without partial output."""
import hashlib
import json
import subprocess
import sys

import pytest

from lmgrid.data.corpus import prepare, read_sentences
from lmgrid.common.errors import LmgridError


def write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "lmgrid", *map(str, args)], capture_output=True, text=True)


def test_whitespace_crlf_bom_and_blank_lines(tmp_path):
    p = write(tmp_path, "a.txt", "\ufeffthe  cat\tsat\r\n\r\n   \n a dog \u00a0ran\rend\n".encode())
    sents, replaced = read_sentences(p)
    assert sents == [["the", "cat", "sat"], ["a", "dog", "ran"], ["end"]]
    assert replaced == 0


def test_lowercase_and_special_literals(tmp_path):
    p = write(tmp_path, "a.txt", b"The <unk> saw <s> and </s> <pad>\n")
    sents, replaced = read_sentences(p, lowercase=True)
    # Literal <unk> stays the unknown token; the model's own markers become <unk> and are counted.
    assert sents == [["the", "<unk>", "saw", "<unk>", "and", "<unk>", "<unk>"]]
    assert replaced == 3


@pytest.mark.parametrize("data,message", [
    (b"", "file is empty"),
    (b"\n\n  \r\n", "only blank lines"),
    (b"caf\xe9 au lait\n", "not valid UTF-8 (byte 0xe9 at offset 3)"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary file (NUL byte at offset 7)"),
])
def test_bad_files_give_one_line_errors(tmp_path, data, message):
    p = write(tmp_path, "bad.txt", data)
    with pytest.raises(LmgridError, match=r".*") as exc:
        read_sentences(p)
    assert str(p) in str(exc.value) and message in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(LmgridError, match="file not found"):
        read_sentences(tmp_path / "nope.txt")


def test_text_split_by_ratio_is_seeded_and_complete(tmp_path):
    lines = [f"w{i} x{i % 7}" for i in range(100)]
    p = write(tmp_path, "all.txt", ("\n".join(lines) + "\n").encode())
    ratios = {"train": 0.8, "valid": 0.1, "test": 0.1}
    s1 = prepare("text", {"text": p}, tmp_path / "o1", ratios=ratios, seed=3)
    prepare("text", {"text": p}, tmp_path / "o2", ratios=ratios, seed=3)
    for split, n in (("train", 80), ("valid", 10), ("test", 10)):
        assert s1["splits"][split]["sentences"] == n
        assert (tmp_path / "o1" / f"{split}.txt").read_text() == (tmp_path / "o2" / f"{split}.txt").read_text()
    all_out = sorted(l for s in ("train", "valid", "test") for l in (tmp_path / "o1" / f"{s}.txt").read_text().splitlines())
    assert all_out == sorted(lines)


def test_ptb_kind_stats_and_max_len(tmp_path):
    files = {}
    for split, text in (("train", "a b c\na b\n"), ("valid", "a\n"), ("test", "b c d e f\nc\n")):
        files[split] = write(tmp_path, f"{split}.txt", text.encode())
    stats = prepare("ptb", files, tmp_path / "out", max_len=3)
    assert stats["splits"]["train"] == {"sentences": 2, "tokens": 5, "types": 3, "unk_tokens": 0,
                                        "dropped_too_long": 0, "length_histogram": {"2": 1, "3": 1}}
    assert stats["splits"]["test"]["dropped_too_long"] == 1
    assert (tmp_path / "out" / "test.txt").read_text() == "c\n"
    assert json.loads((tmp_path / "out" / "corpus_stats.json").read_text()) == stats


@pytest.mark.parametrize("content,message", [
    (b"", "file is empty"),
    (b"\n \n", "only blank lines"),
    (b"\xff\xfe\x00a", "binary file"),
    (b"one sentence\ntwo sentences\n", "too few to split"),
])
def test_cli_bad_input_leaves_no_output(tmp_path, content, message):
    p = write(tmp_path, "in.txt", content)
    out = tmp_path / "out"
    r = run_cli("corpus", "--kind", "text", "--input", f"text={p}", "--out-dir", out, "--ratios", "0.8", "0.1", "0.1")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lmgrid: error: ") and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_cli_missing_ptb_split(tmp_path):
    a = write(tmp_path, "train.txt", b"a b\n")
    r = run_cli("corpus", "--kind", "ptb", "--input", f"train={a}", "--input", f"valid={a}",
                "--input", f"test={tmp_path / 'missing.txt'}", "--out-dir", tmp_path / "out")
    assert r.returncode == 2 and "missing.txt: file not found" in r.stderr
    assert not (tmp_path / "out").exists()


def test_max_sentences_keeps_the_first_sentences_after_max_len_and_records_the_cut(tmp_path):
    """corpus.max_sentences keeps each named split's first N sentences of what the stage writes without it (so after
    max_len's drops), leaves the other splits whole, and records limit, sentences kept, of how many, and the sha256 of
    the file written.  Kills: the cut taken before max_len (train would keep "b" only), the last N instead of the
    first, a record whose sha256 is not the file's, and a record written without a cut (corpus_stats.json of an
    uncut corpus must stay what it was)."""
    files = {}
    for split, text in (("train", "a b c d\nb\nc d\ne\n"), ("valid", "a\nb\nc\n"), ("test", "d\ne\n")):
        files[split] = write(tmp_path, f"{split}.txt", text.encode())
    whole = prepare("ptb", files, tmp_path / "whole", max_len=2)
    assert "max_sentences" not in whole
    stats = prepare("ptb", files, tmp_path / "cut", max_len=2, max_sentences={"train": 2, "valid": 1, "test": 0})
    assert (tmp_path / "cut" / "train.txt").read_text() == "b\nc d\n"
    assert (tmp_path / "cut" / "valid.txt").read_text() == "a\n"
    assert (tmp_path / "cut" / "test.txt").read_text() == (tmp_path / "whole" / "test.txt").read_text()
    for split in ("train", "valid"):
        assert (tmp_path / "whole" / f"{split}.txt").read_text().startswith(
            (tmp_path / "cut" / f"{split}.txt").read_text())
    digest = {s: hashlib.sha256((tmp_path / "cut" / f"{s}.txt").read_bytes()).hexdigest() for s in ("train", "valid")}
    assert stats["max_sentences"] == {"train": {"limit": 2, "sentences": 2, "of": 3, "sha256": digest["train"]},
                                      "valid": {"limit": 1, "sentences": 1, "of": 3, "sha256": digest["valid"]}}
    assert stats["splits"]["train"]["sentences"] == 2 and stats["splits"]["train"]["dropped_too_long"] == 1
    assert json.loads((tmp_path / "cut" / "corpus_stats.json").read_text()) == stats
    # A limit above the split's size keeps it whole, and says so.
    big = prepare("ptb", files, tmp_path / "big", max_sentences={"test": 10})
    assert big["max_sentences"]["test"] == {"limit": 10, "sentences": 2, "of": 2,
                                            "sha256": hashlib.sha256(b"d\ne\n").hexdigest()}


def test_cli_cuts_after_checking_the_whole_files(tmp_path, capsys):
    """`lmgrid corpus --sha256 ... --max-sentences ...` (in-process: the options, not the interpreter, are tested):
    the sums are the whole files' (a preset's checksums of the full PTB hold on a cut run), and a bad count is one
    line naming the option.  Control: a wrong sum still stops it, with nothing written."""
    from lmgrid.cli import main

    files = {s: write(tmp_path, f"{s}.txt", b"a b\nc\nd e f\n") for s in ("train", "valid", "test")}
    whole = hashlib.sha256(b"a b\nc\nd e f\n").hexdigest()
    args = ["corpus", "--kind", "ptb", *(a for s, f in files.items() for a in ("--input", f"{s}={f}"))]
    assert main([*args, "--out-dir", str(tmp_path / "out"), "--sha256", f"train={whole}",
                 "--max-sentences", "train=1", "--max-sentences", "test=2"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "train.txt").read_text() == "a b\n"
    assert (tmp_path / "out" / "test.txt").read_text() == "a b\nc\n"
    capsys.readouterr()
    assert main([*args, "--out-dir", str(tmp_path / "bad"), "--max-sentences", "train=two"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "lmgrid: error: --max-sentences train: 'two' is not a count of sentences"]
    assert main([*args, "--out-dir", str(tmp_path / "sum"), "--sha256", f"train={'0' * 64}",
                 "--max-sentences", "train=1"]) == 2
    assert "does not match the expected" in capsys.readouterr().err and not (tmp_path / "sum").exists()
