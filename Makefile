# Two commands do all setup: `make run` and `make test`. Both create .venv when it is missing.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
TSTAMP  := $(VENV)/.installed-test-stamp
CORES   ?= all
SMK     := $(VENV)/bin/snakemake
# CONFIG: a config file applied over config.yaml (e.g. a preset); SET: overrides, YAML-typed, each replacing the
# node it names, e.g.  make run SET="train.epochs=5 studies={ctx: {arch: [mkn], n_step: [2, 3]}}"
# (docs/configuration.md). SET reaches Snakemake as one argument, unchanged ("$$SET"); lmgrid.orchestration.config splits it into
# assignments at blanks outside quotes and outside {...} / [...] values.
CONFIG  ?=
SET     ?=
export SET
SMKCFG  := $(if $(CONFIG),--configfile $(CONFIG)) $(if $(SET),--config set="$$SET")
export PATH := $(abspath $(VENV))/bin:$(PATH)
# The venv's processes write the bytecode of what they import, once, even where the machine sets
# PYTHONDONTWRITEBYTECODE: the install compiles none (tools/uv_pip.py), so without this every process would compile
# torch, Lightning, MLflow and Snakemake again.
export PYTHONDONTWRITEBYTECODE :=
# The terminal of `make run` is one screen: lmgrid's logger plugin (lmgrid.orchestration.terminal) redraws jobs
# done / running / pending, each training job's epoch and valid PPL, and the results table; in a pipe or a CI log
# one line per finished job and the table. VERBOSE=1 shows Snakemake's full job blocks with their reasons and shell
# commands instead (no plugin).
VERBOSE ?=
export LMGRID_VERBOSE := $(if $(VERBOSE),1,0)
SMKOUT  := $(if $(VERBOSE),--quiet host --printshellcmds,--logger lmgrid)
DRYOUT  := $(if $(VERBOSE),--quiet host,--quiet rules host)

.PHONY: screenshots setup run dry unlock test test-full test-avx2 report lint clean status plan report-check browser mlflow docs kenlm

# requirements.lock pins the whole runtime environment; the test tools (pytest, kenlm, which
# compiles for about a minute) come only with `make test`.
# uv (pinned: UV_PIN, into $(VENV)/.uv, outside the environment's own packages) installs the same pins several times
# faster than pip: it downloads, unpacks and compiles in parallel. It reads no pip.conf, so tools/uv_pip.py hands it
# pip's configuration (indexes, local wheel folders such as one with torch's +cpu wheel, constraints) and pip's
# bytecode compiling: both install the same builds. Where uv cannot be installed or fails, pip installs, as before.
# The installers' output goes to $(PIPLOG) and is shown only when an install fails.
UV_PIN  := 0.13.8
UV      := $(VENV)/.uv/bin/uv
PIPLOG  := $(VENV)/pip-install.log
PIP     = $(PY) -m pip install --disable-pip-version-check $(1) >> $(PIPLOG) 2>&1 \
	|| { cat $(PIPLOG); echo "pip install $(1) failed; its output above and in $(PIPLOG)"; exit 1; }
INSTALL = @if test -x $(UV) && $(PY) tools/uv_pip.py $(UV) $(PY) $(1) >> $(PIPLOG) 2>&1; then :; else \
	{ test ! -x $(UV) || echo "uv did not install $(1) (its output in $(PIPLOG)); pip installs it"; }; \
	$(PIP); fi

$(STAMP): pyproject.toml requirements.lock
	@test -x $(PY) || python3 -m venv $(VENV)
	@: > $(PIPLOG)
	@test -x $(UV) || $(PY) -m pip install --disable-pip-version-check --target $(VENV)/.uv uv==$(UV_PIN) \
		>> $(PIPLOG) 2>&1 || echo "uv $(UV_PIN) could not be installed (see $(PIPLOG)); pip installs instead, slower"
	$(call INSTALL,-r requirements.lock)
	$(call INSTALL,--no-deps -e .)
	@touch $(STAMP)

$(TSTAMP): $(STAMP) requirements-test.lock
	$(call INSTALL,-r requirements-test.lock)
	@touch $(TSTAMP)

setup: $(STAMP)

## run the whole pipeline on config.yaml (the embedded synthetic corpus by default), then the HTML report
## (VERBOSE=1: Snakemake's full job blocks); ends with the report's path and the headline table. A config with
## `scales:` (presets/course_report.yaml) runs each scale first, each its own Snakemake run (lmgrid.orchestration.scales)
run: $(STAMP)
	$(PY) -m lmgrid scales-run $(if $(CONFIG),--configfile $(CONFIG)) -- $(SMK) --cores $(CORES) $(SMKOUT)
	LMGRID_REPORT=0 $(SMK) --cores $(CORES) $(SMKCFG) $(SMKOUT)
	$(PY) -m lmgrid.orchestration.report_run $(SMK) --cores 1 $(SMKCFG) --report results/report_workflow.html

