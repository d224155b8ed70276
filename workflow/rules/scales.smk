# Scales (lmgrid.orchestration.scales): the config's `scales:` are other settings of the same experiment, each its own Snakemake
# run under corpus name <corpus>-<label>, which `make run` runs before this one (`lmgrid scales-run`). Here: the gate
# studies' answers of this config and of every scale, side by side. A scale whose results are not there yet (a bare
# `snakemake` or `make dry` before the scales ran) leaves the comparison out of this run, saying so in one line: its
# files are another run's outputs, which this run reads and never makes (its `scales_stamp`).
from lmgrid.orchestration.scales import OUTPUTS as SCALES_OUTPUTS
from lmgrid.orchestration.scales import SCALES_DIR, gate_effect_file, gate_studies, mtime_stamp, scales_of

try:
    SCALES = scales_of(_CLI_FILES, workflow.config_settings.config.get("set", "")) if config["scales"] else []
except LmgridError as _e:
    sys.exit(f"lmgrid: error: {_e}")

# (scale, study, gates_effect.csv) of this config's gate studies, then of each scale's.
SCALES_TABLES = ([(CORPUS, s, gate_effect_file(CORPUS, s)) for s in gate_studies(config)]
                 + [(s.corpus, g, gate_effect_file(s.corpus, g)) for s in SCALES for g in gate_studies(s.config)]
                 if SCALES else [])
_MISSING = [path for corpus, _, path in SCALES_TABLES if corpus != CORPUS and not os.path.exists(path)]
if _MISSING:
    print(f"lmgrid: the scales' comparison is left out of this run: {_MISSING[0]} is not there yet "
          f"(`make run` runs every scale first)", file=sys.stderr)
# A config with no gate study anywhere (e.g. a budget study, budget.smk) has no gate question to compare.
COMPARE_SCALES = bool(SCALES_TABLES) and not _MISSING


# The scales' gates_effect.csv are read, not declared as inputs (as budget.smk reads the scales' runs): declared, they
# are outputs of this run's own rules too (corpus=<corpus>-<label>), and Snakemake rebuilt them under this config's
# settings (raw_inputs names this config's folder), rewriting the scale's corpus, vocabulary and tables. Their state
# enters as a params stamp of their mtimes instead (mtime_stamp), so a rerun scale still reruns `scales`.
# The comparison's files, over the wildcard {corpus} (rule all expands them).
SCALES_FILES = [f"{SCALES_DIR}/gates.{e}" for e in SCALES_OUTPUTS] if COMPARE_SCALES else []


if COMPARE_SCALES:

    rule scales:
        localrule: local("scales")
        input:
            [path for corpus, _, path in SCALES_TABLES if corpus == CORPUS],
        output:
            csv=f"{SCALES_DIR}/gates.csv",
            md=f"{SCALES_DIR}/gates.md",
            html=report(f"{SCALES_DIR}/gates.html", caption="../report/scales.rst", category="Scales"),
        params:
            tables=" ".join(f"--table {shlex.quote(a)} {shlex.quote(b)} {shlex.quote(c)}" for a, b, c in SCALES_TABLES),
            stem=lambda w: f"{SCALES_DIR.format(corpus=w.corpus)}/gates",
            scales=" ".join(shlex.quote(f"--scale={c}={what}") for c, what in
                            [(CORPUS, f"this config ({' '.join(_CLI_FILES) or 'config.yaml'})")]
                            + [(s.corpus, f"scale '{s.label}' ({' '.join(s.configfiles)})") for s in SCALES]),
            scales_stamp=mtime_stamp((path,) for corpus, _, path in SCALES_TABLES if corpus != CORPUS),
        benchmark:
            "results/{corpus}/benchmarks/scales.tsv"
        log:
            "results/{corpus}/logs/scales.log",
        conda:
            ENV
        message:
            brief("{wildcards.corpus}: the gate question at every scale -> {output.md}")
        shell:
            "lmgrid scales-compare {params.tables} {params.scales} --out-stem {params.stem} > {log} 2>&1"
