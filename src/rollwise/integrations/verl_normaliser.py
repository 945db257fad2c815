"""The zero-variance loss normaliser inside verl's v1 trainer (`sampler_kwargs.drop_zero_adv=true`).

rollwise's learner option `drop_zero_adv` (TRL's `drop_zero_adv=True`; TRL issue #6367): rows whose
advantage is 0 everywhere leave the loss *and* its token-mean denominator, so a batch's zero-variance
groups no longer dilute the gradient of the groups with signal.

In verl's terms: the actor's policy loss masks tokens with `response_mask`, but the token-mean
denominator is `batch_num_tokens`, which verl's engines take as the sum of the batch's `loss_mask`
(a TransferQueue field the agent loop writes as a copy of `response_mask`; `agg_loss` divides by it).
So, right after verl's own `_compute_advantage` (on the trainer instance, as the replay buffer routes
`_next_train_batch`), the rows

* of a group (one uid) of at least two sessions whose rewards (`rm_scores` summed, per session its
  last output) are all equal: their advantages are set to exactly 0 (verl's GRPO divides the float32
  rounding error of a group mean by std + eps: eight 0.7s get advantages up to 0.19; rollwise's `grpo`
  gives such groups exactly 0, and so does this), and
* whose advantages are already 0 everywhere,

get `loss_mask` 0. Their policy-gradient term is 0 (advantage 0), so the loss's numerator is
unchanged and its denominator counts only the tokens of rows with signal: the step rollwise's learner
takes (tests/test_integrations_verl_normaliser.py checks it against verl's own functions).

Refused, in one line naming the setting, where the normaliser would not be that step: a loss
aggregation other than `token-mean` (only it reads `batch_num_tokens`), a KL loss, an entropy bonus or
a policy loss with a term beyond advantage × factor (`dro`, `kl_cov`; a zero-advantage row still carries
their gradient), KL in the reward (equal outcome rewards are then
not equal rewards), and estimators without a group baseline (equal rewards give zero advantages only
with one).
"""
from __future__ import annotations

from collections import defaultdict

import torch

# verl estimators whose advantage of a group with equal rewards is 0 (a group baseline)
GROUP_BASELINE = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized")
# verl policy losses whose per-token loss is the advantage times a factor (read in verl 0.9.1's core_algos), so
# a zero-advantage row adds exactly 0; dro (a log-ratio penalty) and kl_cov (a KL penalty) do not, and
# clip_cov and bypass_mode are not read here
ADVANTAGE_PROPORTIONAL = ("vanilla", "gspo", "sapo", "gpg", "geo_mean", "cispo", "dppo_tv", "dppo_kl")


def refuse_normaliser(cfg, host: str) -> None:
    """Raise, naming the setting, if verl's config makes drop_zero_adv something other than rollwise's step."""
    def get(path: str, default):
        node = cfg
        for part in path.split("."):
            if node is None or part not in node:
                return default
            node = node[part]
        return node

    agg = get("actor_rollout_ref.actor.loss_agg_mode", "token-mean")
    if agg != "token-mean":
        raise ValueError(f"{host}: drop_zero_adv changes the token-mean denominator, which "
                         f"actor_rollout_ref.actor.loss_agg_mode={agg} does not read; use token-mean or drop it")
    mode = get("actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla")
    if mode not in ADVANTAGE_PROPORTIONAL:
        raise ValueError(f"{host}: drop_zero_adv with actor_rollout_ref.actor.policy_loss.loss_mode={mode}: a "
                         f"zero-advantage row adds 0 to the loss only in {ADVANTAGE_PROPORTIONAL}")
    if get("actor_rollout_ref.actor.use_kl_loss", False):
        raise ValueError(f"{host}: drop_zero_adv with actor_rollout_ref.actor.use_kl_loss=true: a zero-advantage row "
                         "still carries the KL gradient (rollwise's learner ignores drop_zero_adv there)")
    if float(get("actor_rollout_ref.actor.entropy_coeff", 0.0) or 0.0) != 0.0:
        raise ValueError(f"{host}: drop_zero_adv with actor_rollout_ref.actor.entropy_coeff != 0: a zero-advantage "
                         "row still carries the entropy gradient; set entropy_coeff=0 or drop it")
    if get("algorithm.use_kl_in_reward", False):
        raise ValueError(f"{host}: drop_zero_adv with algorithm.use_kl_in_reward=true: the KL term makes equal "
                         "outcome rewards unequal, so no group has zero variance")
    est = str(get("algorithm.adv_estimator", "grpo"))
    if est not in GROUP_BASELINE:
        raise ValueError(f"{host}: drop_zero_adv needs an estimator with a group baseline {GROUP_BASELINE} (equal "
                         f"rewards then give zero advantages); algorithm.adv_estimator={est}")


