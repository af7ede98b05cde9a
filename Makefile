# One command each: `make test` (set up + the test suite, as CI runs it) and
# `make tune` (set up + re-tune this repo's stale logs on this machine's CPU).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test tune check bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest
	$(VENV)/bin/tvmtune-ci check

tune: $(VENV)/.installed
	$(VENV)/bin/tvmtune-ci retune

check: $(VENV)/.installed
	$(VENV)/bin/tvmtune-ci status
	$(VENV)/bin/tvmtune-ci check

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_check.py
	$(PY) benchmarks/bench_tuner.py
