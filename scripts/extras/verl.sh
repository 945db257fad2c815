#!/usr/bin/env bash
# Install verl 0.9.1 into ./.venv, CPU only, for tests/test_verl_equivalence.py (which skips without it).
#
# verl's declared requirements (ray[default], wandb, datasets, peft, transformers<5.11, and torch==2.11
# in its cpu extra) would replace the pinned CPU torch and pull gigabytes. The tests need only
# verl.trainer.ppo.core_algos, verl.trainer.ppo.rollout_corr_helper and verl.workers.config.actor, so
# everything goes in with --no-deps, pinned: verl and exactly the modules those imports reach (found by
# importing them until nothing was missing). Packages scripts/setup.sh already provides (numpy, packaging,
# pyyaml, click, filelock, idna) are not touched. Idempotent: pip skips what is installed at its pin.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "verl.sh: no .venv here; run scripts/setup.sh first" >&2; exit 1; }

PKGS=(
  verl==0.9.1
  ray==2.60.0                        # verl/protocol.py imports ray
  msgpack==1.2.4                     # ray
  protobuf==7.36.2                   # ray's generated *_pb2 modules
  requests==2.34.2                   # ray
  urllib3==2.8.0                     # requests
  certifi==2026.10.19.post1          # requests
  charset-normalizer==3.5.3          # requests (without it: a warning at every import)
  jsonschema==4.26.0                 # ray.runtime_env
  attrs==26.1.0                      # jsonschema
  referencing==0.37.0                # jsonschema
  rpds-py==2026.9.1                  # jsonschema
  jsonschema-specifications==2025.9.1  # jsonschema
  tensordict==0.10.0                 # verl/protocol.py (verl wants >=0.8, <=0.10, !=0.9.0)
  pyvers==0.1.0                      # tensordict 0.10 (wants >=0.1, <0.2)
  cloudpickle==3.1.3                 # tensordict
  orjson==3.13.0                     # tensordict
  omegaconf==2.4.0                   # verl configs (ActorConfig)
  codetiming==1.4.0                  # verl.utils
)

torch_before=$("$PY" -c "import torch; print(torch.__version__)")
out=$("$PY" -m pip install -q --disable-pip-version-check --no-deps "${PKGS[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
[ -z "$out" ] || echo "$out" | grep -v -E "^WARNING: Location|^Looking in (indexes|links)" || true

"$PY" - "$torch_before" <<'PYEOF'
import sys

import torch
from verl.trainer.ppo import core_algos, rollout_corr_helper  # noqa: F401
from verl.workers.config.actor import ActorConfig  # noqa: F401

assert torch.__version__ == sys.argv[1], f"torch changed: {sys.argv[1]} -> {torch.__version__}"
import verl
print(f"verl {verl.__version__} ready on torch {torch.__version__}")
PYEOF
