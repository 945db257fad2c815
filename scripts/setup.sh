#!/usr/bin/env bash
# Set up rollwise in ./.venv on a fresh machine (CPU). Idempotent: a second run installs nothing new.
# torch is pinned to the CPU build first; a bare `torch` requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v -E "^WARNING: Location" || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -E "^WARNING: Location" || true
.venv/bin/python -c "import rollwise, torch; print('rollwise ready: torch', torch.__version__)"
