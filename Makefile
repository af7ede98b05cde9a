# One command each: `make test` (set up + the test suite, as CI runs it),
# `make demo` (set up + the whole re-tune job on this machine's CPU, in a scratch
# copy) and `make tune` (set up + re-tune this repo's stale logs).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test test-slow tune demo check bench cross-toolchain cuda

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cuda,onnx]'
	touch $@

# The aarch64 cross compiler: links kernels of an aarch64 target (e.g. an Arm board
# behind an RPC tracker) on this x86 machine. The tests that need it are marked
# `tool` and skip, saying so, without it; .ci/run runs `make test` with it hidden,
# then installs it and runs those tests (`pytest -m tool`).
cross-toolchain:
	@command -v aarch64-linux-gnu-gcc >/dev/null || \
	  { command -v apt-get >/dev/null && apt-get install -y -q gcc-aarch64-linux-gnu; } || \
	  { echo "install an aarch64 cross gcc (Debian/Ubuntu: apt-get install gcc-aarch64-linux-gnu)"; exit 1; }

# The [cuda] extra (NVRTC and the CUDA headers from PyPI, Linux) is in the venv `make
# test` builds: the GPU templates compile to cubins for sm_80 and sm_90a on this CPU-only
# machine (no GPU needed). Its tests are marked `extra` and skip, saying so, where it
# is not installed. `make cuda` runs just them.
cuda: $(VENV)/.installed
	$(PY) -m pytest -m extra

# The linter and the formatter (ruff) and the type checker (mypy), configured in pyproject.toml and
# run by .pre-commit-config.yaml too, the suite without the tests marked
# `slow` (they tune for longer: warm stop rules, budgets, run histories, races), then
# `check`: main never carries stale logs.
# .ci/run runs the slow ones after it (`make test-slow`).
test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -m "not slow"
	$(VENV)/bin/tvmtune-ci check

test-slow: $(VENV)/.installed
	$(PY) -m pytest -m slow

tune: $(VENV)/.installed
	$(VENV)/bin/tvmtune-ci retune

demo: $(VENV)/.installed
	$(PY) scripts/demo.py

check: $(VENV)/.installed
	$(VENV)/bin/tvmtune-ci status
	$(VENV)/bin/tvmtune-ci check

bench: $(VENV)/.installed
	$(PY) -m benchmarks.bench_check
	$(PY) -m benchmarks.bench_tuner