## the README's screenshots from a real run of `make run` (same CONFIG/SET/CORES; results/ as make run): the terminal
## in a 110x34 tmux pane at half the jobs and at the end, and the report's first view at 1280x900, as
## docs/img/{terminal_running,terminal_done,report_first_view}.png, each with a .json naming the run, commit and
## machine (lmgrid.orchestration.screenshots). Installs nothing: needs the venv, tmux and Chromium (make browser)
screenshots:
	@test -x $(PY) || { echo "make screenshots: no $(PY): make setup first"; exit 2; }
	$(PY) -m lmgrid.orchestration.screenshots --snakemake $(SMK) --cores $(CORES) $(if $(CONFIG),--configfile $(CONFIG)) --set "$$SET"

## what `make run` would run (same CONFIG/SET, same arguments), without running anything: the jobs per rule and
## why they would run, in a screenful (VERBOSE=1: every job with its reason)
dry: $(STAMP)
	$(PY) -m lmgrid scales-run $(if $(CONFIG),--configfile $(CONFIG)) -- $(SMK) --dry-run --cores $(CORES) $(DRYOUT)
	$(SMK) --dry-run --cores $(CORES) $(SMKCFG) $(DRYOUT)

## after `make run` was killed with -9 (or the machine lost power): Snakemake's lock on the folder stays and the next
## run refuses to start. Make sure no other run uses this folder, then `make unlock` and `make run` again
unlock: $(STAMP)
	$(SMK) --unlock --cores 1 $(SMKCFG)

## every grid cell of the config: done, running (epoch, valid PPL, ETA), failed or pending; time spent and left
status: $(STAMP)
	$(PY) -m lmgrid status $(if $(CONFIG),--configfile $(CONFIG)) $(if $(SET),--set "$$SET") $(if $(filter-out all,$(CORES)),--cores $(CORES))

## before a run: the cells each study adds and roughly what they cost
plan: $(STAMP)
	$(PY) -m lmgrid plan $(if $(CONFIG),--configfile $(CONFIG)) $(if $(SET),--set "$$SET") $(if $(filter-out all,$(CORES)),--cores $(CORES))

# The tests run in TEST_JOBS worker processes (pytest-xdist): one per core the machine gives this process, at most 4
# (each worker imports torch; the workflow tests each run Snakemake on 2 cores). --dist loadfile keeps a file's tests
# in one worker, in their order, so a module's shared work folder (the PTB presets' smoke_workdir) is made once.
# TEST_JOBS=0 runs them in this process, one after another (pdb, print debugging).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
XDIST   := -n $(TEST_JOBS) $(if $(filter 0,$(TEST_JOBS)),,--dist loadfile)
# $(call timed_pytest,WHAT,ARGS): pytest ARGS, then one line with WHAT's wall time and pytest's exit status
timed_pytest = @start=$$(date +%s); $(PY) -m pytest $(2); rc=$$?; \
	echo "$(1) took $$(( $$(date +%s) - start )) s (exit $$rc)"; exit $$rc

## the fast tier: unit and component tests that start no Snakemake, read no Penn Treebank and start no server
## (tests/tiers.py; at most 10 minutes on a 2-core AVX2-only CPU). Ends with its wall time.
test: $(TSTAMP)
	$(call timed_pytest,make test: the fast tier,-m "not full" $(XDIST))

## every test: the fast tier, the workflow on the shared tiny grid, the PTB presets on their CI cut (they run when
## LMGRID_PTB_DIR points at the Penn Treebank), the MLflow server, the report in a browser where Chromium is
## installed (make browser). Ends with its wall time.
test-full: $(TSTAMP)
	$(call timed_pytest,make test-full: every test,--durations=30 $(XDIST))

## the HTML report in a real browser: installs Chromium from the Debian packages when missing (as root), then
## fails on a console error, a page error, an image that does not decode, a first screen without the whole summary
## table, a PDF of more than one page (tests/test_workflow.py -k report, tests/test_report_page.py)
report-check: $(TSTAMP) browser
	LMGRID_REQUIRE_BROWSER=1 $(PY) -m pytest -q tests/test_workflow.py tests/test_report_page.py -k report

