"""kind ptb: the three files fetched over HTTP (Snakemake's http storage plugin) and checked against their sha256,
or taken from local files (corpus.files, $LMGRID_PTB_DIR) without any request. The real workflow runs against a
local HTTP server serving a copy of the Penn Treebank, and one serving a copy with one byte changed."""
from __future__ import annotations

import copy
import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from lmgrid.orchestration.config import check, load_schema
from lmgrid.common.errors import LmgridError

pytestmark = pytest.mark.ptb

SPLITS = ("train", "valid", "test")
SHA256 = {"train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
          "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
          "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"}
# /work/shared/data/ptb/README.md: lines and tokens (without end-of-sentence) per file.
README_COUNTS = {"train": (42068, 887521), "valid": (3370, 70390), "test": (3761, 78669)}
TARGET = "results/ptb/corpus/corpus_stats.json"


def ptb_config(base_url: str, **corpus) -> dict:
    return {"corpus": {"name": "ptb", "kind": "ptb", "download": {"base_url": base_url}, "sha256": dict(SHA256),
                       **corpus},
            "vocab": {}, "studies": {"s": {"arch": ["kn"], "n_step": [2]}}}


@pytest.fixture(scope="module")
def copies(ptb_dir, tmp_path_factory) -> dict[str, Path]:
    """A writable copy of the Penn Treebank ("good") and one whose ptb.test.txt has one byte changed ("bad")."""
    out = {}
    for name in ("good", "bad"):
        folder = tmp_path_factory.mktemp(name)
        for split in SPLITS:
            shutil.copyfile(ptb_dir / f"ptb.{split}.txt", folder / f"ptb.{split}.txt")
        out[name] = folder
    test = out["bad"] / "ptb.test.txt"
    data = bytearray(test.read_bytes())
    data[1000] = ord("x") if data[1000] != ord("x") else ord("y")
    test.write_bytes(bytes(data))
    return out


class _Counting(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet; every request is counted instead
        self.server.requests.append(self.requestline)


@pytest.fixture
def serve():
    """serve(folder) -> (base URL, list of the request lines it received); stopped after the test."""
    servers = []

    def start(folder: Path):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                 functools.partial(_Counting, directory=str(folder)))
        server.requests = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/", server.requests

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(workdir: Path, repo: Path, cfg: dict, *args: str, ptb_env: Path | None = None) -> subprocess.CompletedProcess:
    """The real workflow up to the corpus stats, with $LMGRID_PTB_DIR only when `ptb_env` is given."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "LMGRID_PTB_DIR"}
    env.update(NO_PROXY="127.0.0.1", no_proxy="127.0.0.1", LMGRID_REPORT="0")
    if ptb_env is not None:
        env["LMGRID_PTB_DIR"] = str(ptb_env)
    cmd = [str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d", str(workdir),
           "--cores", "2", *args, TARGET]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def error_lines(r: subprocess.CompletedProcess) -> list[str]:
    lines = [line.strip() for line in (r.stdout + r.stderr).splitlines() if line.startswith("lmgrid: error:")]
    return sorted(set(lines))


def stored_copies(workdir: Path) -> list[Path]:
    """The files left in Snakemake's local copies of storage objects."""
    return [p for p in (workdir / ".snakemake" / "storage").rglob("*") if p.is_file()]


def assert_readme_counts(workdir: Path) -> None:
    stats = yaml.safe_load((workdir / TARGET).read_text())["splits"]
    assert {s: (stats[s]["sentences"], stats[s]["tokens"]) for s in SPLITS} == README_COUNTS


def test_download_is_verified_and_gives_the_readme_counts(tmp_path, repo, copies, serve):
    """kills: fetching into somewhere other than results/<corpus>/raw (or not fetching at all), a corpus stage
    that reads other files than the downloads, a verified copy that differs from what was served."""
    url, requests = serve(copies["good"])
    r = run(tmp_path, repo, ptb_config(url))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert sorted(line.split()[1] for line in requests if line.startswith("GET")) == \
        ["/ptb.test.txt", "/ptb.train.txt", "/ptb.valid.txt"]
    raw = tmp_path / "results" / "ptb" / "raw"
    for split in SPLITS:
        assert hashlib.sha256((raw / f"ptb.{split}.txt").read_bytes()).hexdigest() == SHA256[split]
        assert (tmp_path / "results" / "ptb" / "logs" / f"fetch_{split}.log").exists()
    assert_readme_counts(tmp_path)
    assert stored_copies(tmp_path) == []  # Snakemake's own copies of the downloads are gone
    r = run(tmp_path, repo, ptb_config(url), "-n")
    assert "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]  # fetched once, not per run


