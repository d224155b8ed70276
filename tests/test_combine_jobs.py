"""The combine stage's job planning (lmgrid.testtime.combine.jobs.CombineJobs): the input and params functions of
workflow/rules/combine.smk, checked here without Snakemake.  The workflow-level dry runs (tests/test_combine_seeds.py,
tests/test_rerun.py) check the same through the rules."""
from __future__ import annotations

from lmgrid.testtime.combine.jobs import CombineJobs

STUDIES = {"ngram": {"arch": ["kn"], "n_step": [5]},
           "rnn": {"arch": ["rnn"], "regime": ["stream"], "n_step": [0], "seed": [1, 2]}}
CONFIG = {"studies": STUDIES, "adapt": {"cache": {"window": [50], "theta": [0.3], "lam": [0.1]}},
          "combine": {"kn_rnn": {"description": "KN and the RNN with its cache",
                                 "components": [{"arch": "kn"}, {"arch": "rnn"}, {"arch": "rnn", "mode": "cache"}]},
                      "pinned": {"components": [{"arch": "kn"}, {"arch": "rnn", "seed": 2}],
                                 "compare_with": "kn_rnn"}}}
RNN_S2 = "results/c/scores/rnn/torch/n0_l1_stream_s2"  # its score files, a folder per mode


class Wildcards(dict):
    """A job's wildcards as Snakemake passes them: by attribute and by key."""
    __getattr__ = dict.__getitem__


def wildcards(**values) -> Wildcards:
    return Wildcards(corpus="c", **values)


def problems(jobs: CombineJobs) -> list[str]:
    """What is wrong with CONFIG's plan: a run per seed of kn_rnn, each reading its own seed's scores; an adapted
    mode's settings file among its inputs (a base mode has none); the seed passed only where the run is one of
    several; the compare_with pair's members' test scores among the combinations job's inputs."""
    found = []
    if sorted(jobs.runs) != ["kn_rnn/s1", "kn_rnn/s2", "pinned"]:
        found.append(f"runs {sorted(jobs.runs)}")
        return found
    inputs = jobs.inputs(wildcards(combo="kn_rnn/s2"))
    if any("_s1/" in f for f in inputs) or f"{RNN_S2}/base/test.npy" not in inputs:
        found.append("kn_rnn/s2 reads another seed's scores")
    settings = [f for f in inputs if f.endswith("adapt.json")]
    if settings != [f"{RNN_S2}/cache/adapt.json"]:
        found.append(f"settings files {settings}")
    if "--seed 2" not in jobs.args(wildcards(combo="kn_rnn/s2")) or "--seed" in jobs.args(wildcards(combo="pinned")):
        found.append("seed arguments")
    compared = jobs.compare_inputs(wildcards())
    if f"{RNN_S2}/cache/test.npy" not in compared.get("scores", []):
        found.append("the comparison does not read kn_rnn's cache scores")
    return found


def test_the_plan_has_a_run_per_seed_reading_its_own_scores(monkeypatch):
    """Kills: CombineJobs reading every seed's scores for each run, or adding adapt.json to base components' inputs
    (the negative controls: a plan whose inputs are every run's, and one whose settings file is added for every
    mode, are both caught by the same check); results() ignoring `names`, which would make the reference table
    wait for every combination (seen failing with the filter removed)."""
    import lmgrid.testtime.combine.jobs as jobs_module

    jobs = CombineJobs(CONFIG)
    assert problems(jobs) == [] and jobs.notes == []
    assert jobs.compare_pairs == [("pinned", "kn_rnn")]
    assert jobs.model_file(wildcards(arch="kn", impl="ngram", n_step=5, layers=1, regime="window", seed=0)).endswith(
        "/model.arpa")
    assert jobs.description(wildcards(combo="kn_rnn/s1")) == "'KN and the RNN with its cache'"
    assert jobs.outputs("c")[-3:] == [f"results/c/combine/comparisons.{e}" for e in ("csv", "md", "html")]
    assert len(jobs.results(wildcards())) == 3
    assert jobs.results(wildcards(), names={"pinned", "absent"}) == ["results/c/combine/pinned/result.json"]

    class EveryRunsInputs(CombineJobs):
        def inputs(self, w):
            every = (CombineJobs.inputs(self, Wildcards(corpus=w.corpus, combo=c)) for c in self.components)
            return sorted(set().union(*every))

    assert "kn_rnn/s2 reads another seed's scores" in problems(EveryRunsInputs(CONFIG))
    monkeypatch.setattr(jobs_module, "SCORE_FILES", jobs_module.SCORE_FILES + ("adapt.json",))
    assert any(p.startswith("settings files") for p in problems(CombineJobs(CONFIG)))


def test_a_config_without_comparisons_adds_no_comparison_files():
    """Kills: outputs() or compare_args() assuming a compare_with pair exists (the control: CONFIG has one)."""
    plain = {**CONFIG, "combine": {"kn_rnn": CONFIG["combine"]["kn_rnn"]}}
    jobs = CombineJobs(plain)
    assert jobs.compare_pairs == [] and jobs.compare_inputs(wildcards()) == {}
    assert jobs.compare_args(wildcards(), None, None) == ""
    assert not any("comparisons" in f for f in jobs.outputs("c"))
    assert any("comparisons" in f for f in CombineJobs(CONFIG).outputs("c"))
