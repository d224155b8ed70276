"""The combine stage's jobs (workflow/rules/combine.smk): what each job reads, writes and is told, from the config.

The rules hold no functions of their own (Snakemake's lint: rules and functions apart), so the input and params
functions of the token_scores, adapt_scores, combine and combinations rules are this class's methods.  Each takes
the job's wildcards (`w.corpus`, a cell's `w.arch` ..., a run's `w.combo`, a test-time `w.mode`) as Snakemake
passes them; `compare_args` also takes the job's input and output, by those names, as Snakemake looks them up.
"""
from __future__ import annotations

import shlex

from lmgrid.run.key import NGRAM_ARCHS, RunKey
from lmgrid.run.record import EVAL_SPLITS
from lmgrid.testtime.combine.adapted import SETTINGS_FILE, needs_train_split
from lmgrid.testtime.combine.select import compare_pairs, label, resolve, run_folders, score_dir

COMBINE_DIR = "results/{corpus}/combine/{combo}"
COMBINE_FILES = ("result.json", "table.csv", "table.md", "table.html")
COMBINATIONS = "results/{corpus}/combine/combinations"
COMPARISONS = "results/{corpus}/combine/comparisons"
SCORE_FILES = tuple(f"{s}.{e}" for s in EVAL_SPLITS for e in ("npy", "json"))


class CombineJobs:
    """The config's combinations, resolved over its studies' cells (lmgrid.testtime.combine.select).

    runs: {folder: (name, seed, components)}, one job per run of a combination (a folder <name>, or <name>/s<seed>
    for each seed of one run per seed); components: {folder: [(cell, mode), ...]}; compare_pairs: the config's
    compare_with pairs; notes: what was left out, a line each.  A bad `combine:` raises LmgridError (one line).
    """

    def __init__(self, config: dict):
        resolved, self.notes = resolve(config)
        self.compare_pairs = compare_pairs(config, resolved, self.notes)
        self.runs = run_folders(resolved)
        self.components = {run: comps for run, (_, _, comps) in self.runs.items()}
        self._adapt = config["adapt"]
        self._combine = config.get("combine") or {}

    def outputs(self, corpus: str) -> list[str]:
        """Every run's files, and the paired comparisons' when the config asks for any (the combinations rule)."""
        files = [f"{COMBINE_DIR}/{f}".format(corpus=corpus, combo=c) for c in self.components for f in COMBINE_FILES]
        if self.compare_pairs:
            files += [f"{COMPARISONS.format(corpus=corpus)}.{e}" for e in ("csv", "md", "html")]
        return files

    def results(self, w, names: set | None = None) -> list[str]:
        """Every run's result.json (the combinations table reads them; the MLflow mirror logs them); with `names`,
        only the runs of those combinations (the reference table's)."""
        return [f"{COMBINE_DIR}/result.json".format(corpus=w.corpus, combo=c) for c, (name, _, _) in self.runs.items()
                if names is None or name in names]

    @staticmethod
    def model_file(w) -> str:
        """The cell's model file: an n-gram's ARPA file, a neural cell's checkpoint."""
        name = "model.arpa" if w.arch in NGRAM_ARCHS else "model.ckpt"
        return f"{RunKey.from_wildcards(w).run_dir(w.corpus)}/{name}"

    def adapt_train(self, w) -> str | list:
        """The train split, for a mode that reads it with this config (dynamic evaluation's rule rms); else none."""
        return f"results/{w.corpus}/corpus/train.txt" if needs_train_split(w.mode, self._adapt) else []

    def adapt_train_arg(self, w) -> str:
        train = self.adapt_train(w)
        return f"--train {shlex.quote(train)}" if train else ""

    def inputs(self, w) -> list[str]:
        """A run's components' score files (and each adapted mode's settings file)."""
        return [f"{score_dir(w.corpus, key, mode)}/{f}" for key, mode in self.components[w.combo]
                for f in SCORE_FILES + ((SETTINGS_FILE,) if mode != "base" else ())]

    def args(self, w) -> str:
        """`lmgrid combine`'s components, name, run folder and seed for one run."""
        name, seed, _ = self.runs[w.combo]
        return " ".join(["--component " + shlex.quote(f"{label(key, mode)}={score_dir(w.corpus, key, mode)}")
                         for key, mode in self.components[w.combo]]
                        + [f"--name {shlex.quote(name)} --run {shlex.quote(w.combo)}"]
                        + ([f"--seed {seed}"] if seed is not None else []))

    def description(self, w) -> str:
        return shlex.quote(self._combine[self.runs[w.combo][0]].get("description", ""))

    def compare_inputs(self, w) -> dict:
        """The compare_with pairs' inputs: their members' test score files, the test split and the vocabulary."""
        if not self.compare_pairs:
            return {}
        runs = [c for c, (name, _, _) in self.runs.items() if any(name in pair for pair in self.compare_pairs)]
        scores = {f"{score_dir(w.corpus, key, mode)}/test.{e}" for c in runs for key, mode in self.components[c]
                  for e in ("npy", "json")}
        return {"scores": sorted(scores), "test": f"results/{w.corpus}/corpus/test.txt",
                "vocab": f"results/{w.corpus}/vocab.json"}

    def compare_args(self, w, input, output) -> str:  # noqa: A002 - Snakemake passes them by these names
        if not self.compare_pairs:
            return ""
        return (" ".join(f"--pair {shlex.quote(a)}={shlex.quote(b)}" for a, b in self.compare_pairs)
                + f" --test {input.test} --vocab {input.vocab} --compare-csv {output.compare_csv} "
                  f"--compare-md {output.compare_md} --compare-html {output.compare_html}")
