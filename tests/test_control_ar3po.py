"""AR3PO: stage stopping at the first correct response, response reuse, buffer, state."""
import pickle

import numpy as np
import torch

from rollwise.control.ar3po import AR3PO
from rollwise.control.base import Planner
from rollwise.core.types import Group

from fakes import Engine, R, make_ctx, run_step


def test_stages_stop_at_first_correct():
    ctx = make_ctx(3, B=3)
    eng = Engine({0: 1.0, 1: 0.0, 2: 1 / 8})
    planner = Planner([AR3PO(k=4, stages=3)], 3, np.random.default_rng(0))
    batch, rejected, rounds = run_step(planner, ctx, eng, advance_version=True)
    assert rounds[0] == {0: 4, 1: 4, 2: 4}
    assert rounds[1] == {1: 4, 2: 4}  # prompt 0 resolved in stage 1
    assert rounds[2] == {1: 4}  # prompt 2 found its correct response at sample 8
    assert len(rounds) == 3  # S = 3 stages at most
    assert ctx.groups[0].n == 4 and ctx.groups[2].n == 8 and ctx.groups[1].n == 12
    # 0: all correct (zero variance) and 1: all wrong with an empty buffer -> not trained
    assert [g.prompt.id for g in batch.groups] == [2]
    assert {g.prompt.id for g in rejected} == {0, 1}
    assert ctx.ledger.count_rollouts("train") == 24  # 4 + 12 + 8 generated
    # the driver settles the rejected groups 0 and 1 (4 + 12) as discarded, group 2's 8 as trained
    assert ctx.ledger.count_rollouts("train", "trained") == 8
    assert ctx.ledger.count_rollouts("train", "discarded") == 16
    assert abs(ctx.metrics["ar3po/mean_n"] - 8.0) < 1e-9


def test_reuse_stored_correct_response():
    ctx = make_ctx(2, B=2)
    eng = Engine({0: 0.5, 1: 0.0})
    c = AR3PO(k=4, stages=2)
    planner = Planner([c], 2, np.random.default_rng(0))
    old = R(1, True, version=-7)
    old.fate = "trained"  # an earlier step's rollout: settled in its own step
    c.buffer[1] = [old]
    batch, rejected, _ = run_step(planner, ctx, eng, advance_version=True)
    g1 = next(g for g in batch.groups if g.prompt.id == 1)
    assert g1.n == 9 and g1.num_correct == 1  # 8 fresh wrong + the reused correct one ("add")
    reused = g1.rollouts[-1]
    assert reused is not old and reused.policy_version == -7 and reused.correct
    assert ctx.ledger.count_rollouts("train") == 4 + 8  # the reused response is not charged again
    assert ctx.ledger.count_rollouts("train", "trained") == 4 + 8 and ctx.ledger.count_rollouts("train", "open") == 0
    assert reused.fate == "trained" and ctx.ledger.reused_tokens == 3  # counted as reused (3 tokens)
    assert ctx.groups[1].n == 8  # the step's fresh group is untouched (history sees fresh data)
    assert c.buffer[1] == [old]  # no fresh correct response: buffer unchanged
    assert ctx.metrics["ar3po/reused"] == 1
    # prompt 0's fresh correct responses are stored (keep = 1: the newest)
    assert len(c.buffer[0]) == 1 and c.buffer[0][0].correct and c.buffer[0][0].policy_version == 0


def test_replace_mode_discards_one_fresh_response():
    ctx = make_ctx(1, B=1)
    eng = Engine({0: 0.0})
    c = AR3PO(k=4, stages=1, reuse="replace", keep=2)
    c.buffer[0] = [R(0, True, version=-2), R(0, True, version=-1)]
    for r in c.buffer[0]:
        r.fate = "trained"  # earlier steps' rollouts: settled in their own steps
    planner = Planner([c], 1, np.random.default_rng(0))
    batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
    g = batch.groups[0]
    assert g.n == 4 and g.num_correct == 1 and g.rollouts[-1].policy_version == -1  # newest stored
    # the displaced fresh response is settled "discarded" by the driver (was: reclassified by AR3PO)
    assert ctx.ledger.count_rollouts("train", "discarded") == 1 and ctx.ledger.count_rollouts("train", "trained") == 3
    assert ctx.ledger.legacy_rollouts()["discarded"] == 1 and ctx.ledger.legacy_rollouts()["train"] == 3
    assert ctx.ledger.count("train", "discarded") == 3  # its 3 tokens


def test_buffer_keeps_newest_and_no_reuse_option():
    ctx = make_ctx(1, B=1)
    c = AR3PO(keep=2)
    g = Group(ctx.pool[0], [R(0, True, version=1), R(0, False), R(0, True, version=2)])
    c.observe([g], None, ctx)
    c.observe([Group(ctx.pool[0], [R(0, True, version=3)])], None, ctx)
    assert [r.policy_version for r in c.buffer[0]] == [2, 3]
    ctx2 = make_ctx(1, B=1)
    eng = Engine({0: 0.0})
    none = AR3PO(k=2, stages=1, reuse="none")
    none.buffer = dict(c.buffer)
    batch, _, _ = run_step(Planner([none], 1, np.random.default_rng(0)), ctx2, eng, advance_version=True)
    assert len(batch) == 0


def test_state_dict_round_trip():
    ctx = make_ctx(4, B=4)
    eng = Engine({0: 0.5, 1: 0.25, 2: 0.0, 3: 1.0})
    c = AR3PO()
    planner = Planner([c], 4, np.random.default_rng(0))
    for step in range(3):
        ctx.step = step
        run_step(planner, ctx, eng, advance_version=True)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = AR3PO()
    d.load_state_dict(s)
    assert set(d.buffer) == set(c.buffer) and d._stage == c._stage and d._reused == c._reused
    for pid in c.buffer:
        for a, b in zip(c.buffer[pid], d.buffer[pid]):
            assert torch.equal(a.token_ids_T, b.token_ids_T) and torch.equal(a.logprobs_T, b.logprobs_T)
            assert (a.correct, a.policy_version, a.reward, a.purpose, a.prompt_ids) == \
                   (b.correct, b.policy_version, b.reward, b.purpose, b.prompt_ids)
