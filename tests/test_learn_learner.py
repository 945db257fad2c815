"""The learner's data path: inputs from the batch, estimator trackers (MSSR's baseline), reward
components (GD2PO), the recomposer's estimator, and checkpoint round trips of all learner state."""
import io
import math

import pytest
import torch

from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.learn.advantages import BetaBaseline, batch_input
from rollwise.learn.learner import Learner, LearnerConfig
from rollwise.learn.recompose import RoRecomp
from rollwise.tasks.reward import Scorer

from fakes import ConstPolicy as Pol


def ro(reward, n_tokens=3, tok=1, pid=0, parts=None, text=""):
    return Rollout(pid, [1], torch.full((n_tokens,), tok), torch.full((n_tokens,), -1.0), text, "eos", 0,
                   reward=reward, correct=reward >= 1, reward_parts=parts)


def group(rewards, pid=0, lengths=None):
    lengths = lengths or [3] * len(rewards)
    return Group(Prompt(pid, "", ""), [ro(r, n, tok=i + 1, pid=pid) for i, (r, n) in enumerate(zip(rewards, lengths))])


def close(a, b, tol=1e-4):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    return torch.load(io.BytesIO(buf.getvalue()), weights_only=False)


# ---- inputs from the batch -------------------------------------------------------------------

