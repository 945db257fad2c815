"""RL-ZVP (learn/zvp.py): eq. 5 on hand-computed cases, GRPO where rewards differ, and the rows it
trains are charged to the learner."""
import math

import pytest
import torch

from rollwise.core import registry
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.learn.advantages import AdvInput, grpo
from rollwise.learn.learner import Learner, LearnerConfig
from rollwise.learn.zvp import rl_zvp
from rollwise.run.config import load_config

from fakes import ConstPolicy

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 1 has 2 tokens
ENT = torch.tensor([[0.5, 2.0, 1.0], [3.0, 1.0, 9.0]])  # row 1's 9.0 is padding: never read


def two_rows(reward):
    return AdvInput(torch.tensor([reward, reward]), torch.tensor([0, 0]), mask_NT=MASK, entropy_NT=ENT)


def test_all_right_group_gets_alpha_times_entropy():
    # alpha = 0.1: row 0 -> 0.1 * [0.5, 2, 1]; row 1 -> 0.1 * [3, 1], 0 on its padding
    a = rl_zvp(two_rows(1.0))
    assert torch.allclose(a, torch.tensor([[0.05, 0.2, 0.1], [0.3, 0.1, 0.0]]))


def test_all_wrong_group_gets_minus_alpha_times_gap_to_the_row_max():
    # row 0: max 2 -> -0.1 * [1.5, 0, 1]; row 1: max over its own 2 tokens is 3 (not the padding's 9)
    # -> -0.1 * [0, 2], 0 on the padding
    a = rl_zvp(two_rows(0.0))
    assert torch.allclose(a, torch.tensor([[-0.15, 0.0, -0.1], [0.0, -0.2, 0.0]]))
    assert not torch.signbit(a[a == 0]).any()  # no -0.0 at a row's max


def test_alpha_scales_and_the_ablations_switch_branches():
    assert torch.allclose(rl_zvp(two_rows(1.0), alpha=0.2), 2 * rl_zvp(two_rows(1.0)))
    assert (rl_zvp(two_rows(1.0), positive=False) == 0).all()
    assert (rl_zvp(two_rows(0.0), negative=False) == 0).all()
    # w/o entropy scaling: +-alpha on every response token
    assert torch.allclose(rl_zvp(two_rows(0.0), entropy_scaling=False), -0.1 * MASK)
    assert torch.allclose(rl_zvp(two_rows(1.0), max_abs=0.15), torch.tensor([[0.05, 0.15, 0.1], [0.15, 0.1, 0.0]]))


def test_groups_with_spread_get_exactly_grpo():
    # group 0: [1, 0] has spread (GRPO); group 1: [1, 1] all right (shaped); group 2: [0, 0] all wrong
    r, g = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 2, 2])
    ent = torch.tensor([[1.0, 2.0]] * 6)
    a = rl_zvp(AdvInput(r, g, mask_NT=torch.ones(6, 2), entropy_NT=ent))
    base = grpo(AdvInput(r, g))
    assert torch.allclose(a[:2], base[:2, None].expand(2, 2))
    assert torch.allclose(a[2:4], torch.tensor([[0.1, 0.2]] * 2))
    assert torch.allclose(a[4:], torch.tensor([[-0.1, 0.0]] * 2))


def test_bad_options_are_one_line_naming_the_option():
    with pytest.raises(ValueError, match=r"^rl-zvp: alpha must be a finite number > 0, got -1\.0$"):
        rl_zvp(two_rows(1.0), alpha=-1.0)
    with pytest.raises(ValueError, match=r"^rl-zvp: positive must be true or false, got 1$"):
        rl_zvp(two_rows(1.0), positive=1)
    with pytest.raises(ValueError, match="entropy_NT"):
        rl_zvp(AdvInput(torch.tensor([1.0, 1.0]), torch.tensor([0, 0]), mask_NT=MASK))
    with pytest.raises(ValueError, match=r"learner.advantage_options.alpha must be a number, got 'x'"):
        load_config(None, {"learner.advantage": "rl-zvp", "learner.advantage_options": {"alpha": "x"}})


def test_registered_as_a_zero_variance_learner():
    e = registry.get("advantage", "rl-zvp")
    assert e.facts == {"needs_groups": True, "zero_variance_signal": True}
    assert [x.name for x in registry.entries("advantage") if x.facts.get("zero_variance_signal")] == ["rl-zvp"]


# ---- through the learner: the zero-variance rows train and are charged ----------------------------

def rollout(pid, reward, ent):
    n = len(ent)
    return Rollout(pid, [1, 2], torch.full((n,), 3), torch.full((n,), -1.0), "", "eos", 0, reward=reward,
                   correct=reward >= 1, entropy=sum(ent) / n, entropy_T=torch.tensor(ent))


def test_zero_variance_rows_train_and_the_learner_charges_them():
    # 3 groups of 2 rows, 3 tokens and a 2-token prompt each: [1, 0] has spread, [1, 1] and [0, 0] do not
    b = Batch([Group(Prompt(0, "", ""), [rollout(0, 1.0, [1, 2, 3]), rollout(0, 0.0, [1, 2, 3])]),
               Group(Prompt(1, "", ""), [rollout(1, 1.0, [1, 2, 3]), rollout(1, 1.0, [1, 1, 1])]),
               Group(Prompt(2, "", ""), [rollout(2, 0.0, [1, 2, 3]), rollout(2, 0.0, [2, 2, 2])])])
    grpo_st = Learner(ConstPolicy(), LearnerConfig(minibatches=1)).update(b)
    zvp_st = Learner(ConstPolicy(), LearnerConfig(minibatches=1, advantage="rl-zvp")).update(b)
    # GRPO trains the 2 rows with spread; RL-ZVP also the 2 all-right rows and the all-wrong row whose
    # entropies differ (the one with equal entropies is 0 everywhere, -alpha (max H - H) = 0: skipped)
    assert grpo_st["learn_rows"] == 2 and zvp_st["learn_rows"] == 5
    assert grpo_st["learner_tokens"] == 2 * (3 + 2) and zvp_st["learner_tokens"] == 5 * (3 + 2)
    assert zvp_st["old_logprob_tokens"] == 5 * 5
    lr = Learner(ConstPolicy(), LearnerConfig(advantage="rl-zvp", advantage_options={"alpha": 0.2}))
    adv = lr.advantages(b)
    assert torch.allclose(adv[5], torch.zeros(3)) and math.isclose(float(adv[3, 0]), 0.2, rel_tol=1e-6)
