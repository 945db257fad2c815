"""Partial rollouts (APRIL over-provisioning, per-step token budgets) through the real driver and planner,
on a scripted token-by-token engine: abort -> carry -> resume accounting, hand-checked."""
import numpy as np
import pytest

from rollwise.control.base import build_planner
from rollwise.core.types import Prompt, Request, SamplingParams
from rollwise.generate.engine import run_sync
from rollwise.core.staleness import StalenessPolicy

from fakes import Learner, TokenEngine, make_ctx, run_step


def lengths_table(table):
    return lambda pid, j: table[pid]


def test_engine_budget_abort_and_resume_concatenate_tokens_and_versions():
    eng = TokenEngine(lengths_table({0: 9}), max_tokens=12)
    p = Prompt(0, "q0", "0")
    eng.update_weights(3)
    (first,) = run_sync(eng, [Request(p, 1, sampling=SamplingParams(segment_tokens=4), id=0)])
    r = first.group.rollouts[0]
    assert (r.status, r.finish_reason, r.num_tokens) == ("partial", "budget", 4)
    eng.update_weights(4)
    eng.submit([Request(p, 1, prefix=r, id=1)])
    eng.poll(max_steps=2)
    (part,) = eng.abort([1])
    r2 = part.group.rollouts[0]
    assert (r2.status, r2.num_tokens) == ("aborted", 6) and r2.token_ids_T.tolist() == [0, 1, 2, 3, 0, 1]
    assert r2.versions_T.tolist() == [3, 3, 3, 3, 4, 4] and r2.lineage.tokens_by_kind == {"decoded": 2}
    assert r2.logprobs_T[:4].tolist() == r.logprobs_T.tolist()  # the first segment's behaviour log-probs kept
    # the remaining budget shrinks with the prefix: 12 - 6 = 6 more at most, and the row wants 9 in all
    eng.update_weights(5)
    (last,) = run_sync(eng, [Request(p, 1, prefix=r2, id=2)])
    r3 = last.group.rollouts[0]
    assert (r3.status, r3.finish_reason, r3.num_tokens) == ("done", "eos", 9) and r3.oldest_version == 3
    # a final abort with no budget left is a length stop, not a partial
    eng2 = TokenEngine(lengths_table({0: 50}), max_tokens=5)
    eng2.submit([Request(p, 1, id=0)])
    eng2.poll(max_steps=5)
    rest = eng2.abort([0])
    assert rest == [] or rest[0].group.rollouts[0].finish_reason == "length"


def test_torch_engine_segment_budget_and_final_abort_is_a_length_stop():
    import torch

    from rollwise.generate.torch_engine import TorchEngine
    from test_engine_policy import no_eos, tiny_policy

    pol = tiny_policy()
    no_eos(pol)
    eng = TorchEngine(pol, max_new_tokens=6, seed=0)
    p = Prompt(0, "12+3=", "15")
    (a,) = run_sync(eng, [Request(p, 2, sampling=SamplingParams(segment_tokens=4), id=0)])
    assert all(r.status == "partial" and r.finish_reason == "budget" and r.num_tokens == 4 for r in a.group.rollouts)
    eng.submit([Request(p, 1, prefix=a.group.rollouts[0], id=1)])
    eng.poll(max_steps=1)  # 5 of 6 tokens: a running row
    (aborted,) = eng.abort([1])
    assert aborted.group.rollouts[0].status == "aborted" and aborted.group.rollouts[0].num_tokens == 5
    eng.submit([Request(p, 1, prefix=aborted.group.rollouts[0], id=2)])
    (done,) = [e for e in eng.poll(max_steps=1) if hasattr(e, "group")]  # its last token: a length stop
    r = done.group.rollouts[0]
    assert r.num_tokens == 6 and r.finish_reason == "length" and r.status == "done"


def step_all(planner, ctx, eng, steps):
    batches = []
    for _ in range(steps):
        batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
        batches.append(batch)
        ctx.step += 1
    return batches


def test_april_trains_the_first_b_complete_groups_and_carries_the_rest():
    """B = 2, over-provision 1.0 -> 4 prompts. Prompt lengths 3, 4, 12, 16 (max 20): prompts 0 and 1
    finish first, the driver aborts 2 and 3 mid-row and carries them; the next step resumes them from
    their tokens and trains them. Every decoded token is charged exactly once and ends trained."""
    ctx = make_ctx(pool_size=4, B=2, n=2)
    eng = TokenEngine(lengths_table({0: 3, 1: 4, 2: 12, 3: 16}), rates={i: 0.5 for i in range(4)})
    planner = build_planner("april", 4, ctx.rng, {"april": {"overprovision": 1.0}})
    (b1,) = step_all(planner, ctx, eng, 1)
    assert sorted(g.prompt.id for g in b1.groups) == [0, 1]
    carried = {g.prompt.id: g for g in planner.carry.groups}
    assert sorted(carried) == [2, 3]
    assert all(r.status == "aborted" and 0 < r.num_tokens < 12 for g in carried.values() for r in g.rollouts)
    led = ctx.ledger
    assert led.count(fate="carried") == sum(g.tokens for g in carried.values()) > 0
    assert led.count() == eng.decoded  # charged when generated, nothing twice
    (b2,) = step_all(planner, ctx, eng, 1)
    # step 2: the two carried prompts come first (they fill the batch), resumed from their prefixes
    assert sorted(g.prompt.id for g in b2.groups) == [2, 3] and not planner.carry.groups
    lens = sorted(r.num_tokens for g in b2.groups for r in g.rollouts)
    assert lens == [12, 12, 16, 16]  # prefix + the rest: each row reached its own length once
    assert all(r.oldest_version == 0 and r.versions_T.max() == 1 for g in b2.groups for r in g.rollouts)
    assert led.count() == eng.decoded and led.count(fate="carried") == 0 and led.count(fate="open") == 0
    assert led.count(fate="trained") == eng.decoded  # every token, both segments, trained once
    assert led.count_rollouts() == 8  # resumed rows are continuations, not new rollouts