## Chromium for the report's browser check, from the Debian packages when missing (as root; the package lists
## are fetched first where a fresh machine has none)
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && { apt-get install -y -q chromium >/dev/null 2>&1 \
		|| { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } \
		|| echo "browser: no chromium and not root: apt-get install chromium"

## KenLM's estimator and scorer, lmplz and query, built into $(VENV)/bin when missing (or of another version) from the
## kenlm source distribution that requirements-test.lock pins (tools/build_kenlm.sh: Debian's cmake, boost and
## compression headers installed first when missing, as root; about a minute of CPU). The tests that compare our
## n-grams with lmplz's (tests/test_ngram_kenlm.py) find them there; .ci/run requires them.
KENLM_PIN := $(shell sed -n 's/^kenlm==//p' requirements-test.lock)
kenlm: $(STAMP)
	@test -x $(VENV)/bin/lmplz && test -x $(VENV)/bin/query && [ "$$(cat $(VENV)/.kenlm-version 2>/dev/null)" = "$(KENLM_PIN)" ] \
		|| { tools/build_kenlm.sh $(PY) $(KENLM_PIN) $(VENV)/bin 2 && echo $(KENLM_PIN) > $(VENV)/.kenlm-version; }

## the precision and model tests again as an AVX2-only x86 CPU (no AVX-512, no bf16), on any x86 machine: oneDNN
## capped at AVX2 (no bf16 kernels), ATen's kernels at AVX2, and lmgrid told the CPU's flags (README, "Precision")
## (the flags are listed once, in lmgrid.neural.precision.AVX2_FLAGS; read with the standard library only, and
## only when the target runs)
AVX2_FLAGS = $(shell PYTHONPATH=src python3 -c 'from lmgrid.neural.precision import AVX2_FLAGS; print(*AVX2_FLAGS)')
test-avx2: $(TSTAMP)
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 LMGRID_CPU_FLAGS="$(AVX2_FLAGS)" \
		$(PY) -m pytest -q tests/test_models.py tests/test_precision.py

## the MLflow UI on this clone's stores (results/mlflow.db, results/mlartifacts) at http://127.0.0.1:$(MLFLOW_PORT);
## first prints the address that opens each experiment on its training runs, valid and test PPL shown, sorted by
## valid PPL (MLflow's UI opens on its GenAI view otherwise; docs/results.md, "MLflow")
MLFLOW_PORT ?= 5000
mlflow: $(STAMP)
	@test -f results/mlflow.db || { echo "make mlflow: no results/mlflow.db yet: run make run first"; exit 2; }
	@$(PY) -m lmgrid.tracking.view --tracking-uri sqlite:///results/mlflow.db --base http://127.0.0.1:$(MLFLOW_PORT)
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///results/mlflow.db --artifacts-destination results/mlartifacts \
		--host 127.0.0.1 --port $(MLFLOW_PORT)

lint: $(STAMP)
	$(SMK) --lint

## README.md's and docs/'s marked tables and figures rewritten from their snapshots (docs/results/<name>/; after a run:
## $(PY) -m lmgrid docs --from results/<corpus> --snapshot docs/results/<name> first). The fast tier checks them
docs: $(STAMP)
	$(PY) -m lmgrid docs --render

clean:
	rm -rf results .snakemake

## benchmarks print measured figures: make bench-ngram, bench-lstm, bench-cells, bench-startup, bench-archs, bench-vs-plain, bench-cores
bench-%: $(STAMP)
	$(PY) -m lmgrid.bench $*

## a new user's first run, timed (tools/first_run.py): the README's `make setup` and `make run` on a fresh clone of
## HEAD beside this one, with empty uv and pip caches; prints both times, their sum and the CPU (FIRST_RUN_ARGS:
## --keep, --json PATH, --parent DIR, --snapshot docs/results/<name>; --avx2-emulation SHARE: as an AVX2-only CPU would,
## by emulation, as root: the kernels capped at AVX2 and each core at SHARE of its time by a cgroup CPU quota, SHARE
## from docs/benchmarks.md's calibration, not with --snapshot). Installs nothing here, so it needs no venv
FIRST_RUN_ARGS ?=
.PHONY: first-run
first-run:
	python3 tools/first_run.py $(FIRST_RUN_ARGS)

## the share of each core's time for first-run's --avx2-emulation (tools/avx2_calibration.py): the one default run
## timed on a real AVX2-only CPU (issue 46's), its commit cloned and timed here with the kernels capped at AVX2;
## writes docs/results/avx2_calibration/ for make docs. About 10 minutes; run it on an idle machine. No venv needed
.PHONY: avx2-calibration
avx2-calibration:
	python3 tools/avx2_calibration.py --out docs/results/avx2_calibration $(AVX2_CALIBRATION_ARGS)

## the prepared check of the GPU path on a single-GPU machine, at most 10 min (tools/gpu_check.py, docs/gpu/README.md):
## the GPU, the GPU tests, the medium PTB cell in bf16 and fp32, one run of every arch, resume after SIGKILL, the warm
## server and the device in a cell's identity. Needs no venv, Snakemake, MLflow or jsonschema: GPU_PY is the
## Python that has torch (python3 on the GPU machine). Log and JSON in $OUT, else results/gpu-check
GPU_PY ?= python3
GPU_CHECK_ARGS ?=
.PHONY: gpu-check gpu-check-dry
gpu-check:
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) tools/gpu_check.py $(GPU_CHECK_ARGS)

## the same check on a CPU, up to where it would use the GPU (.ci/run): config, PTB, imports, the tests collected
gpu-check-dry: $(TSTAMP)
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PY) tools/gpu_check.py --dry $(GPU_CHECK_ARGS)

## the pipeline on a real single-node SLURM through profiles/slurm (docs/cluster.md). As root it
## installs the Debian packages when missing and starts daemons on loopback, stopping them at the end;
## without root it skips with the reason.
.PHONY: test-cluster
test-cluster: $(TSTAMP)
	timeout --kill-after=60 1800 tests/cluster/with_slurm.sh $(PY) -m pytest -v -s tests/cluster
