# Two commands do all setup: `make run` and `make test`. Both create .venv when it is missing.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
TSTAMP  := $(VENV)/.installed-test-stamp
CORES   ?= all
SMK     := $(VENV)/bin/snakemake
# CONFIG: a config file applied over config.yaml (e.g. a preset); SET: overrides, YAML-typed, each replacing the
# node it names, e.g.  make run SET="train.epochs=5 studies={ctx: {arch: [mkn], n_step: [2, 3]}}"
# (docs/configuration.md). SET reaches Snakemake as one argument, unchanged ("$$SET"); lmgrid.config splits it into
# assignments at blanks outside quotes and outside {...} / [...] values.
CONFIG  ?=
SET     ?=
export SET
SMKCFG  := $(if $(CONFIG),--configfile $(CONFIG)) $(if $(SET),--config set="$$SET")
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup run dry test test-all report lint clean status plan report-check mlflow

# requirements.lock pins the whole runtime environment; the test tools (pytest, kenlm, which
# compiles for about a minute) come only with `make test`.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

$(TSTAMP): $(STAMP) requirements-test.lock
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-test.lock
	touch $(TSTAMP)

setup: $(STAMP)

## run the whole pipeline on config.yaml (the embedded synthetic corpus by default), then the HTML report
run: $(STAMP)
	LMGRID_REPORT=0 $(SMK) --cores $(CORES) $(SMKCFG)
	$(PY) -m lmgrid.report --timed $(SMK) --cores 1 $(SMKCFG) --report results/report.html

## what `make run` would run (same CONFIG/SET, same arguments), without running anything: Snakemake's dry run
dry: $(STAMP)
	$(SMK) --dry-run --cores $(CORES) $(SMKCFG)

## every grid cell of the config: done, running (epoch, valid PPL, ETA), failed or pending; time spent and left
status: $(STAMP)
	$(PY) -m lmgrid status $(if $(CONFIG),--configfile $(CONFIG)) $(if $(SET),--set "$$SET") $(if $(filter-out all,$(CORES)),--cores $(CORES))

## before a run: the cells each study adds and roughly what they cost
plan: $(STAMP)
	$(PY) -m lmgrid plan $(if $(CONFIG),--configfile $(CONFIG)) $(if $(SET),--set "$$SET") $(if $(filter-out all,$(CORES)),--cores $(CORES))

## the test suite; PTB tests run when LMGRID_PTB_DIR points at the Penn Treebank
test: $(TSTAMP)
	$(PY) -m pytest

## the HTML report in a real browser: installs Chromium from the Debian packages when missing (as root), then
## fails on a console error, a page error, an image that does not decode (tests/test_workflow.py -k report)
report-check: $(TSTAMP)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q chromium >/dev/null; } \
		|| echo "report-check: no chromium and not root: apt-get install chromium"
	LMGRID_REQUIRE_BROWSER=1 $(PY) -m pytest -q tests/test_workflow.py -k report

## the MLflow UI on this clone's stores (results/mlflow.db, results/mlartifacts) at http://127.0.0.1:$(MLFLOW_PORT)
MLFLOW_PORT ?= 5000
mlflow: $(STAMP)
	@test -f results/mlflow.db || { echo "make mlflow: no results/mlflow.db yet: run make run first"; exit 2; }
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///results/mlflow.db --artifacts-destination results/mlartifacts \
		--host 127.0.0.1 --port $(MLFLOW_PORT)

lint: $(STAMP)
	$(SMK) --lint

clean:
	rm -rf results .snakemake

## benchmarks print measured figures: make bench-ngram, bench-lstm, bench-cells, bench-startup, bench-archs, bench-vs-plain, bench-cores
bench-%: $(STAMP)
	$(PY) -m lmgrid.bench $*

## the pipeline on a real single-node SLURM through profiles/slurm (docs/cluster.md). As root it
## installs the Debian packages when missing and starts daemons on loopback, stopping them at the end;
## without root it skips with the reason.
.PHONY: test-cluster
test-cluster: $(TSTAMP)
	timeout --kill-after=60 1800 tests/cluster/with_slurm.sh $(PY) -m pytest -v -s tests/cluster
