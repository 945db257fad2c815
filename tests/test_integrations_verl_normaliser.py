"""The zero-variance loss normaliser in verl (`sampler_kwargs.drop_zero_adv=true`), checked against verl's own
functions: verl's GRPO advantages (`compute_grpo_outcome_advantage`, and the v1 trainer's own
`_compute_advantage` on a real CPU TransferQueue), verl's policy loss (`compute_policy_loss_vanilla`, token-mean)
with the denominator verl's engines take (`batch_num_tokens` = the batch's `loss_mask` summed), and rollwise's own
learner with `drop_zero_adv` on the same batch. Stood in: the actor's model (a float64 embedding policy, as in
tests/test_verl_equivalence.py) and the trainer object (a stub carrying verl's real methods); the engines'
`forward_backward_batch` is replaced by its one line that counts `loss_mask`.
Skipped unless verl's v1 trainer and transferqueue are installed (`bash scripts/setup.sh --with verl-v1`).
"""
import numpy as np
import pytest
import torch

tq = pytest.importorskip("transfer_queue", exc_type=ImportError)
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base", exc_type=ImportError)
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", exc_type=ImportError)

from omegaconf import OmegaConf  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402

from rollwise.integrations.verl_normaliser import install_normaliser, refuse_normaliser, zero_adv_rows  # noqa: E402
from rollwise.learn.learner import Learner, LearnerConfig  # noqa: E402

from test_integrations_verl import make_buffer, make_trainer, transfer_queue  # noqa: E402,F401
from test_verl_equivalence import F64, EmbeddingPolicy, actor_cfg, outcome_rewards_NT, same, update_batch  # noqa: E402


def keys_of(batch):
    return [f"u{gi}_{s}_0" for gi, g in enumerate(batch.groups) for s in range(g.n)]


def test_rows_leave_when_their_group_is_flat_or_their_advantage_is_zero():
    keys = ["a_0_0", "a_1_0", "a_1_1", "b_0_0", "b_1_0", "c_0_0", "d_0_0"]
    rewards = [1.0, 0.0, 1.0, 0.7, 0.7, 0.0, 1.0]  # a: session 1's last output (index 1) is right: flat at 1
    adv = [torch.full((3,), 1e-3), torch.zeros(2), torch.full((2,), 1e-3), torch.full((2,), 0.19), torch.full((4,), 0.19),
           torch.zeros(3), torch.ones(2)]
    dead, flat = zero_adv_rows(keys, rewards, adv)
    assert flat == [True, True, True, True, True, False, False]  # c and d: one session, no group to be flat
    assert dead == [True, True, True, True, True, True, False]  # c: advantage 0 everywhere (verl: r / (1 + eps))


def verl_step_with_normaliser(batch, cfg, policy, normalise=True):
    """verl's step on every row of the batch: verl's GRPO advantages, the normaliser's loss_mask and zeroed
    advantages, verl's vanilla policy loss (token-mean) with the engines' denominator (loss_mask summed)."""
    rs = batch.rollouts
    prompts, responses = [r.prompt_ids for r in rs], [r.token_ids_T.tolist() for r in rs]
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones(r.num_tokens, dtype=F64) for r in rs], batch_first=True)
    r_N = torch.tensor([r.reward for r in rs], dtype=F64)
    index = np.array([gi for gi, g in enumerate(batch.groups) for _ in g.rollouts])
    adv, _ = core_algos.compute_grpo_outcome_advantage(outcome_rewards_NT(r_N, mask), mask, index)
    loss_mask = mask.clone()
    if normalise:
        dead, flat = zero_adv_rows(keys_of(batch), r_N.tolist(), [adv[i, :rs[i].num_tokens] for i in range(len(rs))])
        adv[torch.tensor(flat)] = 0.0
        loss_mask[torch.tensor(dead)] = 0.0
    with torch.no_grad():
        old = policy.response_logprobs(prompts, responses)[0]
    opt = torch.optim.SGD(policy.model.parameters(), lr=cfg.lr)
    for _ in range(cfg.epochs):  # one mini-batch: the whole batch, so no order to match
        logp = policy.response_logprobs(prompts, responses)[0]
        T = logp.shape[1]
        info = {"dp_size": 1, "batch_num_tokens": int(loss_mask[:, :T].sum()), "global_batch_size": len(rs)}
        loss, _ = core_algos.compute_policy_loss_vanilla(old[:, :T], logp, adv[:, :T], mask[:, :T], "token-mean",
                                                         actor_cfg(0.2, 0.28, 1e30, **info))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return adv


