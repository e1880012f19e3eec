# One target per habit. `make run` and `make test` install everything they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
SAMVENV := .venv-sam
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-fast lint fmt build deploy bench deps deps-py deps-sam deps-node deps-java deps-chromium clean glue-local

# the three installs are independent (their own venvs, node_modules): in parallel they take
# as long as the longest (~100 s from a clean clone instead of ~170 s); the apt ones in turn
deps:
	@$(MAKE) --no-print-directory -j3 --output-sync=target deps-py deps-sam deps-node
	@$(MAKE) --no-print-directory deps-java deps-chromium

$(VENV)/.stamp: requirements.txt requirements-dev.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-deps -e .
	touch $@

deps-py: $(VENV)/.stamp

$(SAMVENV)/.stamp: requirements-sam.txt
	test -x $(SAMVENV)/bin/python || $(PYTHON) -m venv $(SAMVENV)
	$(SAMVENV)/bin/pip install -q --upgrade pip
	$(SAMVENV)/bin/pip install -q -r requirements-sam.txt
	touch $@

deps-sam: $(SAMVENV)/.stamp

# `npm ci`: exactly what package-lock.json says, never a rewrite of it (a clean clone stays
# clean); it fails when package.json and the lock disagree
node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

deps-node: node_modules/.stamp

deps-java:
	@command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }

# Debian's Chromium for the console's browser tests (tests/e2e/test_console.py drives it with
# Playwright's executable_path; Playwright's own browser download is never used).
deps-chromium:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

run: deps-py
	$(PY) -m headwater.dev.server

# Three phases: the in-process tiers (and glue, infra) and the e2e files not marked `serial`
# spread over $(TEST_WORKERS) pytest-xdist workers, one test file per worker at a time (the
# slowest folders first, so no worker is left with a long file at the end); then the
# `serial` e2e runs (fault and kill -9 runs, stress runs, the benchmark smoke runs), two
# files at a time: they check histories, not timings, and spend much of their time waiting
# out injected faults; last the `alone` runs (the conformance suite, whose TTL tests race
# 1-2 s clocks, and the header-deadline and pacing checks) one at a time.
TEST_WORKERS ?= 2
test: deps
	@# byte-compile once: with PYTHONDONTWRITEBYTECODE set, each of the hundreds of server and
	@# client processes would otherwise recompile the package (~0.5 s apiece)
	$(PY) -m compileall -q -j 2 layers/headwater bench functions glue_jobs tests/faults tests/e2e
	PATH="$(CURDIR)/$(SAMVENV)/bin:$$PATH" $(PY) -m pytest -q -p no:randomly -n $(TEST_WORKERS) --dist loadfile tests/glue tests/infra tests/e2e tests/api tests/adapters tests/unit -m "not serial" $(PYTEST_ARGS)
	PATH="$(CURDIR)/$(SAMVENV)/bin:$$PATH" $(PY) -m pytest -q -p no:randomly -n $(TEST_WORKERS) --dist loadfile tests/e2e -m "serial and not alone" $(PYTEST_ARGS)
	PATH="$(CURDIR)/$(SAMVENV)/bin:$$PATH" $(PY) -m pytest -q -p no:randomly tests/e2e -m alone $(PYTEST_ARGS)

test-fast: deps-py
	$(PY) -m pytest -q -m "unit or api" $(PYTEST_ARGS)

lint: deps-py
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	PYTHONPATH=layers/headwater:clients/python $(VENV)/bin/lint-imports --no-cache

fmt: deps-py
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# sam build needs a real python3.13 (the Lambda runtime) first on PATH; with pyenv, pick
# its newest 3.13 (a bare pyenv shim does not resolve under this project's 3.11 pin).
build: deps-sam
	@py=$$(PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.13\.[0-9]+$$' | tail -1) \
	       python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null); \
	test -n "$$py" || { echo "sam build needs python3.13 (pyenv install 3.13, or apt)"; exit 1; }; \
	echo "sam build with $$py"; \
	PATH="$$(dirname $$py):$$PATH" SAM_CLI_TELEMETRY=0 \
	  $(SAMVENV)/bin/sam build --template template.yaml --build-dir .aws-sam/build

# The rollup Glue job (glue_jobs/) on a local Spark against the emulator of a running
# `make run`: start both with the same HEADWATER_EMULATOR_PORT, or pass GLUE_ENDPOINT (the
# URL `make run` logs as "embedded AWS emulator (moto) on ..."). glue_jobs/README.md.
GLUE_ENDPOINT ?= $(if $(HEADWATER_EMULATOR_PORT),http://127.0.0.1:$(HEADWATER_EMULATOR_PORT),$(AWS_ENDPOINT_URL))
GLUE_PREFIX ?= $(or $(HEADWATER_RESOURCE_PREFIX),headwater-dev)
GLUE_BUCKET ?= $(or $(HEADWATER_BUCKET),$(GLUE_PREFIX)-data)
glue-local: deps-py deps-java
	@test -n "$(GLUE_ENDPOINT)" || { echo "set HEADWATER_EMULATOR_PORT (as for make run) or GLUE_ENDPOINT=http://127.0.0.1:<port>"; exit 2; }
	AWS_ACCESS_KEY_ID=$${AWS_ACCESS_KEY_ID:-testing} AWS_SECRET_ACCESS_KEY=$${AWS_SECRET_ACCESS_KEY:-testing} \
	  AWS_REGION=$${AWS_REGION:-us-east-1} \
	  $(PY) glue_jobs/rollup_job.py --bucket $(GLUE_BUCKET) --resource-prefix $(GLUE_PREFIX) --endpoint-url $(GLUE_ENDPOINT) --sentiment-topics sentiment $(GLUE_ARGS)

# sam deploy (samconfig.toml's default environment). Nothing follows it: the stack's
# GlueLibrary custom resource uploads the Glue jobs' library zip itself.
STACK ?= headwater-dev
deploy: build deps-py
	$(SAMVENV)/bin/sam deploy --stack-name $(STACK)

bench: deps
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) $(SAMVENV) node_modules .aws-sam
