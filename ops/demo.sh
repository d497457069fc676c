#!/usr/bin/env bash
# `make demo`: the main job. Every set-up step (timed), then `trialog demo`: the local stack, the policy
# model, a validated task set, an evaluation of v0 on held-out tasks, a short training run with live
# progress, an evaluation of the last version, the run report and where the traces are.
# DEMO_ARGS passes options to `trialog demo` (see `.venv/bin/trialog demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
source ops/timed.sh

timed "Python environment" bash ops/bootstrap.sh
timed "stack parts: Docker engine, images, Kafka jars, Jaeger" .venv/bin/trialog prepare
timed "policy model (SmolLM2-135M-Instruct, converted once)" .venv/bin/trialog model prepare
# shellcheck disable=SC2086
timed "trialog demo" .venv/bin/trialog demo ${DEMO_ARGS:-}