def test_segment_budget_carries_long_rows_over_steps():
    ctx = make_ctx(pool_size=6, B=3, n=2)
    eng = TokenEngine(lengths_table({0: 3, 1: 3, 2: 3, 3: 9, 4: 3, 5: 3}), rates={i: 0.5 for i in range(6)})
    planner = build_planner("april", 6, ctx.rng, {"april": {"overprovision": 0.0, "segment_tokens": 4}})
    b1, b2, b3 = step_all(planner, ctx, eng, 3)
    trained = [g.prompt.id for b in (b1, b2, b3) for g in b.groups]
    assert 3 in trained and trained.count(3) == 1  # the 9-token prompt took 3 segments, trained once
    g3 = next(g for b in (b1, b2, b3) for g in b.groups if g.prompt.id == 3)
    assert all(r.num_tokens == 9 for r in g3.rollouts)
    assert ctx.ledger.count() == eng.decoded and ctx.ledger.count(fate="open") == 0


def test_rows_older_than_the_staleness_bound_are_dropped_and_restarted():
    ctx = make_ctx(pool_size=4, B=2, n=2)
    eng = TokenEngine(lengths_table({0: 3, 1: 4, 2: 12, 3: 16}), rates={i: 0.5 for i in range(4)})
    planner = build_planner("april", 4, ctx.rng, {"april": {"overprovision": 1.0}})
    planner.staleness = StalenessPolicy(0)  # S = 0: a row may not mix two policies
    step_all(planner, ctx, eng, 1)
    carried_tokens = ctx.ledger.count(fate="carried")
    (b2,) = step_all(planner, ctx, eng, 1)
    assert ctx.ledger.count(fate="aborted") == carried_tokens > 0  # charged, never trained
    assert all(r.versions_T is None and r.policy_version == 1 for g in b2.groups for r in g.rollouts)
    assert ctx.ledger.count() == eng.decoded


def test_carried_partials_survive_a_checkpoint_with_their_tokens():
    ctx = make_ctx(pool_size=4, B=2, n=2)
    eng = TokenEngine(lengths_table({0: 3, 1: 4, 2: 12, 3: 16}), rates={i: 0.5 for i in range(4)})
    planner = build_planner("april", 4, ctx.rng, {"april": {"overprovision": 1.0}})
    step_all(planner, ctx, eng, 1)
    state = planner.state_dict()
    restored = build_planner("april", 4, np.random.default_rng(0), {"april": {"overprovision": 1.0}})
    restored.load_state_dict(state)
    a = [[(r.token_ids_T.tolist(), r.status, r.fate) for r in g.rollouts] for g in planner.carry.groups]
    b = [[(r.token_ids_T.tolist(), r.status, r.fate) for r in g.rollouts] for g in restored.carry.groups]
    assert a == b and a and all(f == "carried" for g in a for _, _, f in g)


def test_partial_rollouts_refuse_staged_allocation():
    with pytest.raises(ValueError, match=r"april \(Partial\) does not compose with ar3po \(Staged\): a later stage would need rows"):
        build_planner("ar3po+april", 4, np.random.default_rng(0))


def test_a_row_resumed_twice_survives_a_real_checkpoint_with_its_prefix_chain(tmp_path):
    # a 9-token row cut every 4 tokens is resumed at step 2 and carried again: its prefix (a Rollout in
    # meta) must go through the checkpoint's plain-data format, and settle with the row after a restore
    import torch

    from rollwise.run.checkpoint import from_plain, to_plain

    def run(restore: bool):
        ctx = make_ctx(pool_size=6, B=3, n=2)
        eng = TokenEngine(lengths_table({0: 3, 1: 3, 2: 3, 3: 9, 4: 3, 5: 3}), rates={i: 0.5 for i in range(6)})
        opts = {"april": {"overprovision": 0.0, "segment_tokens": 4}}
        planner = build_planner("april", 6, ctx.rng, opts)
        step_all(planner, ctx, eng, 2)
        assert any(r.lineage.prefix is not None for g in planner.carry.groups for r in g.rollouts)
        if restore:
            torch.save(to_plain(planner.state_dict()), tmp_path / "s.pt")
            state = from_plain(torch.load(tmp_path / "s.pt", weights_only=True))
            planner = build_planner("april", 6, ctx.rng, opts)
            planner.load_state_dict(state)
        (b3,) = step_all(planner, ctx, eng, 1)
        g3 = next(g for g in b3.groups if g.prompt.id == 3)
        return [r.token_ids_T.tolist() for r in g3.rollouts], ctx.ledger.count(fate="trained"), eng.decoded

    assert run(restore=True) == run(restore=False)
