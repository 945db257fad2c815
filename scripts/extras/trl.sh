#!/usr/bin/env bash
# Install TRL 1.16.0 into ./.venv, CPU only, for rollwise.integrations.trl and its tests
# (tests/test_integrations_trl.py skips without it).
#
# TRL itself does not require torch, but accelerate does (torch>=2.0): the installed CPU torch satisfies
# it, and a constraint pinning torch to exactly the installed build makes pip fail rather than swap it
# for another (a CUDA build is gigabytes). The rest resolves normally, at the versions the integration
# was tested with. Idempotent: pip skips what is installed at its pin.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "trl.sh: no .venv here; run scripts/setup.sh first" >&2; exit 1; }

PKGS=(
  trl==1.16.0
  accelerate==1.15.0
  datasets==5.2.0
  transformers==5.24.0
)

torch_before=$("$PY" -c "import torch; print(torch.__version__)")
pin=$(mktemp); trap 'rm -f "$pin"' EXIT
echo "torch==$torch_before" >"$pin"
out=$(PIP_CONSTRAINT="$pin" "$PY" -m pip install -q --disable-pip-version-check "${PKGS[@]}" 2>&1) \
  || { echo "$out" >&2; exit 1; }
# verl (scripts/extras/verl.sh) is installed --no-deps on purpose, so pip reports its unmet declared
# requirements after any install; those lines are expected, anything else is shown.
rest=$(echo "$out" | grep -v -E "^WARNING: Location|^Looking in (indexes|links)|^verl [0-9.]+ requires " || true)
if echo "$rest" | grep -q -v -E "^$|^ERROR: pip's dependency resolver does not currently"; then echo "$rest"; fi

"$PY" - "$torch_before" <<'PYEOF'
import sys

import torch
import trl
from trl import GRPOConfig, GRPOTrainer  # noqa: F401

assert torch.__version__ == sys.argv[1], f"torch changed: {sys.argv[1]} -> {torch.__version__}"
print(f"trl {trl.__version__} ready on torch {torch.__version__}")
PYEOF