def test_verl_step_with_the_normaliser_is_rollwise_learners_drop_zero_adv_step():
    cfg = LearnerConfig(lr=0.3, grad_clip=1e9, epochs=2, minibatches=1, loss_agg="token-mean", drop_zero_adv=True)
    batch = update_batch()  # groups [1,0,0,1,1], [0.7]*4, [1,1,1], [1,0,0,0,0,0], [0,1]
    ours, theirs, plain = EmbeddingPolicy(), EmbeddingPolicy(), EmbeddingPolicy()
    learner = Learner(ours, cfg, seed=11)
    learner.opt = torch.optim.SGD(ours.model.parameters(), lr=cfg.lr)
    st = learner.update(batch)
    adv = verl_step_with_normaliser(batch, cfg, theirs)
    moved = (ours.model.weight - EmbeddingPolicy().model.weight).abs().max().item()
    assert st["updated"] == 1 and moved > 1e-3 and st["learn_rows"] == 5 + 6 + 2
    same(ours.model.weight.detach(), theirs.model.weight.detach(), "weights after the update")
    assert adv[5:12].abs().max().item() == 0.0  # the flat groups (0.7 x 4, 1 x 3)
    # without the normaliser verl's step differs: the flat groups' 7 rows count in the denominator
    verl_step_with_normaliser(batch, cfg, plain, normalise=False)
    assert (plain.model.weight - ours.model.weight).abs().max().item() > 1e-4


def test_flat_groups_get_exactly_zero_where_verls_grpo_keeps_a_rounding_error():
    # verl's GRPO in float32: the mean of eight 0.7s is not 0.7, and (r - mean) / (std + 1e-6) is about 0.056
    keys = [f"g_{s}_0" for s in range(8)]
    mask = torch.ones(8, 3)
    raw, _ = core_algos.compute_grpo_outcome_advantage(outcome_rewards_NT(torch.full((8,), 0.7), mask), mask,
                                                       np.zeros(8))
    assert raw.abs().max().item() > 0.05
    dead, flat = zero_adv_rows(keys, [0.7] * 8, list(raw))
    assert all(dead) and all(flat)  # the normaliser zeroes them (as rollwise's grpo does) and drops them


def advantage_trainer(estimator="grpo"):
    """A stub carrying verl's real `_compute_advantage` (and the submission methods of make_trainer)."""
    trainer = make_trainer(train_batch_size=4, n=2)
    trainer.config = OmegaConf.merge(trainer.config, {
        "algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                      "norm_adv_by_std_in_grpo": True, "rollout_correction": None},
        "actor_rollout_ref": {"actor": {"loss_agg_mode": "token-mean", "use_kl_loss": False, "entropy_coeff": 0.0}}})
    trainer._compute_advantage = trainer_base.PPOTrainer._compute_advantage.__get__(trainer)
    return trainer


def put_rows(groups):
    """Trajectories as AgentLoopWorkerTQ writes them (loss_mask a copy of response_mask), `groups` =
    {uid: [(reward, response length)]}; returns verl's KVBatchMeta of them."""
    keys, tags = [], []
    for uid, rows in groups.items():
        for s, (r, length) in enumerate(rows):
            scores = torch.zeros(length)
            scores[-1] = r
            key = f"{uid}_{s}_0"
            tq.kv_put(key=key, partition_id="train",
                      fields={"uid": uid, "rm_scores": scores, "response_mask": torch.ones(length, dtype=torch.long),
                              "loss_mask": torch.ones(length, dtype=torch.long), "rollout_log_probs": torch.zeros(length),
                              "old_log_probs": torch.zeros(length), "ref_log_prob": torch.zeros(length),
                              "values": torch.zeros(length)},
                      tag={"status": "success", "response_len": length})
            keys.append(key)
            tags.append({"status": "success", "response_len": length})
    return KVBatchMeta(partition_id="train", keys=keys, tags=tags)


