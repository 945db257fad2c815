#!/usr/bin/env bash
# The one-GPU check: CUDA tests, short `rollwise train --device cuda` runs, engine/learner throughput of a
# random ~0.5B Llama beside the decode bandwidth bound, and measured cost ratios (scripts/gpu_check.py).
# Without CUDA it says so, runs the CPU-able checks and exits 0.
#   bash scripts/gpu_check.sh [--quick] [--out DIR]      (PYTHON=... to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" scripts/gpu_check.py "$@"
