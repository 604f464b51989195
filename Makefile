# Set-up and main jobs. Each target creates its own virtual environment in .venv if it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench experiments mutate clean venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[torch,test]"
	touch $(STAMP)

venv: $(STAMP)

## demo: inspect and plan the bundled MoE model on the default hardware profile (writes out/plan.json, .gantt.png, .trace.json)
demo: $(STAMP)
	$(BIN)/plan-inspect
	$(BIN)/plan-solve --out out/plan.json

## test: the fast test suite (slow and gpu tests are opt-in markers)
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2

## lint: ruff's checks (pyflakes, pycodestyle, import order, bugbear, pyupgrade) and mypy (settings in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## bench: speed and quality measurements, written to CSV under bench/results/
bench: $(STAMP)
	$(BIN)/python -m experiments.bench

## experiments: every experiments/study_*.py in its quick mode (< 20 min; FULL=1 for the full mode), CSV then PNG
## under experiments/results/<study>/
experiments: $(STAMP)
	$(BIN)/python -m experiments.run_studies $(if $(FULL),--full)

## mutate: mutation testing of the core modules (about 30 min; not part of test/CI); MODULE=validate runs one
mutate: $(STAMP)
	$(BIN)/python -m experiments.mutation.run $(if $(MODULE),--module $(MODULE))
	$(BIN)/python -m experiments.readme_results mutation

clean:
	rm -rf $(VENV) build *.egg-info
