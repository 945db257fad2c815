#!/usr/bin/env bash
# Install verl 0.9.1's v1 trainer modules and TransferQueue 0.1.11 into ./.venv, CPU only, for
# rollwise.integrations.verl and tests/test_integrations_verl.py (which skips without them).
#
# Runs scripts/extras/verl.sh first (verl itself and its light imports), then adds what importing
# verl.trainer.ppo.v1.trainer_base reaches (found by importing it in a fresh .venv until nothing was
# missing), all --no-deps and pinned: verl's and transferqueue's declared requirements (ray[default],
# wandb, transformers<5.11, ...) would replace the pinned CPU torch or pull gigabytes. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "verl-v1.sh: no .venv here; run scripts/setup.sh first" >&2; exit 1; }
bash scripts/extras/verl.sh

PKGS=(
  transferqueue==0.1.11              # verl's v1 replay buffer stores trajectories in it
  pyzmq==27.3.0                      # transferqueue
  msgspec==0.23.0                    # transferqueue
  psutil==7.2.2                      # transferqueue
  prometheus_client==0.26.0          # transferqueue
  hydra-core==1.3.8                  # transferqueue, verl configs
  antlr4-python3-runtime==4.9.3      # hydra-core (it wants exactly 4.9.*)
  cachetools==8.0.2                  # verl.workers.rollout.router
  fastapi==0.165.0                   # verl's rollout servers (imported, not started)
  starlette==1.10.0                  # fastapi
  opentelemetry-api==1.45.2          # fastapi
  uvicorn==0.54.0                    # verl's rollout servers
  torchdata==0.11.0                  # verl's StatefulDataLoader
  aiohttp==3.14.5                    # verl's agent loop
  multidict==7.2.1                   # aiohttp
  yarl==1.25.1                       # aiohttp
  propcache==0.5.4                   # aiohttp
  aiohappyeyeballs==2.7.1            # aiohttp
  aiosignal==1.4.0                   # aiohttp
  frozenlist==1.8.0                  # aiohttp
  peft==0.21.2                       # verl.workers (LoRA)
  accelerate==1.15.0                 # peft
  datasets==5.2.0                    # verl.utils.dataset
  dill==0.4.1                        # datasets
  xxhash==4.1.0                      # datasets
  multiprocess==0.70.19              # datasets
  pandas==3.1.1                      # datasets
)

torch_before=$("$PY" -c "import torch; print(torch.__version__)")
out=$("$PY" -m pip install -q --disable-pip-version-check --no-deps "${PKGS[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
[ -z "$out" ] || echo "$out" | grep -v -E "^WARNING: Location|^Looking in (indexes|links)" || true

"$PY" - "$torch_before" <<'PYEOF' 2>&1 | grep -v -E "engine is not available|warnings.warn|No supported accelerator|registered but not available"
import sys

import torch
import transfer_queue  # noqa: F401
import verl
from verl.trainer.ppo.v1 import replay_buffer, trainer_base  # noqa: F401

assert torch.__version__ == sys.argv[1], f"torch changed: {sys.argv[1]} -> {torch.__version__}"
print(f"verl {verl.__version__} v1 trainer and transferqueue ready on torch {torch.__version__}")
PYEOF
