#!/usr/bin/env bash
# Create the Airflow virtualenv of the DAG test (default .cache/airflow-venv), idempotently.
#
# Airflow 3 and the Apache Spark provider live in a virtualenv of their own: the provider pulls pyspark-client,
# which clashes with the project's pyspark. Versions: tests/airflow/requirements.txt, every transitive one pinned
# in tests/airflow/constraints.txt. A venv whose stamp matches those two files and this script is left as it is
# (a second run installs nothing); any change rebuilds it from scratch. Needs PyPI the first time.
#
#   tests/airflow/setup_venv.sh            env: AIRFLOW_VENV (where), PYTHON (a Python 3.11, default python3.11)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${AIRFLOW_VENV:-$root/.cache/airflow-venv}"
python="${PYTHON:-python3.11}"
req="$here/requirements.txt"
cons="$here/constraints.txt"
key="$(cat "$req" "$cons" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"

up_to_date() { [[ -x "$venv/bin/python" && -f "$venv/.installed" && "$(cat "$venv/.installed")" == "$key" ]]; }

up_to_date && exit 0

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9                                     # a concurrent run waits, then finds the venv made
up_to_date && exit 0

fail() {
    echo "setup_venv.sh: could not create the Airflow virtualenv in $venv: $1" >&2
    echo "  (it installs apache-airflow and apache-airflow-providers-apache-spark from PyPI, which must be" >&2
    echo "  reachable the first time; versions in tests/airflow/requirements.txt and constraints.txt)" >&2
    rm -rf "$venv"
    exit 1
}

command -v "$python" >/dev/null || fail "no $python on PATH (set PYTHON to a Python 3.11)"
start=$SECONDS
echo "creating the Airflow virtualenv in $venv (once; pinned versions, about 650 MB)"
rm -rf "$venv"
"$python" -m venv "$venv" || fail "python -m venv failed"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$cons" pip \
    || fail "pip install pip failed (is PyPI reachable?)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" -c "$cons" \
    || fail "pip install of requirements.txt failed (is PyPI reachable?)"
"$venv/bin/python" -c "import airflow.providers.apache.spark.operators.spark_submit, airflow.sdk" \
    || fail "the installed Airflow does not import"
echo "$key" > "$venv/.installed"
echo "Airflow virtualenv ready in $((SECONDS - start)) s"