def test_batch_input_fills_reward_parts_only_when_every_rollout_has_them():
    g = Group(Prompt(0, "", ""), [ro(1.0, parts=(1.0, 1.0)), ro(0.5, parts=(0.0, 1.0))])
    inp = batch_input(Batch([g]))
    assert close(inp.reward_parts_NK, [[1, 1], [0, 1]]) and inp.ref_pass_rate_G is None
    g.rollouts.append(ro(0.0))  # one scalar-reward rollout: no components for the batch
    assert batch_input(Batch([g])).reward_parts_NK is None
    g.rollouts[-1] = ro(0.0, parts=(0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="different numbers of reward components"):
        batch_input(Batch([g]))


# ---- MSSR: the learner owns the baseline -----------------------------------------------------

def test_mssr_baseline_is_the_prior_then_sees_the_batch():
    # normalize off and entropy 0 (no bonus): the advantage is exactly r - b
    cfg = LearnerConfig(advantage="mssr", advantage_options={"normalize": False, "tracker": {"lam": 0.5}})
    lr = Learner(Pol(), cfg)
    assert isinstance(lr.tracker, BetaBaseline) and lr.tracker.lam == 0.5
    b = Batch([group([1, 0, 0, 0], pid=5), group([1, 1], pid=9)])
    a1 = lr.advantages(b)
    assert close(a1[:, 0], [0.5, -0.5, -0.5, -0.5, 0.5, 0.5])  # the prior Beta(1, 1): b = .5 for both
    # after the batch: prompt 5 alpha = .5 + 1, beta = .5 + 3 -> .3; prompt 9 alpha = .5 + 2, beta = .5 -> 5/6
    assert lr.tracker.ab == {5: (1.5, 3.5), 9: (2.5, 0.5)}
    a2 = lr.advantages(b)
    assert close(a2[:, 0], [0.7, -0.3, -0.3, -0.3, 1 / 6, 1 / 6])


def test_mssr_update_uses_the_prior_and_records_the_outcomes():
    lr = Learner(Pol(), LearnerConfig(advantage="mssr", advantage_options={"normalize": False}, minibatches=1))
    st = lr.update(Batch([group([1, 0, 0, 0], pid=2)]))
    assert st["updated"] == 1 and st["learn_rows"] == 4
    assert abs(st["mean_abs_adv"] - 0.5) < 1e-6  # |r - .5|; the posterior .33 would give .41
    assert lr.tracker.ab[2] == pytest.approx((0.96 + 1, 0.96 + 3))


def test_tracker_options_need_a_tracked_estimator():
    with pytest.raises(ValueError, match="keeps no state across batches"):
        Learner(Pol(), LearnerConfig(advantage="grpo", advantage_options={"tracker": {"lam": 0.5}}))
    assert Learner(Pol(), LearnerConfig()).tracker is None


# ---- GD2PO: reward components from the Scorer to the estimator --------------------------------

def test_scorer_components_reach_gd2po_through_the_learner():
    def fn(response, answer):  # two components that disagree on rows 1 and 2
        return {"correct": float(response[0] == answer), "tidy": float(response[1] == "t")}

    g = Group(Prompt(0, "q", "y"), [ro(0, n_tokens=1, text=t, tok=i + 1) for i, t in enumerate(["yt", "yx", "nt", "nx"])])
    Scorer(fn).score([g])
    assert [r.reward_parts for r in g.rollouts] == [(1, 1), (1, 0), (0, 1), (0, 0)]
    assert [r.reward for r in g.rollouts] == [1.0, 0.5, 0.5, 0.0]  # the mean of the parts
    lr = Learner(Pol(), LearnerConfig(advantage="gd2po", minibatches=1))
    # per component GRPO +-.866; rows 1, 2 conflict (sum 0) and are masked; g_q = .5 -> [.866, 0, 0, -.866];
    # whitened over the two kept tokens (unbiased var 1.5): +-.7071
    s = 0.5 * 2 * 0.5 / math.sqrt(1 / 3) / math.sqrt(1.5)
    assert close(lr.advantages(Batch([g])), [s, 0, 0, -s])
    st = lr.update(Batch([g]))
    assert st["learn_rows"] == 2 and abs(st["mean_abs_adv"] - s / 2) < 1e-5


def test_gd2po_without_components_fails_clearly():
    lr = Learner(Pol(), LearnerConfig(advantage="gd2po"))
    with pytest.raises(ValueError, match="reward_parts_NK.*task_options.reward_parts=true"):
        lr.update(Batch([group([1, 0, 0, 1])]))


# ---- recomposers use the learner's estimator ----------------------------------------------------

def test_recomposer_uses_the_learner_advantage_unless_overridden():
    b = Batch([group([1, 0, 0, 0])])  # shuffle-r1 (no ABS, prune .5) keeps the pair (rollout 0, rollout 3)
    opts = {"experience_replay": False}

    def mean_abs(**cfg):
        return Learner(Pol(), LearnerConfig(recompose="shuffle-r1", minibatches=1, **cfg)).update(b)["mean_abs_adv"]

    assert abs(mean_abs(recompose_options=opts) - 1.0) < 1e-4  # GRPO: |1.5| and |-.5|
    assert abs(mean_abs(advantage="dr-grpo", recompose_options=opts) - 0.5) < 1e-6  # |.75| and |-.25|
    # mc-grpo with mad_eps .5: [2, 0, 0, 0] -> 1.0; an explicit override wins and the learner's
    # options (mc-grpo's) do not leak into it
    assert abs(mean_abs(advantage="mc-grpo", advantage_options={"mad_eps": 0.5}, recompose_options=opts) - 1) < 1e-6
    over = mean_abs(advantage="mc-grpo", advantage_options={"mad_eps": 0.5},
                    recompose_options={**opts, "advantage": "dr-grpo"})
    assert abs(over - 0.5) < 1e-6
    over_opts = mean_abs(advantage="dr-grpo", recompose_options={**opts, "advantage": "grpo",
                                                                 "advantage_options": {"scale_std": False}})
    assert abs(over_opts - 0.5) < 1e-6


# ---- checkpoints: the tracker and the RoRecomp buffer ---------------------------------------------

def test_learner_state_roundtrip_restores_baseline_and_rorecomp_buffer():
    cfg = LearnerConfig(advantage="mssr", recompose="rorecomp", recompose_options={"compensation_size": 2},
                        minibatches=1)
    # prompt 0: lengths 2, 6, 3, 7; correct, correct, wrong, wrong -> SC, LC, SI, LI: LC and SI wait.
    # prompt 1: two short correct (SC); its baseline moves to (.96 + 2) / (1.92 + 2) = .755
    b1 = Batch([group([1, 1, 0, 0], pid=0, lengths=[2, 6, 3, 7]), group([1, 1], pid=1, lengths=[2, 2])], step=1)
    b2 = Batch([group([1, 1, 0, 0], pid=0, lengths=[2, 6, 3, 7]), group([0, 1], pid=1, lengths=[9, 2])], step=2)
    a = Learner(Pol(), cfg)
    a.update(b1)
    saved = roundtrip(a.state_dict())
    assert len(saved["recompose"]["buffer"]) == 2 and set(saved["tracker"]["ab"]) == {0, 1}
    b = Learner(Pol(), cfg)
    b.policy.model.load_state_dict(a.policy.model.state_dict())
    b.load_state_dict(saved)
    assert b.tracker.ab == a.tracker.ab and b.recompose.calls == 1
    assert [w.rollout.to_state()["token_ids_T"].tolist() for w in b.recompose.buffer] == [[2] * 6, [3] * 3]
    sa, sb = a.update(b2), b.update(b2)
    # step 2 trains its SC + LI and step 1's two waiting rows, with the baseline that saw step 1
    assert sa["batch_rollouts"] == 6 and sa == sb
    assert roundtrip(a.state_dict())["tracker"] == roundtrip(b.state_dict())["tracker"]
    fresh = Learner(Pol(), cfg).update(b2)  # without the restored state the step differs
    assert fresh["batch_rollouts"] == 4 and fresh["mean_abs_adv"] != sa["mean_abs_adv"]


def test_rorecomp_state_restores_equal_entries_and_grouping():
    rc = RoRecomp()
    g1 = group([1, 1, 0, 0], pid=0, lengths=[2, 6, 3, 7])
    g2 = group([1, 0, 1, 0], pid=4, lengths=[1, 2, 8, 9])  # LC (8) and SI (2) wait too
    rc(Batch([g1, g2], step=1), torch.Generator().manual_seed(0))
    back = RoRecomp()
    back.load_state_dict(roundtrip(rc.state_dict()))
    g3 = group([1, 0], pid=7, lengths=[2, 9])
    o1 = rc(Batch([g3], step=2), torch.Generator(), compensation_size=4)
    o2 = back(Batch([g3], step=2), torch.Generator(), compensation_size=4)
    key = lambda out: [(g.prompt, [(r.prompt_id, r.token_ids_T.tolist(), r.reward, r.correct) for r in g.rollouts])  # noqa: E731
                       for g in out.groups]
    assert key(o1) == key(o2) and torch.equal(o1.adv_N, o2.adv_N)
    # one output group per original group: g3's priority rows, then g1's and g2's waiting rows
    assert [g.prompt.id for g in o2.groups] == [7, 0, 4] and [g.n for g in o2.groups] == [2, 2, 2]


# ---- zero-variance groups leave the update -----------------------------------------------------

def test_all_equal_non_dyadic_groups_are_dropped_like_group_zero_variance():
    b = Batch([group([0.1] * 8, pid=0), group([0.7] * 8, pid=1), group([1 / 3] * 8, pid=2), group([1, 0, 0, 0], pid=3)])
    assert [g.zero_variance for g in b.groups] == [True, True, True, False]
    lr = Learner(Pol(), LearnerConfig(minibatches=1))
    adv = lr.advantages(b)
    assert (adv[:24] == 0).all()
    st = lr.update(b)
    assert st["zero_var_frac"] == 0.75 and st["learn_rows"] == 4  # only the informative group trains


def test_zero_variance_groups_leave_the_token_mean_denominator_by_default():
    # The zero-variance normaliser (TRL issue #6367, its loss_type "dapo_zv") is rollwise's default: [1, 0]
    # with 2 and 4 tokens trains, [1, 1] (two 3-token rows) has advantage 0. At ratio 1 the loss is -A per
    # token: -a * 2 + a * 4 = 2a, over the 6 tokens of the rows that carry signal, not all 12 (TRL's "dapo",
    # which drop_zero_adv=False reproduces: the all-equal rows stay in the update and its denominator)
    b = Batch([group([1, 0], lengths=[2, 4]), group([1, 1], pid=1)])
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO of [1, 0]
    st = Learner(ThetaPolicy(-0.5), LearnerConfig(minibatches=1)).update(b)
    assert st["learn_rows"] == 2 and abs(st["loss"] - 2 * a / 6) < 1e-6
    st = Learner(ThetaPolicy(-0.5), LearnerConfig(minibatches=1, drop_zero_adv=False)).update(b)
    assert st["learn_rows"] == 4 and abs(st["loss"] - 2 * a / 12) < 1e-6


# ---- the KL term reaches zero-advantage rows -----------------------------------------------------

class ThetaPolicy:
    """log pi = theta for every response token, theta one trainable scalar."""

    def __init__(self, theta):
        self.model, self.version = torch.nn.Linear(1, 1), 0
        with torch.no_grad():
            self.model.bias.fill_(theta)
            self.model.weight.zero_()

    def response_logprobs(self, prompts, responses, temperature):
        rows = [self.model.bias.expand(len(r)) for r in responses]
        out = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
        return out, torch.zeros_like(out), None


def test_kl_term_trains_rows_with_zero_advantage():
    # one all-equal group: advantage 0, so only the KL penalty can move theta. log pi = -.5, log ref = -1:
    # d = log ref - log pi = -.5, k3 = e^d - d - 1 = .1065; d k3 / d theta = 1 - e^d > 0, so Adam's first
    # step moves theta down by lr (towards the reference)
    b = Batch([group([1, 1, 1, 1])])
    cfg = LearnerConfig(lr=0.01, minibatches=1, kl_coef=0.1)
    pol = ThetaPolicy(-0.5)
    st = Learner(pol, cfg, ref_policy=ThetaPolicy(-1.0)).update(b)
    assert st["updated"] == 1 and st["learn_rows"] == 4
    assert abs(st["kl"] - (math.exp(-0.5) + 0.5 - 1)) < 1e-6
    assert abs(pol.model.bias.item() - (-0.5 - 0.01)) < 1e-6
    # without a KL term the same batch has nothing to learn: no rows, no step
    pol = ThetaPolicy(-0.5)
    st = Learner(pol, LearnerConfig(lr=0.01, minibatches=1)).update(b)
    assert st["updated"] == 0 and st["learn_rows"] == 0 and pol.model.bias.item() == -0.5


def test_kl_term_keeps_zero_advantage_rows_in_the_denominator():
    # [1, 0] with 2 and 4 tokens trains; [1, 1] adds two 3-token rows of KL only. At ratio 1 the PG
    # part is -A per token: -a * 2 + a * 4 = 2a; token-mean divides by all 12 tokens (verl), not 6
    b = Batch([group([1, 0], lengths=[2, 4]), group([1, 1], pid=1)])
    cfg = LearnerConfig(minibatches=1, kl_coef=0.5)
    st = Learner(ThetaPolicy(-0.5), cfg, ref_policy=ThetaPolicy(-1.0)).update(b)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO of [1, 0]
    k3 = math.exp(-0.5) + 0.5 - 1
    assert st["learn_rows"] == 4 and abs(st["loss"] - (2 * a / 12 + 0.5 * k3)) < 1e-6


def test_kl_estimator_option():
    # log pi = -.5, log ref = -1: k2 = (.5)^2 / 2 = .125, k1 = .5
    b = Batch([group([1, 1, 1, 1])])
    for name, kl in [("k2", 0.125), ("k1", 0.5), ("low_var_kl", math.exp(-0.5) + 0.5 - 1)]:
        cfg = LearnerConfig(minibatches=1, kl_coef=0.1, kl_estimator=name)
        st = Learner(ThetaPolicy(-0.5), cfg, ref_policy=ThetaPolicy(-1.0)).update(b)
        assert abs(st["kl"] - kl) < 1e-6, name
    with pytest.raises(ValueError, match="unknown kl_estimator 'k4'"):
        Learner(Pol(), LearnerConfig(kl_estimator="k4"))
