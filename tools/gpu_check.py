#!/usr/bin/env python3
"""One prepared check of lmgrid's GPU path (issue 45): `make gpu-check` on a single-GPU machine, in at most 10 min.

Run from the source tree, with the Python that has torch (PYTHONPATH=src is added here too):

    python3 tools/gpu_check.py [--out DIR] [--dry]        # DIR: --out, else $OUT, else results/gpu-check

It writes DIR/gpu-check.log (everything it prints, its children's output included) and DIR/gpu-check.json (its
figures), and exits 0 only when every step passed (1: a step failed; 2: no GPU without --dry).

The GPU machine lent to this project has torch, Lightning, pandas, scipy, numpy, PyYAML, pytest, but not
Snakemake, MLflow, gensim or jsonschema, and reaches no package registry.  So nothing is carried: the check's code
path avoids them.  It never imports the workflow (Snakefile, lmgrid.orchestration.dryrun), resolves the preset with lmgrid.orchestration.config's
layering and schema defaults but without its jsonschema pass, and lmgrid.run.settings skips its type check where
jsonschema is missing (the one change lmgrid needed).  These four modules are blocked in this process and in every
child it starts (BLOCK), so the --dry form on a CPU machine that has them proves the same path works without.

Steps, in order (phase 1 needs no GPU; --dry stops before phase 2, saying so in one line):
  1. config   presets/ptb-paper-medium.yaml over config.yaml, the LSTM 2x650 cell and its training settings
  2. data     PTB from --ptb-dir, $LMGRID_PTB_DIR, ../shared/data/ptb or shared/data/ptb, checked by the preset's
              sha256 sums, through lmgrid's corpus and vocabulary stages
  3. imports  torch, Lightning and lmgrid's training stack, with their versions
  4. collect  the GPU tests (marked `gpu`, and the GPU-path files TEST_FILES) collected by pytest
  5-12      the GPU steps of tools/gpu_check_steps.py (STEPS there)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
ABSENT = ("snakemake", "mlflow", "gensim", "jsonschema")  # not on the GPU machine
# Prepended to every child's code: the same four modules missing there as here.
BLOCK = f"import sys\nfor _m in {ABSENT!r}:\n    sys.modules[_m] = None\nsys.path.insert(0, {str(SRC)!r})\n"
PRESET = "presets/ptb-paper-medium.yaml"
STUDY, ARCH = "paper_medium", "lstm"  # the medium cell: LSTM 2x650, stream regime
# The GPU-path tests (issue 30).  tests/test_gpu_workflow.py needs Snakemake: collected, and skipped there.  Not
# tests/test_precision.py: its CPU tests train with accelerator auto, which picks the GPU where there is one.
# tests/test_budget_schedule.py trains with accelerator auto, so on the GPU machine it checks there that a budget
# schedule ends at its budget and that a run killed mid-schedule resumes to the uninterrupted result (issue 46).
TEST_FILES = ("tests/test_gpu_path.py", "tests/test_gpu_workflow.py", "tests/test_budget_schedule.py")
PTB_CANDIDATES = (REPO.parent / "shared" / "data" / "ptb", REPO / "shared" / "data" / "ptb")
SMALL_SENTENCES = {"train": 2000, "valid": 200, "test": 200}  # the corpus of the one-step runs of every arch


def block_absent() -> None:
    """Make the modules the GPU machine lacks unimportable here (importlib.util.find_spec answers None)."""
    for name in ABSENT:
        sys.modules[name] = None


class CheckFailed(Exception):
    """A check that did not hold: its message is the step's one-line error."""


