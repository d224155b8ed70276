"""The PTB presets: each runs only its own studies, and every study of every preset runs end to end on the CPU
(presets/smoke.yaml: training capped to a few steps; presets/smoke-paper.yaml: the GPU presets at tiny widths; both
on the first sentences of each PTB split, in 32-true), filling the reference table with the shape docs/contracts.md
gives.  Needs the Penn Treebank (LMGRID_PTB_DIR)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmgrid.orchestration.config import apply_seeds, load_config
from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.run.settings import MODEL_KEYS, resolve_hparams
from lmgrid.neural.schedule import PlateauSchedule
from lmgrid.neural.train import schedule_settings
from lmgrid.analysis.reference import COLUMNS, NOT_RUN, published_setting
from lmgrid.run.key import NEURAL_ARCHS, all_runs
from lmgrid.orchestration.scales import scales_of

from tinygrid import planned_jobs, snakemake

PRESETS = ("seed_table", "course_report", "course_report_full", "zaremba_small", "ptb-paper-medium", "ptb-paper-large",
           "ptb_time_to_quality", "ptb_budget")
# Run end to end (smoke-sized) in CI: every preset but course_report_full, which runs there as course_report's scale
# `full` (lmgrid.orchestration.scales), ptb_time_to_quality, one cell of the equal-compute study's recipe (run end
# to end by tests/test_budget_workflow.py's budget schedule), and ptb_budget, whose smoke form smoke-budget.yaml runs
# end to end in tests/test_budget_workflow.py (its scales are not cells of its own config); they are dry-run alone
# with the others.
END_TO_END = tuple(p for p in PRESETS if p not in ("course_report_full", "ptb_time_to_quality", "ptb_budget"))
SMOKE = {"seed_table": "smoke", "course_report": "smoke", "course_report_full": "smoke", "zaremba_small": "smoke",
         "ptb-paper-medium": "smoke-paper", "ptb-paper-large": "smoke-paper", "ptb_time_to_quality": "smoke",
         "ptb_budget": "smoke-budget"}


def preset_config(repo, preset: str) -> dict:
    """The preset file as written, with its `seeds:` (if any) made every study's seed list, as the workflow does."""
    cfg = yaml.safe_load((repo / "presets" / f"{preset}.yaml").read_text())
    apply_seeds(cfg)
    return cfg


def _workdir(tmp_path, repo, ptb_dir, monkeypatch):
    shutil.copy(repo / "config.yaml", tmp_path / "config.yaml")  # the default studies that must not leak in
    monkeypatch.setenv("LMGRID_PTB_DIR", str(ptb_dir))  # read the local copy: no download
    return tmp_path


@pytest.fixture(scope="module")
def smoke_workdir(tmp_path_factory):
    """smoke_workdir(corpus) -> the one work folder of the smoke runs that write results/<corpus>, shared by them in
    END_TO_END's order: seed_table, course_report and zaremba_small all cut PTB to presets/smoke.yaml's ptb-smoke
    (corpus and vocabulary made once), and ptb-paper-medium and -large train the very same cells under
    presets/smoke-paper.yaml (test_the_paper_smoke_forms_train_the_same_cells), so large's run reuses medium's and
    writes only its own tables.  Every check reads what its own run rewrote (its studies' folders, a summary and
    reference of its own length and rows), so a preset run alone (-k) checks the same.  Each folder's MLflow store
    is made from nothing by its first run's sync: MLflow's own migrations stay covered (docs/testing.md)."""
    folders: dict[str, Path] = {}

    def get(corpus: str) -> Path:
        if corpus not in folders:
            folders[corpus] = tmp_path_factory.mktemp(corpus)
        return folders[corpus]

    return get


@pytest.mark.full  # the Penn Treebank (tests/tiers.py)
@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_plans_only_its_own_studies(tmp_path, repo, ptb_dir, preset, monkeypatch):
    """Kills "config.yaml's studies merged into the preset" (no `replace:`): the default grid's cells would be
    planned too."""
    work = _workdir(tmp_path, repo, ptb_dir, monkeypatch)
    cfg = preset_config(repo, preset)
    r = snakemake(work, repo, "-n", "--configfile", str(repo / "presets" / f"{preset}.yaml"))
    assert r.returncode == 0, r.stderr[-2000:]
    jobs = planned_jobs(r)
    runs = all_runs(cfg["studies"])
    assert jobs.get("train", 0) + jobs.get("train_gated", 0) == sum(not k.is_ngram for k in runs)
    assert jobs.get("ngram", 0) == sum(k.is_ngram for k in runs)
    assert "synth" not in jobs and (jobs.get("reference", 0) == 1) == bool(cfg.get("reference"))


