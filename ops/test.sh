#!/usr/bin/env bash
# `make test`: every set-up step the suite needs (each timed), then ruff, mypy and pytest (unit and
# integration, against real Docker, Kafka, Jaeger and an S3 server (SeaweedFS) started by the fixtures).
set -euo pipefail
cd "$(dirname "$0")/.."
source ops/timed.sh

timed "Python environment" bash ops/bootstrap.sh
timed "stack parts: Docker engine, images, Kafka jars, Jaeger, SeaweedFS" .venv/bin/trialog prepare
# The real project the synthesis test uses: its sdist from PyPI into the cache (tests reach loopback only).
timed "synthesis sdist toolz==1.2.0 (PyPI once, then cached)" .venv/bin/trialog tasks synthesize \
  --project toolz==1.2.0 --fetch-only
# The releases the shipped task set (examples/synth) is rebuilt from, for its integration test.
timed "synthesis sdists of examples/synth (PyPI once, then cached)" .venv/bin/trialog tasks materialize \
  examples/synth/tasks.jsonl.gz --fetch-only
timed "ruff" .venv/bin/python -m ruff check .
timed "ruff format" .venv/bin/python -m ruff format --check .
timed "mypy (strict)" .venv/bin/python -m mypy
# The layer and no-cycle contracts of pyproject.toml ([tool.importlinter]).
timed "import layers (import-linter)" .venv/bin/python -c \
  "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
# The suite in two processes (pytest-xdist): most tests wait on something (a broker, a container, a worker
# process), so two of them share the 2 cores of CI well. Whole files go to each (`--dist loadfile`): a
# file's tests share module fixtures and some run in order. Each process starts its own Kafka, Jaeger and
# S3 server; the Docker engine is shared (each session removes only its own containers).
# Then, alone: the chaos and fault tests, which kill and restart workers and brokers against deadlines,
# and the containment tests, whose fork, memory and disk bombs contend for the machine by design (a fork
# bomb's sandbox once gave an error instead of its result while the other process ran a heavy test).
# Both runs go on when the other fails (CI shows all).
# Given tests to run (any argument not an option), one pytest runs just them.
for arg in "$@"; do
  if [[ "$arg" != -* ]]; then
    timed "pytest" .venv/bin/python -m pytest -m "unit or integration" --durations=25 "$@"
    exit
  fi
done
ALONE=(tests/integration/test_chaos.py tests/integration/test_faults.py
  tests/integration/sandbox/test_containment.py)
rc=0
timed "pytest (two processes)" .venv/bin/python -m pytest -m "unit or integration" -n 2 --dist loadfile \
  --durations=25 "${ALONE[@]/#/--ignore=}" "$@" || rc=$?
timed "pytest (chaos, faults and containment, alone)" .venv/bin/python -m pytest -m "unit or integration" \
  --durations=5 "${ALONE[@]}" "$@" || rc=$?
exit $rc
