# rocketmq-filter-replay — every target works from a fresh clone (Python 3.11, Java 17 and Maven on PATH).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
JARS := .cache/jars
DIST := dist

.DEFAULT_GOAL := help
.PHONY: help setup test demo bench dist lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-7s %s\n", $$1, $$2}'

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: setup.cfg pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(JARS)/.fetched: jars/pom.xml
	@command -v mvn >/dev/null || { echo "need Maven (mvn) on PATH to fetch the Delta jars"; exit 1; }
	mvn -q -B -f jars/pom.xml dependency:copy-dependencies
	touch $@

setup: $(VENV)/.installed $(JARS)/.fetched ## virtualenv, pip install -e .[dev], Delta jars (idempotent)

test: setup ## run the whole test suite (builds the Java reference harness once; Hypothesis derandomized)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest $(PYTEST_ARGS)

demo: setup ## (not yet) the replay jobs on the bundled sample dump; says so plainly until the jobs exist
	@echo "make demo: the replay jobs (jobs.build_queues, jobs.simulate_pull) are not built yet, so there is"
	@echo "nothing to run on a sample dump. Setup is done: the virtualenv, the Python packages and the Delta jars"
	@echo "are installed. What works today: 'make test' (filter semantics and store codec checked against the real"
	@echo "RocketMQ 5.3.3 jars) and 'make bench'."

bench: setup ## print the benchmarks (ratios against baselines measured in the same run)
	$(PY) -m bench

lint: setup ## ruff over the Python sources
	$(VENV)/bin/ruff check filterlib jobs tests bench

dist: setup ## wheel, --py-files zip, and a packed virtualenv for --archives
	rm -rf $(DIST) build/dist-venv && mkdir -p $(DIST)
	$(PY) -m build --wheel --outdir $(DIST) .
	$(PY) -c "import zipfile, pathlib; z = zipfile.ZipFile('$(DIST)/rocketmq_filter_replay.zip', 'w', zipfile.ZIP_DEFLATED); [z.write(p) for d in ('filterlib', 'jobs') for p in sorted(pathlib.Path(d).rglob('*.py'))]"
	$(PYTHON) -m venv build/dist-venv
	build/dist-venv/bin/python -m pip install -q --upgrade pip
	build/dist-venv/bin/python -m pip install -q $(DIST)/*.whl venv-pack
	build/dist-venv/bin/venv-pack -q -p build/dist-venv -o $(DIST)/pyspark_venv.tar.gz
	@echo "built: $$(ls $(DIST))"

clean: ## remove build outputs and caches (keeps .venv)
	rm -rf build $(DIST) .cache/refharness tests/reference/target .pytest_cache
