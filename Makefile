# rocketmq-filter-replay — every target works from a fresh clone (Python 3.11, Java 17 and Maven on PATH).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
JARS := .cache/jars
JARS_S3 := .cache/jars-s3
DIST := dist

.DEFAULT_GOAL := help
.PHONY: help setup test demo bench dist cluster-test airflow-venv browser lint clean s3-jars s3-warehouse-test

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

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

setup: $(VENV)/.installed $(JARS)/.fetched ## virtualenv, pip install -e .[dev], Delta jars, JVM class archive (idempotent)
	@$(PY) -m jobs.class_archive

# Not part of setup: the AWS SDK v2 bundle alone is ~650 MB, and only a Delta warehouse on s3:// needs it.
$(JARS_S3)/.fetched: jars/s3/pom.xml
	@command -v mvn >/dev/null || { echo "need Maven (mvn) on PATH to fetch the S3A jars"; exit 1; }
	mvn -q -B -f jars/s3/pom.xml dependency:copy-dependencies
	touch $@

s3-jars: setup $(JARS_S3)/.fetched ## hadoop-aws 3.5.0 + AWS SDK v2 bundle in .cache/jars-s3, for an s3a:// warehouse (~650 MB)

s3-warehouse-test: s3-jars ## both jobs with store and Delta warehouse on moto's S3 server (s3a), against a local run
	$(PY) -m pytest -m s3a tests/test_warehouse_s3.py $(PYTEST_ARGS)

# Two pytest workers (TEST_WORKERS), each a test module at a time with its own SparkSession: most of a module's
# time is one core's (the driver, the harness's JVM), so two fill a 2-core machine; the longest modules first
# (tests/conftest.py SLOW_FIRST). TEST_WORKERS=0 runs in one.
TEST_WORKERS ?= 2
test: setup airflow-venv browser dist ## the whole suite, spark-submit to a standalone cluster included (Hypothesis derandomized)
	RMQ_REPLAY_CLUSTER=1 HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

demo: setup ## both jobs on the bundled dump (demo/) with Spark local[*]: summaries, three explain answers, the report
	@set -o pipefail; PYTHONUNBUFFERED=1 $(PY) -m demo.run --out demo-out 2>&1 \
	  | grep --line-buffered -v -e '^WARNING: Using incubator' -e 'log4j' -e 'setLogLevel' -e ' WARN ' -e 'default log level'

airflow-venv: ## Airflow 3 + the Spark provider in .cache/airflow-venv, for the DAG test (idempotent)
	@PYTHON=$(PYTHON) bash tests/airflow/setup_venv.sh

browser: ## headless Chromium for the report test (Debian package via apt; root or sudo; idempotent)
	@bash tests/browser/install.sh

bench: setup ## print the benchmarks (ratios against baselines measured in the same run)
	$(PY) -m bench

lint: setup ## ruff over the Python sources
	$(VENV)/bin/ruff check filterlib jobs tests bench dags demo

# The cluster has Spark: the packed environment carries only the jobs' own dependencies (the wheel's requirements
# minus pyspark and delta-spark, read from the wheel's METADATA so setup.cfg stays their one list), the wheel itself
# (--no-deps), nothing else. The --py-files zip holds filterlib/, jobs/ and the defaults conf/*.json.
DIST_EXCLUDE := pyspark delta-spark
dist: setup ## wheel, --py-files zip (code + conf defaults), packed venv without Spark for --archives
	@start=$$(date +%s); set -e; \
	rm -rf $(DIST) build/dist-venv && mkdir -p $(DIST) build; \
	$(PY) -m build --wheel --outdir $(DIST) . >build/dist-wheel.log 2>&1 || { cat build/dist-wheel.log; exit 1; }; \
	$(PY) -c "import zipfile, pathlib; z = zipfile.ZipFile('$(DIST)/rocketmq_filter_replay.zip', 'w', zipfile.ZIP_DEFLATED); [z.write(p) for d in ('filterlib', 'jobs') for p in sorted(pathlib.Path(d).rglob('*.py'))]; [z.write(p) for p in sorted(pathlib.Path('conf').glob('*.json'))]; z.close()"; \
	$(PY) -c "import sys, zipfile, re; w = zipfile.ZipFile(sys.argv[1]); meta = next(n for n in w.namelist() if n.endswith('.dist-info/METADATA')); reqs = [l.split(':', 1)[1].strip() for l in w.read(meta).decode().splitlines() if l.startswith('Requires-Dist:') and 'extra ==' not in l]; skip = set(sys.argv[2:]); open('build/dist-requirements.txt', 'w').write(''.join(r + '\n' for r in reqs if re.split(r'[ <>=!~;\[(]', r, maxsplit=1)[0].lower() not in skip))" $(DIST)/*.whl $(DIST_EXCLUDE); \
	$(PYTHON) -m venv build/dist-venv; \
	build/dist-venv/bin/python -m pip install -q --disable-pip-version-check -r build/dist-requirements.txt; \
	build/dist-venv/bin/python -m pip install -q --disable-pip-version-check --no-deps $(DIST)/*.whl; \
	! build/dist-venv/bin/python -c "import pyspark" 2>/dev/null || { echo "dist: pyspark leaked into the packed env"; exit 1; }; \
	$(VENV)/bin/venv-pack -q -p build/dist-venv -o $(DIST)/pyspark_venv.tar.gz; \
	chmod 644 $(DIST)/pyspark_venv.tar.gz; \
	echo "dist requirements (no Spark): $$(tr '\n' ' ' < build/dist-requirements.txt)"; \
	ls -l $(DIST) | tail -n +2; \
	echo "dist: $$(du -sh $(DIST)/pyspark_venv.tar.gz | cut -f1) packed env, built in $$(( $$(date +%s) - start )) s"

cluster-test: dist ## both jobs spark-submitted to a throwaway standalone cluster with dist/ (minutes)
	RMQ_REPLAY_CLUSTER=1 $(PY) -m pytest tests/test_cluster.py $(PYTEST_ARGS)

clean: ## remove build outputs and caches (keeps .venv)
	rm -rf build $(DIST) .cache/refharness .cache/jvm tests/reference/target .pytest_cache
