# gpufabric — two commands do everything: `make demo` and `make test`. Each sets itself up.
SHELL := /bin/bash
PY    := $(shell command -v python3.11 || command -v python3)
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test ui bench lint system-deps kube tools clean-data help

help:
	@echo "make demo   simulate a 4-SU H100 SuperPOD (on a real Kubernetes control plane) and run every asset"
	@echo "make test   the whole suite (what .ci/run runs)"
	@echo "make ui     the Dagster UI on http://127.0.0.1:3000 against the same warehouse"
	@echo "make bench  benchmarks, each printing its ratio against a peer measured in the same run"
	@echo "make lint   ruff and mypy"
	@echo "make kube   build (or reuse) the pinned Kubernetes control plane binaries"

# The venv is rebuilt when the lock or the project metadata changes. --only-binary=:all: makes a
# package that would build (and download) at install time fail fast instead.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --only-binary=:all: -c constraints.txt -r requirements.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

# Debian packages the twins and tests need (snmp tools, lldpd, infiniband-diags, ...), listed in
# system-packages/*.txt; installed only when missing and only when we are root (CI and dev boxes).
system-deps:
	@bash scripts/system-deps.sh $(wildcard system-packages/*.txt)

# The real Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler, kubectl,
# Kueue) built from the Go module proxy at the versions in simulator/controlplane/versions.env, into
# ~/.cache/gpufabric/kube/<key>: about 35 min cold on 2 cores, a fraction of a second once cached.
kube: $(STAMP)
	$(BIN)/python -m simulator.controlplane build

# The demo's cluster is the real control plane (built by `kube`, started by `gpufabric sim up`).
demo: $(STAMP) kube
	$(BIN)/gpufabric demo

# Tools whose pins clash with ours get venvs of their own under ~/.cache/gpufabric/tools: the
# FinOps Foundation's focus-validator 1.0.0 (services/focus_validator.py), and NVIDIA's mig-parted
# v0.10.0 built from the Go module proxy (simulator/migparted.py); built once, then reused.
tools: $(STAMP)
	$(BIN)/python -c "from services.focus_validator import ensure_venv; print('focus-validator:', ensure_venv())"
	$(BIN)/python -m simulator.migparted

# Two workers: one runs every test that touches the session's Postgres, control plane and twins,
# in order; the other runs the unit modules beside it (tests/conftest.py, pytest_xdist_make_scheduler).
test: $(STAMP) system-deps kube tools
	$(BIN)/python -m pytest -q -n 2 --durations=25

ui: $(STAMP)
	$(BIN)/gpufabric ui

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

clean-data:
	-$(BIN)/gpufabric db stop
	rm -rf .data
