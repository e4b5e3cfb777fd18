# One environment for everything: .venv, created on first use.
# `make run` installs only what the app needs (PostgreSQL, OpenTelemetry and
# MCP are extras the app imports only when a setting asks for them);
# `make test` and the rest add the test extras. One stamp each, so `make run`
# after `make test` installs nothing and `make test` after `make run` adds
# only the test extras; editing pyproject.toml reinstalls both.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

# The published Node MCP servers the tests start (pinned in
# tests/mcp_servers/package-lock.json; the Python ones are in the test extra).
# Without npm or a registry the tests that need them skip, except under
# CI=true, where this target fails.
NODE_SERVERS := tests/mcp_servers
NODE_STAMP := $(NODE_SERVERS)/node_modules/.installed

.PHONY: run test test-servers test-model lint bench mutate clean

$(RUN_STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(TEST_STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

$(NODE_STAMP): $(NODE_SERVERS)/package-lock.json
	if command -v npm >/dev/null && npm ci --prefix $(NODE_SERVERS) --prefer-offline \
	    --no-audit --no-fund --loglevel=error; then touch $(NODE_STAMP); \
	elif [ "$$CI" = true ]; then echo "cannot install $(NODE_SERVERS) (npm ci)" >&2; exit 1; \
	else echo "warning: npm ci failed in $(NODE_SERVERS): its tests will skip" >&2; fi

test-servers: $(NODE_STAMP)

run: $(RUN_STAMP)
	$(BIN)/flowdesk

# Two pytest workers per CPU this process may use (on one CPU, as under
# taskset -c 0, none: the run stays in this process);
# TEST_JOBS=0 runs everything in this process.
# Under PYTHONDONTWRITEBYTECODE (set in some sandboxes and CI images) every
# process the suite starts would compile Flowdesk and the tests from source
# again (each worker's collection alone: ~20 s of CPU instead of ~5): the run
# writes bytecode as Python does by default (in __pycache__, ignored by git),
# which also lets every process read the bytecode pip wrote for the packages.
# Before the workers start, tools/warm_test_bytecode.py writes the tests'
# bytecode once on every CPU (in a fresh clone each worker would rewrite every
# test module's asserts itself, all at once).
TEST_JOBS ?= auto
TEST_BYTECODE := $(if $(PYTHONDONTWRITEBYTECODE),env -u PYTHONDONTWRITEBYTECODE)
test: $(TEST_STAMP) $(NODE_STAMP)
	$(TEST_BYTECODE) $(BIN)/python tools/warm_test_bytecode.py $(PYTEST_ARGS)
	$(TEST_BYTECODE) $(BIN)/python -m pytest -n $(TEST_JOBS) $(PYTEST_ARGS)

# The agent protocol against a real local model (not part of `test`): builds
# llama-cpp-python[server] for any x86-64 CPU with AVX2 (not just this one),
# starts its OpenAI-compatible server on 127.0.0.1 with the GGUF in MODEL
# (a small instruct model, e.g. a 0.5B one) and runs tests/test_real_model.py.
MODEL ?=
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
test-model:
	@if [ -z "$(MODEL)" ]; then \
	  echo "make test-model needs a small instruct GGUF model: make test-model MODEL=/path/to/model.gguf" >&2; \
	  exit 2; \
	fi
	@if [ ! -f "$(MODEL)" ]; then \
	  echo "make test-model: MODEL=$(MODEL) is not a file; give the path of a .gguf model" >&2; \
	  exit 2; \
	fi
	$(MAKE) --no-print-directory $(TEST_STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet -e '.[test,model]'
	FLOWDESK_TEST_MODEL="$(abspath $(MODEL))" $(BIN)/python -m pytest -n 0 \
	  tests/test_real_model.py -v $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check desktop_app tests benchmarks
	$(BIN)/mypy desktop_app

# The quick benchmarks (a few minutes); slow ones and their flags: benchmarks/README.md.
# Peers: $(BIN)/pip install -r benchmarks/requirements-peers.txt
bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/bench_steps.py
	$(BIN)/python benchmarks/bench_wal.py
	$(BIN)/python benchmarks/bench_cpu.py
	$(BIN)/python benchmarks/bench_scaling.py
	$(BIN)/python benchmarks/bench_recovery.py --runs 1000

# Mutation testing of desktop_app/flow, desktop_app/store and the agent runtime,
# one module at a time with its own test selection (slow: not part of `test`).
# MODULES=desktop_app/flow/retry.py limits the run; MUTATE_JOBS sets parallelism;
# MUTATE_ARGS=--survivors re-runs only the last run's survivors against the kill
# tests, MUTATE_ARGS=--summary prints the table of earlier runs
# (.mutation/summary.txt) without running anything.
MUTATE_JOBS ?= 2
MUTATE_ARGS ?=
# The PostgreSQL modules' tests share one throwaway server for the whole run
# (.ci/postgres.sh, unless FLOWDESK_TEST_PG_DSN names one): a fresh cluster per
# mutant made those runs about three times slower.
mutate: $(TEST_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,mutation]'
	if [ -n "$$FLOWDESK_TEST_PG_DSN" ]; then \
	  $(BIN)/python tools/mutate.py --jobs $(MUTATE_JOBS) $(MUTATE_ARGS) $(MODULES); \
	else \
	  bash -c 'source .ci/postgres.sh && "$$@"' mutate \
	    $(BIN)/python tools/mutate.py --jobs $(MUTATE_JOBS) $(MUTATE_ARGS) $(MODULES); \
	fi

clean:
	rm -rf $(VENV) $(NODE_SERVERS)/node_modules
