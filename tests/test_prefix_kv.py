"""The torch engine's prefix KV store: a row its segment budget stopped keeps its KV, and a request that
continues that rollout (a TreePO branch) starts from it, prefilling one token instead of prompt + prefix."""
import gc

import pytest
import torch

from rollwise.core.types import Request, SamplingParams
from rollwise.generate.torch_engine import TorchEngine
from rollwise.policy.policy import Policy
from test_engine_policy import PROMPTS, generate, hf_checkpoint, no_eos, tiny_policy

SEG = SamplingParams(max_tokens=12, segment_tokens=4, keep_kv=True)


def branch(parent, k=1, segment=4):
    """A request continuing rollout `parent` (its prompt's)."""
    prompt = next(p for p in PROMPTS if p.id == parent.prompt_id)
    return Request(prompt, k, sampling=SamplingParams(max_tokens=12, segment_tokens=segment, keep_kv=True), prefix=parent)


def tree(pol, kv_rows, temperature=0.0, seed=3):
    """Two roots per prompt, then two branches of every root, then the branches' own branches: the
    rollouts of each wave, the prompt tokens prefilled per wave, and the engine."""
    eng = TorchEngine(pol, temperature=temperature, max_new_tokens=12, seed=seed, prefix_kv_rows=kv_rows)
    waves, prefilled = [], []
    res, pt = generate(eng, [Request(PROMPTS[0], 2, sampling=SEG), Request(PROMPTS[1], 2, sampling=SEG)])
    waves.append([r for g in res for r in g]), prefilled.append(pt)
    for _ in range(2):
        res, pt = generate(eng, [branch(p) for p in waves[-1] for _ in range(2)])
        waves.append([r for g in res for r in g]), prefilled.append(pt)
    return waves, prefilled, eng


@pytest.mark.parametrize("backend", ["tiny", "hf"])
def test_branches_start_from_their_parents_kv_and_match_a_fresh_prefill(backend, tmp_path):
    pol = no_eos(tiny_policy() if backend == "tiny" else Policy.load(hf_checkpoint(tmp_path)))
    shared, pre_shared, eng = tree(pol, kv_rows=64)
    fresh, pre_fresh, eng0 = tree(pol, kv_rows=0)
    for a, b in zip(shared, fresh):  # greedy: the same tokens, and log-probs equal up to float noise
        assert [r.token_ids_T.tolist() for r in a] == [r.token_ids_T.tolist() for r in b]
        for x, y in zip(a, b):
            assert torch.allclose(x.logprobs_T, y.logprobs_T, atol=1e-5)
    # wave 1: 8 branches of 4 roots, each prefilling its parent's last token only (1 token), not prompt +
    # prefix; without the store every branch prefills its whole context
    assert pre_shared[0] == pre_fresh[0] == 5 + 8
    assert pre_shared[1] == 8 and pre_fresh[1] == 4 * 5 + 4 * 8 + 8 * 4
    assert pre_shared[2] == 16 and pre_fresh[2] == 8 * 5 + 8 * 8 + 16 * 8
    assert eng.prefix_kv.hits == 8 + 16 and eng0.prefix_kv.hits == 0
    # the reused prefill tokens are exactly what the fresh engine prefilled more
    assert eng.prefix_kv.reused_tokens == sum(pre_fresh) - sum(pre_shared)
    # leaves hold their ancestors' tokens, and their behaviour log-probs are the learner's
    leaves = shared[-1]
    lp, _, mask = pol.response_logprobs([r.prompt_ids for r in leaves], [r.token_ids_T.tolist() for r in leaves])
    mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in leaves], batch_first=True)
    assert all(r.num_tokens == 12 for r in leaves) and torch.allclose(lp * mask, mu, atol=1e-4)


def test_sampled_branches_have_the_learners_logprobs():
    pol = no_eos(tiny_policy())
    waves, _, eng = tree(pol, kv_rows=64, temperature=1.0)
    assert eng.prefix_kv.hits == 24
    rows = [r for w in waves for r in w]
    lp, _, mask = pol.response_logprobs([r.prompt_ids for r in rows], [r.token_ids_T.tolist() for r in rows])
    mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in rows], batch_first=True)
    assert torch.allclose(lp * mask, mu, atol=1e-4)


def test_a_chunk_mixes_continuations_with_kept_kv_and_fresh_prompts():
    pol = no_eos(tiny_policy())
    for rows in (64, 0):
        eng = TorchEngine(pol, temperature=0.0, max_new_tokens=12, prefix_kv_rows=rows)
        (roots,), _ = generate(eng, [Request(PROMPTS[1], 1, sampling=SEG)])
        res, pt = generate(eng, [branch(roots[0]), Request(PROMPTS[0], 1, sampling=SEG), Request(PROMPTS[2], 2)])
        if rows:
            assert pt == 1 + 5 + 2 and eng.prefix_kv.hits == 1
            kept = [g[0].token_ids_T.tolist() for g in res] + [res[2][1].token_ids_T.tolist()]
        else:
            assert pt == 8 + 4 + 5 + 2
            assert kept == [g[0].token_ids_T.tolist() for g in res] + [res[2][1].token_ids_T.tolist()]