class Tee:
    """stdout or stderr written to the terminal and to the log, so the log is the whole output."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text):
        self.stream.write(text)
        self.log.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()
        self.log.flush()

    def fileno(self):
        return self.stream.fileno()

    def isatty(self):
        return False


def source_commit() -> dict:
    """The commit checked (`lmgrid docs --from` puts it beside the figures): $LMGRID_COMMIT when set (the caller
    states which commit these files are: a borrowed GPU machine gets the files without .git, or with a stale .git
    from an earlier copy, whose HEAD and "uncommitted changes" describe another commit), else git's where the tree
    has its history (lmgrid.common.gitinfo.commit, as a run's snapshot reads it), else none."""
    from lmgrid.common.gitinfo import UNKNOWN, commit

    if os.environ.get("LMGRID_COMMIT"):
        return {"commit": os.environ["LMGRID_COMMIT"]}
    found = commit(REPO)  # UNKNOWN without git or outside a checkout
    return found if found["commit"] != UNKNOWN else {}


class Check:
    """The steps run so far, their figures (the JSON) and their failures."""

    def __init__(self, out: Path, work: Path, args):
        self.out, self.work, self.args, self.t0 = out, work, args, time.time()
        self.fig: dict = {"dry": args.dry, "preset": args.preset, "ok": False, "failures": [], "step_s": {},
                          "date": time.strftime("%Y-%m-%d", time.gmtime()), **source_commit()}

    def step(self, name: str, fn, *a):
        """Run one step; a failure is recorded (traceback in the log) and None returned, the caller decides."""
        print(f"\n== {name}", flush=True)
        t = time.time()
        try:
            result = fn(self, *a)
            print(f"ok {name} ({time.time() - t:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, the next steps still run
            from lmgrid.common.errors import LmgridError

            if not isinstance(e, (CheckFailed, LmgridError)):
                traceback.print_exc(file=sys.stdout)
            line = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.fig["failures"].append({"step": name, "error": line})
            print(f"FAILED {name}: {line}", flush=True)
            result = None
        self.fig["step_s"][name] = round(time.time() - t, 1)
        self.save()
        return result

    def save(self) -> None:
        self.fig["wall_s"] = round(time.time() - self.t0, 1)
        (self.out / "gpu-check.json").write_text(json.dumps(self.fig, indent=1, default=str) + "\n")

    def finish(self, stopped: str | None = None) -> int:
        self.fig["ok"] = not self.fig["failures"]
        self.save()
        for f in self.fig["failures"]:
            print(f"gpu-check: error: {f['step']}: {f['error']}", file=sys.stderr, flush=True)
        if self.fig["ok"]:
            print(stopped or f"gpu-check: ok, every step passed in {self.fig['wall_s']:.0f} s; figures in "
                  f"{self.out / 'gpu-check.json'}", flush=True)
        return 0 if self.fig["ok"] else 1


def ptb_dir(args) -> Path | None:
    for candidate in (args.ptb_dir, os.environ.get("LMGRID_PTB_DIR")):
        if candidate:
            return Path(candidate).resolve()
    return next((p for p in PTB_CANDIDATES if (p / "ptb.train.txt").is_file()), None)


def step_config(check: Check) -> dict:
    """The preset as the workflow layers it (lmgrid.orchestration.config's merge, `replace:` sections, schema defaults, semantic
    checks), without the jsonschema pass; then the medium cell and its resolved training settings."""
    from lmgrid.orchestration.config import _merge, apply_overrides, apply_seeds, check_semantics, fill_defaults
    from lmgrid.run.settings import resolve_hparams
    from lmgrid.run.key import expand_study
    from lmgrid.run.schema import load_schema, load_yaml

    files = [str(REPO / "config.yaml"), str(Path(check.args.preset).resolve())]
    config: dict = {}
    for f in files:
        _merge(config, load_yaml(f))
    sources = apply_overrides(config, files, {})
    fill_defaults(config, load_schema())
    apply_seeds(config)
    check_semantics(config, sources, REPO)
    if STUDY not in config["studies"]:
        raise CheckFailed(f"{check.args.preset}: no study {STUDY!r} (the medium cell's study)")
    keys = [k for k in expand_study(config["studies"][STUDY]) if k.arch == ARCH]
    if not keys:
        raise CheckFailed(f"{check.args.preset}: study {STUDY} has no {ARCH} cell")
    key, hp = keys[0], resolve_hparams(config["train"], ARCH)
    check.fig["config"] = {"cell": key.name, "hp": hp}
    print(f"cell {key.name}: {key.layers}x{hp['hidden_dim']}, "
          f"precision {hp['precision']}, {hp['optimizer']} lr {hp['lr']}, bptt {hp['bptt']}, "
          f"batch {hp['stream_batch_size']}", flush=True)
    return {"config": config, "key": key, "train": dict(config["train"]), "hp": hp}


def step_data(check: Check, cfg: dict) -> dict:
    """The PTB files the preset's corpus resolves to, their sha256 checked, through the corpus and vocab stages;
    and the small corpus (the first sentences of each split) that the one-step runs of every arch train on."""
    from lmgrid.data import corpus as corpus_mod
    from lmgrid.data import vocab as vocab_mod
    from lmgrid.data.rawdata import ptb_sources, verify

    corpus = cfg["config"]["corpus"]
    source = ptb_sources(corpus)
    if source is None or source.downloads:
        raise CheckFailed("no Penn Treebank here: set LMGRID_PTB_DIR or --ptb-dir (looked in "
                          f"{', '.join(map(str, PTB_CANDIDATES))}); the GPU machine reaches no download")
    for split, path in source.files.items():
        if "sha256" in corpus:
            verify(path, corpus["sha256"][split], f"{split} ({path})")
    full = check.work / "ptb"
    stats = corpus_mod.prepare("ptb", source.files, full / "corpus", lowercase=corpus["lowercase"],
                               max_len=corpus["max_len"])
    splits = ("train", "valid", "test")
    paths = {s: str(full / "corpus" / f"{s}.txt") for s in splits}
    vocab = vocab_mod.run(*paths.values(), full / "vocab.json", full / "vocab_report.json",
                          cfg["config"]["vocab"]["min_count"], cfg["config"]["vocab"]["max_size"])
    small = check.work / "small"
    small_paths = {}
    for s in splits:
        small_paths[s] = str(small / f"{s}.txt")
        corpus_mod.write_split(small_paths[s], corpus_mod.load_split(paths[s])[:SMALL_SENTENCES[s]])
    tokens = {s: stats["splits"][s]["tokens"] for s in splits}  # words, without the </s> PPL counts
    check.fig["data"] = {"origin": source.origin, "files": source.files, "sha256_checked": "sha256" in corpus,
                         "vocab_size": len(vocab), "words": tokens, "small_sentences": SMALL_SENTENCES}
    print(f"PTB from {source.origin}: {source.files['train']} ..., vocabulary {len(vocab)}, tokens {tokens}",
          flush=True)
    return {"full": {"paths": paths, "vocab": str(full / "vocab.json")},
            "small": {"paths": small_paths, "vocab": str(full / "vocab.json")}}


def step_imports(check: Check) -> dict:
    import pytorch_lightning as pl
    import torch

    import lmgrid.neural.placement  # noqa: F401 - the modules the GPU steps use, imported as they will be
    import lmgrid.neural.train  # noqa: F401
    import lmgrid.orchestration.warm  # noqa: F401

    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                "lightning": pl.__version__, "blocked": list(ABSENT)}
    check.fig["versions"] = versions
    print(" ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    return versions


def test_selection() -> list[str]:
    """Files with a test marked `gpu` (the marker in pyproject.toml), then the GPU-path files."""
    marked = [f"tests/{p.name}" for p in sorted((REPO / "tests").glob("test_*.py")) if "mark.gpu" in p.read_text()]
    return list(dict.fromkeys(marked + [f for f in TEST_FILES if (REPO / f).is_file()]))


def run_child(code: str, args: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    """`python -c BLOCK+code args` in the repository, its output printed (so logged) line by line."""
    proc = subprocess.Popen([sys.executable, "-c", BLOCK + code, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
    watchdog = threading.Timer(timeout, proc.kill)  # a child that hangs silently is killed too
    watchdog.start()
    lines = []
    try:
        for line in proc.stdout:
            print("  | " + line, end="", flush=True)
            lines.append(line)
        proc.wait()
    finally:
        watchdog.cancel()
    return proc.returncode, "".join(lines)


PYTEST = "import pytest\nsys.exit(pytest.main(sys.argv[1:]))\n"


def step_collect(check: Check) -> dict:
    files = test_selection()
    rc, text = run_child(PYTEST, ["--collect-only", "-q", "-p", "no:cacheprovider", *files], timeout=240)
    ids = [line.strip() for line in text.splitlines() if "::" in line and not line.startswith(" ")]
    if rc != 0 or not ids:
        raise CheckFailed(f"pytest --collect-only of {' '.join(files)} exited {rc} with {len(ids)} tests")
    check.fig["tests"] = {"files": files, "collected": len(ids), "ids": ids}
    return check.fig["tests"]


def main(argv: list[str] | None = None) -> int:
    sys.modules.setdefault("gpu_check", sys.modules[__name__])  # gpu_check_steps imports this one, not a copy
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "results/gpu-check", help="log and JSON folder")
    p.add_argument("--dry", action="store_true", help="stop where the check would use the GPU (CPU machines, CI)")
    p.add_argument("--preset", default=str(REPO / PRESET))
    p.add_argument("--ptb-dir", help="folder with ptb.{train,valid,test}.txt (default: $LMGRID_PTB_DIR, ...)")
    p.add_argument("--max-train-tokens", type=int, default=0, help="the bf16 epoch's cap (0: a full PTB epoch)")
    p.add_argument("--short-tokens", type=int, default=100_000,
                   help="train tokens per epoch of the 32-true run and of the resume check's epochs")
    p.add_argument("--arch-tokens", type=int, default=14_000, help="train tokens of each one-step arch run")
    p.add_argument("--budget-s", type=float, default=570, help="steps not started past this wall time fail")
    p.add_argument("--steps", help="the GPU steps to run, comma-separated (default: all; identity needs resume)")
    args = p.parse_args(argv)
    from gpu_check_steps import STEPS

    names = [name for name, _ in STEPS]
    args.steps = args.steps.split(",") if args.steps else names
    if set(args.steps) - set(names):
        p.error(f"--steps: unknown {', '.join(sorted(set(args.steps) - set(names)))} (known: {', '.join(names)})")
    block_absent()
    sys.path.insert(0, str(SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "gpu-check.log").open("w")
    sys.stdout, sys.stderr = Tee(sys.__stdout__, log), Tee(sys.__stderr__, log)
    os.chdir(REPO)
    found = ptb_dir(args)
    if found is not None:
        os.environ["LMGRID_PTB_DIR"] = str(found)  # where the preset's corpus finds it (lmgrid.data.rawdata)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        check = Check(out, Path(work), args)
        if not args.dry:
            from lmgrid.neural.placement import visible_gpus

            if visible_gpus() == 0:  # no torch import needed to know: fail in a second, not after phase 1
                check.fig["failures"].append({"step": "gpu", "error": "no NVIDIA GPU visible here (no /dev/nvidia* "
                                              "device, or CUDA_VISIBLE_DEVICES hides it); on a CPU: --dry"})
                return check.finish() + 1
        return run_all(check)


def run_all(check: Check) -> int:
    from gpu_check_steps import STEPS, plan, run_gpu_steps

    cfg = check.step("config", step_config)
    data = check.step("data", step_data, cfg) if cfg else None
    versions = check.step("imports", step_imports) if data else None
    tests = check.step("collect", step_collect) if versions else None
    check.fig["plan"] = plan(check)
    print("\nthe GPU steps:" + "".join(f"\n  {name}: {what}" for name, what in STEPS), flush=True)
    if not tests:
        return check.finish()
    import torch

    cuda = torch.cuda.is_available()  # asks the driver; initialises no CUDA context
    check.fig["cuda_available"] = cuda
    if check.args.dry:
        check.fig["stopped_at"] = "cuda"
        here = "CUDA is available here, not used" if cuda else "no CUDA here"
        return check.finish(f"gpu-check --dry: {here}; stopped where the check would use the GPU")
    if not cuda:
        check.fig["failures"].append({"step": "gpu", "error": f"torch {torch.__version__} sees no GPU "
                                      f"(torch.version.cuda={torch.version.cuda})"})
        return check.finish() + 1
    run_gpu_steps(check, cfg, data)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
