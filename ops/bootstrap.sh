#!/usr/bin/env bash
# Creates trialog's Python environment, idempotently:
#  - every dependency, installed in ONE resolver run from ops/requirements.lock into a venv in the cache,
#    keyed by the lock file and the Python version (a second checkout or a second run reuses it);
#  - a thin .venv in this checkout that sees those packages plus this repo, with a `trialog` command.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${TRIALOG_CACHE:-$HOME/.cache/trialog}"
PYTHON="${PYTHON:-python3}"
PIP_VERSION=25.3

if ! "$PYTHON" -c 'import sys; raise SystemExit(sys.version_info < (3, 11))'; then
  echo "trialog needs Python >= 3.11; $PYTHON is $("$PYTHON" --version 2>&1). Set PYTHON=..." >&2
  exit 2
fi

key=$({ cat ops/requirements.lock; "$PYTHON" -c 'import sys; print(sys.version)'; echo "$PIP_VERSION"; } \
      | sha256sum | cut -c1-16)
DEPS="$CACHE/venv/deps-$key"
mkdir -p "$CACHE/venv"
# Two checkouts bootstrapping at once must not build (and delete) the same environment under each other.
exec 9>"$DEPS.lock"
flock 9
if [ ! -f "$DEPS/.complete" ]; then
  echo "   creating the dependency environment $DEPS (one resolver run; torch is large)"
  rm -rf "$DEPS"
  "$PYTHON" -m venv "$DEPS"
  "$DEPS/bin/python" -m pip install -q --cache-dir "$CACHE/pip" "pip==$PIP_VERSION"
  "$DEPS/bin/python" -m pip install -q --cache-dir "$CACHE/pip" --progress-bar off -r ops/requirements.lock
  touch "$DEPS/.complete"
else
  echo "   reusing the dependency environment $DEPS"
fi
flock -u 9

if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.trialog-deps 2>/dev/null)" != "$DEPS" ]; then
  rm -rf .venv
  "$PYTHON" -m venv --without-pip .venv
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  deps_site=$("$DEPS/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # addsitedir (not a bare path) so that .pth files among the dependencies are honoured too.
  echo "import site; site.addsitedir('$deps_site')" > "$site/_trialog_deps.pth"
  echo "$PWD" > "$site/_trialog_repo.pth"
  cat > .venv/bin/trialog <<SCRIPT
#!$PWD/.venv/bin/python
import sys
from ops.cli.main import main
sys.exit(main())
SCRIPT
  chmod +x .venv/bin/trialog
  echo "$DEPS" > .venv/.trialog-deps
fi
echo "   .venv ready: $(.venv/bin/python --version), trialog at .venv/bin/trialog"