def test_the_store_is_bounded_versioned_and_emptied_by_a_weight_update():
    pol = no_eos(tiny_policy())
    eng = TorchEngine(pol, temperature=1.0, max_new_tokens=12, prefix_kv_rows=3)
    (roots,), _ = generate(eng, [Request(PROMPTS[0], 5, sampling=SEG)])
    assert len(eng.prefix_kv) == 3  # the oldest two were dropped
    _, pt = generate(eng, [branch(r) for r in roots])
    assert pt == 2 * (5 + 4) + 3 * 1 and eng.prefix_kv.hits == 3  # dropped: a fresh prefill, same result
    eng.update_weights(pol.version + 1)
    assert len(eng.prefix_kv) == 0
    (roots,), _ = generate(eng, [Request(PROMPTS[0], 1, sampling=SEG)])
    entry = eng.prefix_kv.get(roots[0], eng.version, 5 + 4 - 1)
    assert entry is not None and entry.length == 8 and entry.layers[0][0].shape[1] == 8
    assert eng.prefix_kv.get(roots[0], eng.version + 1, 8) is None  # another version's KV is never used
    # only the very rollout object it was kept for (not a copy, not one that reuses a dead one's id)
    from dataclasses import replace
    assert eng.prefix_kv.get(replace(roots[0]), eng.version, 8) is None
    del roots, entry
    gc.collect()
    assert all(ref() is None for ref, _ in eng.prefix_kv._entries.values())


def test_only_segment_stops_that_ask_are_kept():
    pol = tiny_policy()  # EOS allowed: rows that end by EOS or length are leaves, never continued
    eng = TorchEngine(pol, temperature=1.0, max_new_tokens=4, seed=0)
    res, _ = generate(eng, [Request(PROMPTS[0], 8, sampling=SamplingParams(keep_kv=True))])
    assert len(eng.prefix_kv) == 0 and all(r.status == "done" for r in res[0])
    # a segment stop that does not ask (APRIL's partials: resumed after a weight update) keeps nothing
    eng = TorchEngine(no_eos(tiny_policy()), temperature=1.0, max_new_tokens=12)
    (rows,), _ = generate(eng, [Request(PROMPTS[0], 3, sampling=SamplingParams(max_tokens=12, segment_tokens=4))])
    assert all(r.status == "partial" for r in rows) and len(eng.prefix_kv) == 0
    # an aborted partial (APRIL) keeps no KV: it resumes after a weight update, under other weights
    eng = TorchEngine(no_eos(tiny_policy()), temperature=1.0, max_new_tokens=12)
    r = Request(PROMPTS[0], 1)
    r.id = 0
    eng.submit([r])
    eng.poll(max_steps=3)
    (ab,) = eng.abort([0])
    assert ab.group.rollouts[0].status == "aborted" and len(eng.prefix_kv) == 0


def test_option_is_checked():
    with pytest.raises(ValueError, match="prefix_kv_rows"):
        TorchEngine(tiny_policy(), prefix_kv_rows=-1)


def test_treepo_asks_for_kept_kv_and_each_of_its_branches_starts_from_it():
    import numpy as np

    from rollwise.control.base import StepContext
    from rollwise.control.treepo import TreePO
    from rollwise.generate.engine import number, run_sync

    eng = TorchEngine(no_eos(tiny_policy()), temperature=1.0, max_new_tokens=12, seed=0)
    treepo = TreePO(segment_tokens=4, branch=2)
    ctx = StepContext(step=0, batch_size=2, n=4, pool=PROMPTS, history=None, ledger=None, rng=np.random.default_rng(0))
    treepo.begin_step(ctx)
    hook = treepo.speculate([Request(p, 4, sampling=SamplingParams(max_tokens=12)) for p in PROMPTS[:2]], ctx)
    branches = 0
    try:
        requests = next(hook)
        while True:
            branches += sum(r.prefix is not None for r in requests)
            number(requests)
            requests = hook.send([e.group for e in run_sync(eng, requests)])
    except StopIteration as stop:
        leaves = stop.value
    # per prompt: 2 roots; 2 branches of each (4 paths); 1 branch of each of those, which ends at 12 tokens
    assert [g.n for g in leaves] == [4, 4] and branches == 2 * (4 + 4)
    assert eng.prefix_kv.hits == branches