def zero_adv_rows(keys: list[str], rewards: list[float], advantages: list[torch.Tensor]) -> tuple[list[bool], list[bool]]:
    """For each row `{uid}_{session}_{index}`: (dead, flat). `flat`: its group (uid) has at least two
    sessions and their rewards (each session's last output's) are all equal; `dead`: flat, or its
    advantages are 0 everywhere. Dead rows leave the loss's denominator; flat rows' advantages become 0."""
    last: dict[str, dict[str, tuple[int, float]]] = defaultdict(dict)  # uid -> session -> (index, reward)
    for key, r in zip(keys, rewards):
        uid, session, index = key.rsplit("_", 2)
        seen = last[uid].get(session)
        if seen is None or seen[0] < int(index):
            last[uid][session] = (int(index), float(r))
    flat_uid = {uid: len(s) > 1 and len({r for _, r in s.values()}) == 1 for uid, s in last.items()}
    flat = [flat_uid[k.rsplit("_", 2)[0]] for k in keys]
    dead = [f or not bool(torch.as_tensor(a).ne(0).any()) for f, a in zip(flat, advantages)]
    return dead, flat


def apply_normaliser(batch) -> dict:
    """After verl's `_compute_advantage`: zero the advantages of flat groups and the `loss_mask` of dead
    rows in TransferQueue (see the module docstring). `batch`: verl's KVBatchMeta. Returns the metrics."""
    import transfer_queue as tq
    from tensordict import TensorDict

    rows = [(i, k) for i, (k, tag) in enumerate(zip(batch.keys, batch.tags))
            if not tag.get("is_padding", False) and k.count("_") >= 2]  # verl's padding rows keep their own masks
    if not rows:
        return {"zero_adv_rows": 0}
    keys = [k for _, k in rows]
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id,
                           select_fields=["rm_scores", "advantages", "loss_mask"])
    rewards = [float(s.sum().item()) for s in data["rm_scores"]]
    advantages, masks = list(data["advantages"]), list(data["loss_mask"])
    dead, flat = zero_adv_rows(keys, rewards, advantages)
    at = [j for j, d in enumerate(dead) if d]
    if at:
        fields = {"loss_mask": torch.nested.as_nested_tensor([torch.zeros_like(masks[j]) for j in at],
                                                             layout=torch.jagged),
                  "advantages": torch.nested.as_nested_tensor(
                      [torch.zeros_like(advantages[j]) if flat[j] else advantages[j] for j in at], layout=torch.jagged)}
        tq.kv_batch_put(keys=[keys[j] for j in at], partition_id=batch.partition_id,
                        fields=TensorDict(fields, batch_size=len(at)))
    return {"zero_adv_rows": len(at), "zero_adv_tokens": int(sum(int(masks[j].sum()) for j in at))}


def install_normaliser(trainer, log: list | None = None) -> None:
    """Route this trainer instance's `_compute_advantage` through the normaliser (the class is untouched);
    its metrics go to verl's step metrics as training/rollwise/zero_adv_rows and _tokens."""
    compute = trainer._compute_advantage

    def _compute_advantage(batch, metrics):
        out = compute(batch, metrics=metrics)
        got = apply_normaliser(out)
        metrics.update({f"training/rollwise/{k}": float(v) for k, v in got.items()})
        if log is not None:
            log.append(got)
        return out

    trainer._compute_advantage = _compute_advantage
