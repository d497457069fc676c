#!/usr/bin/env bash
# `make demo`: the main job on the local stack. Until the training demo lands, it brings the stack up
# and prints its status.
set -euo pipefail
cd "$(dirname "$0")/.."
source ops/timed.sh

timed "Python environment" bash ops/bootstrap.sh
timed "local stack up" .venv/bin/trialog up
.venv/bin/trialog status --json