def test_the_normaliser_after_verls_own_compute_advantage_in_transfer_queue(transfer_queue):
    trainer = advantage_trainer()
    log = []
    install_normaliser(trainer, log)
    groups = {"mixed": [(1.0, 3), (0.0, 5), (1.0, 2)], "flat7": [(0.7, 4), (0.7, 2), (0.7, 3)], "wrong": [(0.0, 2), (0.0, 6)]}
    meta = put_rows(groups)
    metrics = {}
    trainer._compute_advantage(meta, metrics=metrics)
    got = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["advantages", "loss_mask"])
    adv, lm = list(got["advantages"]), list(got["loss_mask"])
    # the mixed group keeps verl's advantages (r - mean) / (std + eps) and its loss_mask
    r = torch.tensor([1.0, 0.0, 1.0])
    want = (r - r.mean()) / (r.std() + 1e-6)
    for i in range(3):
        assert torch.allclose(adv[i], torch.full_like(adv[i], float(want[i])), atol=1e-6) and lm[i].sum() == lm[i].numel()
    # the flat groups: advantages exactly 0, out of the denominator
    for i in range(3, 8):
        assert adv[i].abs().max().item() == 0.0 and lm[i].sum().item() == 0
    assert metrics["training/rollwise/zero_adv_rows"] == 5.0 and metrics["training/rollwise/zero_adv_tokens"] == 17.0
    # verl's token-mean denominator (the engines' loss_mask sum) is now the mixed group's tokens
    assert sum(int(m.sum()) for m in lm) == 3 + 5 + 2 and log == [{"zero_adv_rows": 5, "zero_adv_tokens": 17}]
    tq.kv_clear(keys=list(meta.keys), partition_id="train")


def test_the_buffer_installs_the_normaliser_on_its_trainer_only(transfer_queue):
    trainer, other = advantage_trainer(), advantage_trainer()
    buffer = make_buffer(trainer, "uniform", drop_zero_adv=True)
    assert trainer._compute_advantage.__name__ == "_compute_advantage" and "_compute_advantage" in vars(trainer)
    meta = put_rows({"flat": [(1.0, 2), (1.0, 3)], "mixed": [(1.0, 2), (0.0, 2)]})
    metrics = {}
    trainer._compute_advantage(meta, metrics=metrics)
    assert metrics["training/rollwise/zero_adv_rows"] == 2.0 and buffer.normaliser_log[-1]["zero_adv_tokens"] == 5
    tq.kv_clear(keys=list(meta.keys), partition_id="train")
    metrics = {}
    meta = put_rows({"flat": [(1.0, 2), (1.0, 3)]})
    other._compute_advantage(meta, metrics=metrics)  # another trainer: verl's method, untouched
    assert "training/rollwise/zero_adv_rows" not in metrics
    tq.kv_clear(keys=list(meta.keys), partition_id="train")


@pytest.mark.parametrize("setting,value,words", [
    ("actor_rollout_ref.actor.loss_agg_mode", "seq-mean-token-mean", "loss_agg_mode=seq-mean-token-mean does not read"),
    ("actor_rollout_ref.actor.use_kl_loss", True, "still carries the KL gradient"),
    ("actor_rollout_ref.actor.entropy_coeff", 0.01, "entropy_coeff != 0"),
    ("algorithm.use_kl_in_reward", True, "use_kl_in_reward=true"),
    ("algorithm.adv_estimator", "gae", "adv_estimator=gae"),
    ("algorithm.adv_estimator", "reinforce_plus_plus", "group baseline"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode", "dro", "loss_mode=dro: a zero-advantage row adds 0"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode", "kl_cov", "loss_mode=kl_cov"),
])
def test_settings_where_the_normaliser_is_not_that_step_are_refused_in_one_line(setting, value, words):
    trainer = advantage_trainer()
    OmegaConf.update(trainer.config, setting, value)
    with pytest.raises(ValueError, match=words) as e:
        refuse_normaliser(trainer.config, "verl")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=words):
        make_buffer(trainer, "uniform", drop_zero_adv=True)
