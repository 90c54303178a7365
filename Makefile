# graphssl — two commands: `make run` (the default experiment) and `make test` (the test suite).
# Both create .venv if missing and install the package (editable) with its dev extra, offline,
# at the tested versions of constraints.txt.
# More extras on top: `make install EXTRAS=ray` (comma-separated, e.g. EXTRAS=ray,molecules).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=
EXTRAS ?=
# the tested versions (pyproject.toml declares ranges); `make install CONSTRAINTS=` lets pip choose
CONSTRAINTS ?= constraints.txt
# pytest workers for make test / test-fast: one per core, at most 4 (each holds torch, ~1 GB);
# files are the unit of distribution, so a module's fixtures (a SLURM cluster, a trained model)
# are built once. TEST_JOBS=0 runs the suite in this process.
# (nproc itself honours OMP_NUM_THREADS, which CI sets to 1 for the processes tests start: the
# cores are counted without it)
TEST_JOBS ?= $(shell n=$$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1); \
  [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST_PAR := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

empty  :=
space  := $(empty) $(empty)
comma  := ,
EXTRAS_LIST := $(strip $(subst $(comma),$(space),$(EXTRAS)))
PIP_EXTRAS  := $(subst $(space),$(comma),$(strip dev $(EXTRAS_LIST)))
# one stamp per set of extras: `make test` after `make install EXTRAS=ray` keeps Ray installed
STAMP := $(BIN)/.installed$(subst $(space),,$(addprefix -,$(EXTRAS_LIST)))

# Real datasets: ../shared/data when present and GRAPHSSL_DATA_DIR is unset.
ifeq ($(origin GRAPHSSL_DATA_DIR), undefined)
  ifneq ($(wildcard ../shared/data),)
    export GRAPHSSL_DATA_DIR := $(abspath ../shared/data)
  endif
endif

.PHONY: install run test test-fast lint format clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
	  $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[$(PIP_EXTRAS)]'
	@touch $@

## install: .venv with the package and its dev extra (plus EXTRAS, e.g. EXTRAS=ray)
install: $(STAMP)

## run: train the default experiment (DGI on Cora), evaluate it and log it to outputs/mlflow.db
run: install
	$(BIN)/graphssl $(ARGS)

## test: the whole offline test suite (docs/testing.md: the layers, and what stays a process)
test: install
	$(BIN)/python -m pytest $(PYTEST_PAR) $(ARGS)

## test-fast: skip tests marked slow (every graphssl process and the long trainings)
test-fast: install
	$(BIN)/python -m pytest $(PYTEST_PAR) -m "not slow" $(ARGS)

## lint: ruff (lint + format check) and mypy
lint: install
	$(BIN)/ruff check graphssl tests benchmarks scripts
	$(BIN)/ruff format --check graphssl tests benchmarks scripts
	$(BIN)/mypy graphssl

format: install
	$(BIN)/ruff format graphssl tests benchmarks scripts
	$(BIN)/ruff check --fix graphssl tests benchmarks scripts

clean:
	rm -rf outputs .pytest_cache .mypy_cache .ruff_cache
