# One target per habit. `make run` and `make test` install everything they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
SAMVENV := .venv-sam
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-fast lint fmt build bench deps deps-py deps-sam deps-node deps-java clean

deps: deps-py deps-sam deps-node deps-java

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

node_modules/.stamp: package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

deps-node: node_modules/.stamp

deps-java:
	@command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }

run: deps-py
	$(PY) -m headwater.dev.server

test: deps
	PATH="$(CURDIR)/$(SAMVENV)/bin:$$PATH" $(PY) -m pytest -q -p no:randomly $(PYTEST_ARGS)

test-fast: deps-py
	$(PY) -m pytest -q -m "unit or api" $(PYTEST_ARGS)

lint: deps-py
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: deps-py
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

build: deps-sam
	@command -v python3.12 >/dev/null || { echo "sam build needs python3.12 on PATH"; exit 1; }
	$(SAMVENV)/bin/sam build --template template.yaml --build-dir .aws-sam/build

bench: deps
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) $(SAMVENV) node_modules .aws-sam