def test_a_corrupted_download_fails_with_one_line_and_keeps_nothing(tmp_path, repo, copies, serve):
    """kills: skipping the checksum (a download kept whatever its sha256), an error that is a traceback or names
    neither the file nor both digests, a mismatching download left in raw/ (or a temporary copy of it)."""
    url, requests = serve(copies["bad"])
    r = run(tmp_path, repo, ptb_config(url))
    assert r.returncode != 0
    got = hashlib.sha256((copies["bad"] / "ptb.test.txt").read_bytes()).hexdigest()
    want = (f"lmgrid: error: {url}ptb.test.txt: sha256 {got} does not match the expected {SHA256['test']}")
    assert error_lines(r) == [want], (r.stdout + r.stderr)[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    assert any(line.startswith("GET /ptb.test.txt") for line in requests)
    raw = tmp_path / "results" / "ptb" / "raw"
    assert list(raw.glob("*ptb.test*")) == []  # neither the file nor a temporary copy of it
    assert not (tmp_path / TARGET).exists()
    assert stored_copies(tmp_path) == []


def test_ptb_dir_skips_the_download(tmp_path, repo, copies, serve):
    """kills: ignoring $LMGRID_PTB_DIR (downloading although local files are there), asking the server anything
    (even a HEAD) when the files are local."""
    url, requests = serve(copies["good"])
    r = run(tmp_path, repo, ptb_config(url), ptb_env=copies["good"])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert requests == []
    assert not (tmp_path / "results" / "ptb" / "raw").exists()
    assert_readme_counts(tmp_path)


def test_local_files_skip_the_download_and_are_checked(tmp_path, repo, copies, serve):
    """kills: not checking local files (corpus.files, and $LMGRID_PTB_DIR, which corpus.files overrides) against
    corpus.sha256, downloading when corpus.files is given."""
    url, requests = serve(copies["good"])
    files = {s: str(copies["bad"] / f"ptb.{s}.txt") for s in SPLITS}
    r = run(tmp_path, repo, ptb_config(url, files=files), ptb_env=copies["good"])
    assert r.returncode != 0
    got = hashlib.sha256((copies["bad"] / "ptb.test.txt").read_bytes()).hexdigest()
    assert error_lines(r) == [f"lmgrid: error: {files['test']}: sha256 {got} does not match the expected "
                              f"{SHA256['test']}"], (r.stdout + r.stderr)[-3000:]
    assert requests == []
    assert not (tmp_path / TARGET).exists()


# ---- the config: what a download needs, before any job ---------------------------------------------------------

def test_download_config_errors_name_the_key(monkeypatch):
    """kills: a download accepted without its sums, a split without a URL, sums given to another corpus kind."""
    monkeypatch.delenv("LMGRID_PTB_DIR", raising=False)
    schema = load_schema()
    base = ptb_config("https://example.org/ptb/")
    cfg = copy.deepcopy(base)
    del cfg["corpus"]["sha256"]
    with pytest.raises(LmgridError, match=r"^config: corpus.sha256: required with corpus.download"):
        check(cfg, None, "config")
    cfg = copy.deepcopy(base)
    cfg["corpus"]["download"] = {"train": "https://a/t", "valid": "https://a/v"}
    with pytest.raises(LmgridError, match=r"corpus.download: give base_url or a URL for every split \(missing: test\)"):
        check(cfg, None, "config")
    cfg = copy.deepcopy(base)
    cfg["corpus"]["sha256"]["valid"] = "abc"
    with pytest.raises(LmgridError, match=r"corpus.sha256.valid: 'abc' does not match"):
        check(cfg, None, "config")
    cfg = copy.deepcopy(base)
    del cfg["corpus"]["download"]
    with pytest.raises(LmgridError, match=r"corpus.files: required when corpus.kind is 'ptb' \(or corpus.download"):
        check(cfg, None, "config")
    cfg = {**copy.deepcopy(base), "corpus": {"name": "s", "kind": "synth", "sha256": dict(SHA256),
                                             "synth": {"sentences": {"train": 5, "valid": 5, "test": 5}}}}
    with pytest.raises(LmgridError, match=r"corpus.sha256: only for kind 'ptb' \(corpus.kind is 'synth'\)"):
        check(cfg, None, "config")
    assert schema  # the schema loads with the new $defs


def test_ptb_dir_without_the_files_is_one_line(monkeypatch, tmp_path):
    """kills: a $LMGRID_PTB_DIR that lacks a file reaching the corpus job instead of stopping the config."""
    (tmp_path / "ptb.train.txt").write_text("a b\n")
    monkeypatch.setenv("LMGRID_PTB_DIR", str(tmp_path))
    with pytest.raises(LmgridError, match=rf"^LMGRID_PTB_DIR={tmp_path}: ptb.valid.txt not found in it$"):
        check(ptb_config("https://example.org/ptb/"), None, "config")


def test_the_ptb_preset_is_valid_and_holds_the_readme_sums(repo, monkeypatch, ptb_dir):
    """kills: a preset whose sums differ from the published ones, or that the config check rejects."""
    from lmgrid.orchestration.config import load_config
    from lmgrid.data.rawdata import ptb_sources

    monkeypatch.chdir(repo)
    monkeypatch.delenv("LMGRID_PTB_DIR", raising=False)
    cfg = load_config(["presets/ptb.yaml"])
    assert cfg["corpus"]["sha256"] == SHA256
    assert ptb_sources(cfg["corpus"]).urls["test"].endswith("/data/ptb.test.txt")
    monkeypatch.setenv("LMGRID_PTB_DIR", str(ptb_dir))
    assert ptb_sources(load_config(["presets/ptb.yaml"])["corpus"]).origin == "env"
