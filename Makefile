# Every target does its own set-up, so both work on a fresh machine with only Python 3.11 and pip.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck contracts unit bench e2e clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The embedded control plane with the built-in demo fleet, in the foreground until Ctrl-C.
# RUN_ARGS passes options on, e.g. `make run RUN_ARGS="--time-scale 60 --port 9000"`.
run: $(STAMP)
	$(BIN)/gpufleet up --demo $(RUN_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	@scripts/ensure-prometheus.sh
	@scripts/ensure-chromium.sh
	$(BIN)/pytest -m "not k8s"

test: lint typecheck contracts unit

bench: $(STAMP)
	$(BIN)/gpufleet bench fgd --trace default --policy all --seeds 10 --plot benchmarks/fgd-default.png
	$(BIN)/gpufleet bench throughput --nodes 5000 --gpus-per-node 8

# KUBECONFIG names the cluster; the federation tests take GPUFLEET_E2E_MANAGER, GPUFLEET_E2E_WORKERS
# (two kubeconfigs, comma-separated), GPUFLEET_E2E_STOP_WORKER and GPUFLEET_E2E_STOP_MANAGER instead
# (README, "The e2e suite").
e2e: $(STAMP)
	$(BIN)/pytest -m k8s

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
