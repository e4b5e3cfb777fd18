# One environment for everything: .venv, created on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/flowdesk

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check desktop_app tests benchmarks
	$(BIN)/mypy desktop_app

# The quick benchmarks (a few minutes); slow ones and their flags: benchmarks/README.md.
# Peers: $(BIN)/pip install -r benchmarks/requirements-peers.txt
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_steps.py
	$(BIN)/python benchmarks/bench_wal.py
	$(BIN)/python benchmarks/bench_cpu.py
	$(BIN)/python benchmarks/bench_scaling.py
	$(BIN)/python benchmarks/bench_recovery.py --runs 1000

clean:
	rm -rf $(VENV)