@pytest.mark.full  # the Penn Treebank (tests/tiers.py)
@pytest.mark.parametrize("preset", PRESETS)
def test_the_smoke_forms_cut_ptb_and_train_in_fp32(repo, ptb_dir, preset, monkeypatch):
    """A preset with its smoke file (and each of its scales, which the smoke file still applies to): the smoke file's
    corpus.max_sentences, and every architecture its studies train at 32-true, so the smoke run's cost does not
    depend on the CPU (auto's choice is tested in tests/test_precision.py).  Kills: a smoke file without the
    precision or the cut, a preset's per_arch precision the smoke file leaves in place, a scale that drops the smoke
    file.  Control, run here: the preset alone is uncut and, but for zaremba_small's recipe, at auto."""
    monkeypatch.chdir(repo)
    monkeypatch.setenv("LMGRID_PTB_DIR", str(ptb_dir))
    files = [f"presets/{preset}.yaml", f"presets/{SMOKE[preset]}.yaml"]
    cut = yaml.safe_load((repo / files[1]).read_text())["corpus"]["max_sentences"]
    assert all(cut.get(split) for split in ("train", "valid", "test"))

    def precisions(cfg):
        archs = {a for study in cfg["studies"].values() for a in study["arch"] if a in NEURAL_ARCHS}
        return {a: resolve_hparams(cfg["train"], a)["precision"] for a in sorted(archs)}

    configs = [load_config(files)] + [s.config for s in scales_of(files)]
    assert len(configs) == 1 + len(preset_config(repo, preset).get("scales") or {})
    for cfg in configs:  # ptb_budget's own config trains n-grams only: its neural runs are its scales'
        assert cfg["corpus"]["max_sentences"] == cut
        assert set(precisions(cfg).values()) <= {"32-true"}, precisions(cfg)
    assert any(precisions(cfg) for cfg in configs)
    alone = load_config(files[:1])
    assert "max_sentences" not in alone["corpus"]
    alone_precisions = {p for cfg in [alone] + [s.config for s in scales_of(files[:1])] for p in precisions(cfg).values()}
    assert preset == "zaremba_small" or alone_precisions == {"auto"}


def test_the_paper_smoke_forms_train_the_same_cells(repo, monkeypatch):
    """presets/smoke-paper.yaml over ptb-paper-medium and over ptb-paper-large: the same corpus, the same run keys
    and the same resolved training settings per architecture, so the end-to-end test's large run finds medium's
    cells done in their shared work folder (smoke_workdir) and retrains none.  Kills: a smoke file that leaves a
    setting of one paper preset in place (without smoke-paper.yaml's dropout, large's 0.65 against medium's 0.5:
    three more cells to train in CI).  Control, run here: the presets alone differ in their settings."""
    monkeypatch.chdir(repo)

    def cells(*files):
        cfg = load_config(list(files))
        runs = all_runs(cfg["studies"])
        settings = {a: resolve_hparams(cfg["train"], a) for a in sorted({k.arch for k in runs})}
        return cfg["corpus"], sorted(map(str, runs)), settings

    medium, large = "presets/ptb-paper-medium.yaml", "presets/ptb-paper-large.yaml"
    assert cells(medium, "presets/smoke-paper.yaml") == cells(large, "presets/smoke-paper.yaml")
    assert cells(medium)[2] != cells(large)[2]


def first_sentences(path: Path, n: int, last: bool = False) -> tuple[bytes, int]:
    """The first n sentences of a raw PTB file as the corpus stage writes them (a line each, tokens joined by one
    blank; blank lines are no sentences), and how many the file holds: recomputed here from the file, not by lmgrid.
    last=True: the last n instead (the negative control's cut)."""
    sentences = [" ".join(tokens) + "\n" for tokens in map(str.split, path.read_text(encoding="utf-8").splitlines())
                 if tokens]
    return "".join(sentences[-n:] if last else sentences[:n]).encode(), len(sentences)


