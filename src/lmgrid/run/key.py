"""Grid cells: which architectures exist, how a study expands, and where each run lives.

The run-key-to-path mapping exists here and nowhere else.  A run's folder is a
function of its parameters only, so a cell shared by several studies is trained once.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from lmgrid.common import plugins

NGRAM_ARCHS = ("addk", "katz", "kn", "mkn")
NEURAL_ARCHS = ("ffnn", "rnn", "lstm", "gru", "transformer")
ARCHS = NGRAM_ARCHS + NEURAL_ARCHS
# The first implementation of each architecture is its default.
IMPLS = {"lstm": ("torch", "cell", "concat", "cellonebias"), "gru": ("torch", "cell")}
NGRAM_IMPL = "ngram"
REGIMES = ("window", "stream")

# Snakemake output patterns are built from this one string.
RUN_DIR = "results/{corpus}/runs/{arch}/{impl}/n{n_step}_l{layers}_{regime}_s{seed}"


def beside_runs(folder: str, suffix: str = "") -> str:
    """RUN_DIR moved from results/<corpus>/runs/ to results/<corpus>/<folder>/: logs, benchmarks and checkpoints
    of a run keep the layout of its run folder."""
    return RUN_DIR.replace("results/{corpus}/runs/", f"results/{{corpus}}/{folder}/", 1) + suffix


# The workflow widens "arch" by the plug-ins' names (arch_constraint).
WILDCARD_CONSTRAINTS = {"arch": "|".join(ARCHS), "impl": r"[a-z]+", "n_step": r"\d+", "layers": r"\d+",
                        "regime": "|".join(REGIMES), "seed": r"\d+"}
# The workflow's rules with one job per grid cell (workflow/rules/{ngram,train}.smk): a plug-in's cells train in
# rules of their own, which take its source file as an input.
CELL_RULES = ("ngram", "train", "train_gated", "train_plugin", "train_plugin_gated")


def arch_constraint() -> str:
    """The arch wildcard's pattern: every built-in and every registered plug-in (lmgrid.common.plugins)."""
    return "|".join(ARCHS + plugins.names())


def impls_of(arch: str) -> tuple[str, ...]:
    """The implementations of an architecture, the default first: a plug-in has one, `plugin`."""
    if arch in IMPLS:
        return IMPLS[arch]
    return (plugins.IMPL,) if plugins.is_plugin(arch) else ("torch",)


@dataclass(frozen=True, order=True)
class RunKey:
    arch: str
    impl: str
    n_step: int
    layers: int
    regime: str
    seed: int

    @property
    def is_ngram(self) -> bool:
        return self.arch in NGRAM_ARCHS

    @property
    def name(self) -> str:
        """Short label for tables and run tags, e.g. 'lstm/cell n5 l2 window s1'."""
        model = self.arch if self.impl in ("torch", NGRAM_IMPL, plugins.IMPL) else f"{self.arch}/{self.impl}"
        return f"{model} n{self.n_step} l{self.layers} {self.regime} s{self.seed}"

    @property
    def slug(self) -> str:
        """Every field, no blanks or slashes: the cell's MLflow model name, e.g. 'lstm-torch-n5-l1-window-s1'."""
        return f"{self.arch}-{self.impl}-n{self.n_step}-l{self.layers}-{self.regime}-s{self.seed}"

    def run_dir(self, corpus: str) -> str:
        return RUN_DIR.format(corpus=corpus, **asdict(self))

    def beside(self, corpus: str, folder: str, suffix: str = "") -> str:
        """This run's file in another tree (see beside_runs), e.g. beside(c, "benchmarks/runs", ".tsv")."""
        return beside_runs(folder, suffix).format(corpus=corpus, **asdict(self))

    @classmethod
    def from_wildcards(cls, w) -> "RunKey":
        return cls(w["arch"], w["impl"], int(w["n_step"]), int(w["layers"]), w["regime"], int(w["seed"]))


def normalise(arch: str, impl: str, n_step: int, layers: int, regime: str, seed: int) -> RunKey:
    """Collapse the parameters a model ignores, so equal models get equal keys.

    N-grams are deterministic and have no depth, implementation or regime: n_step is their order.
    In the stream regime the context is the BPTT length, so n_step does not apply (stored as 0).
    """
    if arch in NGRAM_ARCHS:
        return RunKey(arch, NGRAM_IMPL, n_step, 1, "window", 0)
    if regime == "stream":
        n_step = 0
    return RunKey(arch, impl, n_step, layers, regime, seed)


def expand_study(study: dict) -> list[RunKey]:
    """Every distinct run of one study (a dict with the schema's keys and defaults applied)."""
    keys = set()
    for arch in study["arch"]:
        valid = impls_of(arch)
        impls = [i for i in study.get("impl", ["torch"]) if i in valid] or [valid[0]]
        for impl, n, layers, regime, seed in itertools.product(
                impls, study["n_step"], study.get("layers", [1]), study.get("regime", ["window"]),
                study.get("seed", [1])):
            keys.add(normalise(arch, impl, n, layers, regime, seed))
    return sorted(keys)


def all_runs(studies: dict) -> list[RunKey]:
    return sorted({k for study in studies.values() for k in expand_study(study)})
