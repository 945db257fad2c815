"""Batch recomposition: Shuffle-R1 pairing/ABS, RoRecomp classes and buffer, and the learner wiring."""
import math

import torch

from rollwise.core import registry
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.learn.advantages import batch_input, ktae
from rollwise.learn.learner import Learner, LearnerConfig
from rollwise.learn.recompose import RecomposedBatch, RoRecomp, batch_advantages, shuffle_r1

from fakes import ConstPolicy as Pol


def ro(reward, n_tokens=3, tok=1, pid=0):
    return Rollout(pid, [1], torch.full((n_tokens,), tok), torch.full((n_tokens,), -1.0), "", "eos", 0,
                   reward=reward, correct=reward > 0)


def group(rewards, pid=0, lengths=None):
    lengths = lengths or [3] * len(rewards)
    return Group(Prompt(pid, "", ""), [ro(r, n, tok=i + 1, pid=pid) for i, (r, n) in enumerate(zip(rewards, lengths))])


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---- Shuffle-R1 -------------------------------------------------------------------------------

def test_shuffle_r1_pairs_prune_and_keep_original_advantages():
    g = group([1, 0, 0, 0])  # GRPO: [1.5, -.5, -.5, -.5]; pairs (0,3) then (1,2); prune .5 keeps (0,3)
    out = shuffle_r1(Batch([g]), gen(), experience_replay=False)
    assert isinstance(out, RecomposedBatch)
    assert out.rollouts == [g.rollouts[0], g.rollouts[3]]
    assert torch.allclose(out.adv_N, torch.tensor([1.5, -0.5]), atol=1e-5)  # not recomputed on the pair
    full = shuffle_r1(Batch([g]), gen(), experience_replay=False, prune_ratio=0.0)
    assert full.rollouts == [g.rollouts[i] for i in (0, 3, 1, 2)]  # pairing order, most contrastive first


def test_shuffle_r1_odd_and_singleton_groups():
    out = shuffle_r1(Batch([group([1, 0.5, 0]), group([1])]), gen(), experience_replay=False, prune_ratio=0.0)
    assert [r.reward for r in out.rollouts] == [1, 0]  # the middle rollout is unpaired; n=1 has no pair
    assert torch.isfinite(out.adv_N).all()


def test_shuffle_r1_abs_sampling_is_seeded_and_never_draws_zero_contrast():
    b = Batch([group([1, 0, 0, 0], pid=0), group([1, 1], pid=1)])  # pair scores 2.0, 1.0 and 0.0
    seen = []
    for s in range(30):
        out = shuffle_r1(b, gen(s), prune_ratio=0.0, replay_times=3)
        assert len(out.rollouts) == 6  # 3 draws of 1 pair
        assert all(r.prompt_id == 0 for r in out.rollouts)  # the all-equal group's pair has weight 0
        seen.append(tuple(r.token_ids_T[0].item() for r in out.rollouts))
    assert len(set(seen)) > 1  # draws differ across seeds ...
    again = shuffle_r1(b, gen(5), prune_ratio=0.0, replay_times=3)
    assert tuple(r.token_ids_T[0].item() for r in again.rollouts) == seen[5]  # ... and repeat per seed
    # power weights: the (0,3) pair (score 2) is drawn about twice as often as (1,2) (score 1)
    first = sum(t[0] == 1 for t in seen[:30]) + sum(t[2] == 1 for t in seen) + sum(t[4] == 1 for t in seen)
    assert 45 < first < 80  # expectation 60 of 90


# ---- RoRecomp ----------------------------------------------------------------------------------

def test_rorecomp_priority_then_compensation_from_buffer():
    rc = RoRecomp()
    # lengths 2, 6, 3, 7; correct, correct, wrong, wrong; median 4.5 -> SC, LC, SI, LI
    g1 = group([1, 1, 0, 0], pid=0, lengths=[2, 6, 3, 7])
    out1 = rc(Batch([g1], step=1), gen())
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert out1.rollouts == [g1.rollouts[0], g1.rollouts[3]]  # SC + LI
    assert torch.allclose(out1.adv_N, torch.tensor([a, -a]), atol=1e-5)
    assert [e[0] for e in rc.buffer] == [g1.rollouts[1], g1.rollouts[2]]  # LC + SI wait
    g2 = group([1, 0], pid=1, lengths=[2, 9])
    out2 = rc(Batch([g2], step=2), gen())
    # priority: SC (len 2) and LI (len 9); compensation: step 1's LC and SI with their stored advantages
    assert out2.rollouts == [g2.rollouts[0], g2.rollouts[1], g1.rollouts[1], g1.rollouts[2]]
    b = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert torch.allclose(out2.adv_N, torch.tensor([b, -b, a, -a]), atol=1e-5)
    assert len(rc.buffer) == 0


def test_rorecomp_alpha_keeps_most_extreme_and_capacity():
    rc = RoRecomp()
    g = group([1, 1, 0, 0, 1, 0], lengths=[1, 4, 9, 6, 5, 5])  # median 5: SC = len 1, 4, 5; LI = 9, 6
    out = rc(Batch([g]), gen(), alpha=0.4, capacity=0)  # ceil(.4 * 5) = 2: lengths 1 and 9
    assert sorted(r.num_tokens for r in out.rollouts) == [1, 9]
    assert len(rc.buffer) == 0  # capacity 0 drops every waiting response


def test_learner_uses_precomputed_advantages_and_builds_stateful_recomposer():
    b = Batch([group([1, 0, 0, 0])])
    st = Learner(Pol(), LearnerConfig(recompose="shuffle-r1", recompose_options={"experience_replay": False},
                                      minibatches=1)).update(b)
    assert st["batch_rollouts"] == 2
    assert abs(st["mean_abs_adv"] - 1.0) < 1e-4  # |1.5| and |-.5| from the full group, not +-0.707
    lr = Learner(Pol(), LearnerConfig(recompose="rorecomp"))
    assert isinstance(lr.recompose, RoRecomp)
    assert [e.name for e in registry.entries("recompose")] == ["rorecomp", "shuffle-r1"]


def test_batch_advantages_token_level_estimator_pads_to_recomposed_batch():
    g = group([1, 0, 1, 0], lengths=[2, 3, 4, 5])
    advs = batch_advantages(Batch([g]), "ktae")
    assert [a.shape[0] for a in advs] == [2, 3, 4, 5]
    out = RoRecomp()(Batch([g]), gen(), ktae(batch_input(Batch([g]))))  # SC (2), LI (5) -> [2, 5] padded
    assert out.adv_N.shape == (2, 5) and (out.adv_N[0, 2:] == 0).all()


def test_shuffle_r1_total_size_never_exceeds_kept_pairs():
    b = Batch([group([1, 0, 0, 0], pid=p) for p in range(3)])  # 3 kept pairs after prune .5
    assert len(shuffle_r1(b, gen(), replay_times=8).rollouts) == 6  # 3 draws of one pair, not 8
    b2 = Batch([group([1, 0, 1, 0, 0, 0, 1, 0], pid=p) for p in range(5)])  # 10 kept pairs
    assert len(shuffle_r1(b2, gen(), replay_times=4).rollouts) == 2 * 4 * 2  # 4 draws of 10 // 4 = 2
