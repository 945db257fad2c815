#!/usr/bin/env bash
# Set up rollwise in ./.venv on a fresh machine (CPU). Idempotent: a second run installs nothing new.
# torch is pinned to the CPU build first; a bare `torch` requirement would pull a multi-GB CUDA build.
#
#   bash scripts/setup.sh                 # rollwise + its test extras
#   bash scripts/setup.sh --with verl     # ... plus optional parts that a pip extra cannot express
#                                         #     (scripts/extras/<name>.sh; comma-separated list)
set -euo pipefail
cd "$(dirname "$0")/.."
WITH=""
while [ $# -gt 0 ]; do
  case "$1" in
    --with) WITH="${2:-}"; shift 2 ;;
    --with=*) WITH="${1#--with=}"; shift ;;
    *) echo "setup.sh: unknown argument $1 (use --with NAME[,NAME])" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v -E "^WARNING: Location" || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v -E "^WARNING: Location" || true
for extra in ${WITH//,/ }; do
  [ -f "scripts/extras/$extra.sh" ] || { echo "setup.sh: no optional part '$extra' (scripts/extras/)" >&2; exit 2; }
  bash "scripts/extras/$extra.sh"
done
.venv/bin/python -c "import rollwise, torch; print('rollwise ready: torch', torch.__version__)"