def cut_problems(stats: dict, written: dict[str, bytes], ptb_dir: Path, want: dict[str, int]) -> list[str]:
    """The corpus stage's cut (corpus_stats.json and the split files written) against the first `want[split]`
    sentences of each raw PTB split: the record's limit, sentences kept, of how many and sha256, the file's sha256,
    and the split's sentence count."""
    out = []
    for split, n in want.items():
        expected, whole = first_sentences(ptb_dir / f"ptb.{split}.txt", n)
        digest = hashlib.sha256(expected).hexdigest()
        record = stats.get("max_sentences", {}).get(split)
        if record != {"limit": n, "sentences": min(n, whole), "of": whole, "sha256": digest}:
            out.append(f"{split}: recorded {record}, not the first {n} of {whole} sentences (sha256 {digest})")
        if hashlib.sha256(written[split]).hexdigest() != digest:
            out.append(f"{split}: the file written is not the first {n} sentences")
        if stats["splits"][split]["sentences"] != min(n, whole):
            out.append(f"{split}: {stats['splits'][split]['sentences']} sentences in the stats, not {min(n, whole)}")
    return out


def reference_problems(ref: pd.DataFrame, summary: pd.DataFrame, wanted: list[dict]) -> list[str]:
    """The reference table's rows against the runs in summary.csv, recomputed here: a row with `runs` holds the
    mean, sample std and 95% t interval (df = seeds - 1) of the test PPL of runs matching those keys (all of them,
    or the subset that also matches the published setting: then seeds is smaller and the mean lies within theirs),
    and difference = mean - published; a row without `runs` holds none."""
    from scipy import stats

    out = []
    for row, want in zip(ref.itertuples(), wanted):
        if row.model != want["model"] or row.published_test_ppl != want["published_test_ppl"]:
            out.append(f"{row.model}: not the configured row")
        if want.get("combine"):  # one fitted mixture of the preset's cells (lmgrid.testtime.combine): no runs of its own
            if row.ours == NOT_RUN or not row.test_ppl_mean > 1:
                out.append(f"{row.model}: combination {want['combine']} without its result")
            elif row.difference != pytest.approx(row.test_ppl_mean - row.published_test_ppl):
                out.append(f"{row.model}: difference {row.difference}")
            continue
        if not want.get("runs"):
            if row.ours != NOT_RUN or not pd.isna(row.test_ppl_mean):
                out.append(f"{row.model}: numbers for a row without runs")
            continue
        hits = summary.loc[(summary[list(want["runs"])] == pd.Series(want["runs"])).all(axis=1), "test_ppl"]
        if not 1 <= row.seeds <= len(hits) or not hits.min() - 1e-9 <= row.test_ppl_mean <= hits.max() + 1e-9:
            out.append(f"{row.model}: {row.seeds} seeds, mean {row.test_ppl_mean} outside its {len(hits)} runs")
            continue
        if row.seeds == len(hits) and len(hits) > 1:
            # abs: the CSVs hold rounded figures (summary's test PPL to 4 decimals, the reference's std to 3)
            half = stats.t.ppf(0.975, len(hits) - 1) * hits.std() / len(hits) ** 0.5
            if (row.test_ppl_mean, row.test_ppl_std, row.ci95_low, row.ci95_high) != pytest.approx(
                    (hits.mean(), hits.std(), hits.mean() - half, hits.mean() + half), rel=1e-6, abs=2e-3):
                out.append(f"{row.model}: mean/std/interval {row.test_ppl_mean}, {row.test_ppl_std} against its runs'")
        if row.difference != pytest.approx(row.test_ppl_mean - row.published_test_ppl):
            out.append(f"{row.model}: difference {row.difference}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("preset", END_TO_END)
def test_every_study_of_a_preset_runs_end_to_end(smoke_workdir, repo, ptb_dir, preset, monkeypatch):
    """Each preset, cut to its smoke size, runs through Snakemake on real PTB, cut to the smoke file's first sentences
    of each split (in the folder it shares with the presets of its smoke corpus: smoke_workdir).  Kills: a preset
    study that fails, or leaves its table or findings out; a summary without every run; reference rows whose mean
    is not their runs' (the negative control, run below: rows set above every run, made self-consistent, must be
    caught); a corpus (or a scale's) not cut to the first N sentences of each split,
    or whose recorded sha256 is not the cut's (negative control, run below: a self-consistent cut of the last N)."""
    smoke = yaml.safe_load((repo / "presets" / f"{SMOKE[preset]}.yaml").read_text())
    work = _workdir(smoke_workdir(smoke["corpus"]["name"]), repo, ptb_dir, monkeypatch)
    cfg = preset_config(repo, preset)
    if "seeds" in smoke:  # the smoke file's seeds replace the preset's: the workflow applies it after the preset
        cfg["seeds"] = smoke["seeds"]
        apply_seeds(cfg)
    files = [str(repo / "presets" / f"{preset}.yaml"), str(repo / "presets" / f"{SMOKE[preset]}.yaml")]
    if cfg.get("scales"):  # as `make run` does: every scale first, each its own Snakemake run
        # Cut to the smoke size, a scale trains cells of the main config's, in its own results tree (course_report's
        # full: the gates study's LSTM cells, both capped at the smoke file's train tokens), whose embeddings the
        # main run below evaluates: the scales run without their embeddings job.  The premise, checked first.
        monkeypatch.chdir(work)
        main = load_config(files)
        for scale in scales_of(files):
            assert set(all_runs(scale.config["studies"])) <= set(all_runs(main["studies"])), scale.label
            assert all(resolve_hparams(scale.config["train"], k.arch) == resolve_hparams(main["train"], k.arch)
                       for k in all_runs(scale.config["studies"]) if not k.is_ngram), scale.label
        r = subprocess.run([sys.executable, "-m", "lmgrid", "scales-run", "--configfile", *files, "--set",
                            "embeddings.enabled=false", "--",
                            str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d",
                            str(work), "--cores", "2"], cwd=work, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = snakemake(work, repo, "--configfile", *files, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    corpus = work / "results" / smoke["corpus"]["name"]
    # The cut, in this config's corpus and every scale's: the first N sentences of each PTB split, as recorded.
    # Negative control, run here: the last N sentences of train, with the record made to agree, must be caught.
    want = smoke["corpus"]["max_sentences"]
    for name in [smoke["corpus"]["name"], *(f"{smoke['corpus']['name']}-{label}" for label in cfg.get("scales") or {})]:
        stage = work / "results" / name / "corpus"
        stats = json.loads((stage / "corpus_stats.json").read_text())
        written = {split: (stage / f"{split}.txt").read_bytes() for split in want}
        assert cut_problems(stats, written, ptb_dir, want) == [], name
    last, _ = first_sentences(ptb_dir / "ptb.train.txt", want["train"], last=True)
    mutant = {**stats, "max_sentences": {**stats["max_sentences"], "train": {
        **stats["max_sentences"]["train"], "sha256": hashlib.sha256(last).hexdigest()}}}
    assert cut_problems(mutant, {**written, "train": last}, ptb_dir, want) != []
    if cfg.get("scales"):  # every scale's gate answers beside this config's, rows of both
        compared = pd.read_csv(corpus / "scales" / "gates.csv")
        assert set(compared["scale"]) == {smoke["corpus"]["name"]} | {f"{smoke['corpus']['name']}-{label}"
                                                                      for label in cfg["scales"]}
        assert set(compared["agree_pooled"]) <= {"yes", "no", "one scale"}
        assert (compared["agree_pooled"] != "one scale").any()  # the LSTM's gates are asked at both scales
    for name in cfg["studies"]:
        assert (corpus / "studies" / name / "table.csv").is_file()
        assert (corpus / "studies" / name / "findings.md").is_file()
    summary = pd.read_csv(corpus / "summary.csv")
    assert len(summary) == len(all_runs(cfg["studies"]))
    if cfg.get("reference"):
        # The reference rows, recomputed from the runs (reference_problems).  Negative control, run here: rows whose
        # mean is not their runs' (above every run of the preset, e.g. "runs: keys ignored" or another split's PPL),
        # with the difference made consistent, pass "difference = mean - published" (the old check) and must fail
        # this one.
        ref = pd.read_csv(corpus / "reference.csv")
        assert list(ref.columns) == COLUMNS and len(ref) == len(cfg["reference"])
        assert reference_problems(ref, summary, cfg["reference"]) == []
        run = ref["ours"] != NOT_RUN
        every = summary.loc[summary["arch"] != "oracle", "test_ppl"]
        mutant = ref.assign(test_ppl_mean=ref["test_ppl_mean"].where(~run, every.max() + 1.0))
        mutant["difference"] = mutant["test_ppl_mean"] - mutant["published_test_ppl"]
        assert not run.any() or reference_problems(mutant, summary, cfg["reference"]) != []
        for ext in ("md", "tex", "html"):
            assert (corpus / f"reference.{ext}").stat().st_size > 0


def zaremba_rates(hp: dict) -> tuple[list[float], str]:
    """The rate of each epoch and the stop reason the preset's schedule gives a run that keeps improving."""
    s = PlateauSchedule(**schedule_settings(hp))
    lr = hp["lr"]
    for epoch in range(40):
        lr = s.step(6.0 - 0.1 * epoch, lr)
        if s.stopped_because:
            break
    return s.lr_history, s.stopped_because


def test_zaremba_small_resolves_to_their_recipe(repo, monkeypatch):
    """presets/zaremba_small.yaml validates and resolves to Zaremba et al.'s small LSTM (their main.lua params): 2x200
    LSTM, embedding 200, no dropout, untied, full softmax, every parameter uniform in +-0.1, bptt 20, batch 20, SGD lr
    1 and gradient norm 5 on their loss summed over the 20 steps (= lr 20 and clip 0.25 on our per-token mean),
    epochs 1-5 at the first rate, then halved after every epoch, 13 epochs, ended by the budget; one seed; and its
    reference row states that very setting.  Kills an off-by-one in the decay (their paper's "after 4 epochs" read as
    a decay after epoch 4; run below as the negative control)."""
    monkeypatch.chdir(repo)
    cfg = load_config([repo / "presets" / "zaremba_small.yaml"])
    (study,) = cfg["studies"].values()
    assert (study["arch"], study["layers"], study["regime"], study["seed"]) == (["lstm"], [2], ["stream"], [1])
    hp = resolve_hparams(cfg["train"], "lstm")
    bptt = 20
    assert {k: hp[k] for k in ("hidden_dim", "emb_dim", "dropout", "tie_weights", "init_range", "bptt",
                               "stream_batch_size", "optimizer", "momentum", "weight_decay", "residual", "epochs",
                               "precision")} == {
        "hidden_dim": 200, "emb_dim": 200, "dropout": 0.0, "tie_weights": False, "init_range": 0.1, "bptt": bptt,
        "stream_batch_size": 20, "optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0, "residual": False,
        "epochs": 13, "precision": "32-true"}
    assert hp["lr"] == pytest.approx(1.0 * bptt) and hp["clip"] == pytest.approx(5.0 / bptt)
    assert hp.get("output_layer", "full") == "full"
    rates, stop = zaremba_rates(hp)
    assert rates == pytest.approx([20.0] * 5 + [20.0 / 2 ** k for k in range(1, 9)]) and stop == "budget"
    model = build_model(model_config_defaults(arch="lstm", vocab_size=10_000, layers=2, **{k: hp[k] for k in MODEL_KEYS}))
    # embedding 10,000 x 200; per layer 4 gates x 200 x (200 + 200) weights and two biases of 4 x 200; 200 -> 10,000
    assert sum(p.numel() for p in model.parameters()) == 2_000_000 + 2 * (320_000 + 1_600) + 2_010_000
    (row,) = cfg["reference"]
    assert row["published_test_ppl"] == 114.5 and row["tolerance"] == 0.03
    ours = {"hidden_dim": hp["hidden_dim"], "layers": 2, "dropout": hp["dropout"], "tie_weights": hp["tie_weights"],
            "bptt": bptt, "epochs": len(rates), "output": "full"}
    assert published_setting(row, 0) == ours

    paper_wording = zaremba_rates({**hp, "lr_decay_from_epoch": 4})[0]
    assert paper_wording != rates
