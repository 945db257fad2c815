"""A rollwise planner in verl's async v1 trainers (`colocate_async`, `separate_async`): one step ahead.

verl 0.9.1's async trainers keep generation running while the actor trains: prompts are submitted
ahead (`num_warmup_batches`), their requests are aborted for each weight sync and resumed after it
(partial rollouts: `FullyAsyncLLMServerClient` resumes them inside the agent loop, so a trajectory's
tokens may span two policy versions), and verl's own `ReplayBufferAsync` trains whichever groups
have finished. A rollwise planner decides in steps (choose prompts and n, generate, look, maybe
generate more, settle the batch), so `RollwiseReplayBuffer` keeps the step and moves its first
round one step earlier:

    sample(t):  step t's rounds (its first was submitted during step t - 1), the batch settled and
                observed; then the planner opens step t + 1 and its first round goes to verl now,
                to generate while step t trains (separate_async: on the standalone rollout GPUs)
    prepare_step(t + 1): submits nothing (the trainer's `_add_batch_to_generate`, on that instance
                only, skips while the next step is open)

Step t + 1's prompts and sizes are chosen after step t's outcomes are observed, as in the sync
trainer, so the planner decides as it does there; only the weights differ: the first round samples
from the policy before step t's update (one step off, and in colocate_async a partial rollout
resumed on the new weights), its later rounds (stages, refills, pilots) from the current one.
verl's warmup call (`_add_async_warmup_batches`, before step 1) opens step 1 the same way.

Checkpoints: verl saves after a step, when the next step's first round is already out. The buffer
saves the planner's state as it was before that step opened (taken when it opened), and on resume
clears the TransferQueue partition verl restored (the in-flight round, which verl would re-issue
without the planner): the restored planner opens the step again and draws the same round.

In-flight watchers (DUET's abort) run too: the first round's watcher is opened when the round goes out
and consulted while it generates during the update. Each segment of rollwise's segmented agent loop is
one call of verl's client, and verl's partial-rollout client resumes an aborted call within that call's
own `max_tokens`, so a segment that spans a weight sync ends where it would have.

verl's `max_off_policy_threshold` is not otherwise applied: a step trains only its own rounds, the
first submitted one step earlier (a span of 2 in verl's count), the rest in the step.

Refused, in one line each: `max_off_policy_threshold=1` (it would drop every first round),
`num_warmup_batches` other than 0 or 1 (a deeper prefetch would choose
step t + 2 before step t's outcomes) and separate_async's `hybrid_rollout.enable_switch` (it lends the
training GPUs to generation until N groups of any step are sampleable; a planner step waits for its
own rounds).
"""
from __future__ import annotations

ASYNC_MODES = ("colocate_async", "separate_async")


def refuse_async(trainer_mode: str, trainer_config, max_off_policy_threshold, host: str) -> None:
    """One line naming what an async mode cannot run with a rollwise planner."""
    cfg = trainer_config or {}
    if max_off_policy_threshold is not None and int(max_off_policy_threshold) < 2:
        raise ValueError(f"{host}: trainer.v1.sampler.max_off_policy_threshold={max_off_policy_threshold} with a rollwise "
                         f"planner in {trainer_mode}: a step's first round is submitted one step before it trains "
                         "(a span of 2 in verl's count); set it >= 2 or null, or use trainer_mode=sync")
    warm = cfg.get("num_warmup_batches", 1)
    if warm not in (0, 1):
        raise ValueError(f"{host}: trainer.v1.{trainer_mode}.num_warmup_batches={warm} with a rollwise planner: it "
                         "runs one step ahead (0 or 1); a deeper prefetch would choose a step's prompts before the "
                         "previous step's outcomes are in")
    switch = (cfg.get("hybrid_rollout") or {}).get("enable_switch", False)
    if switch:
        raise ValueError(f"{host}: trainer.v1.{trainer_mode}.hybrid_rollout.enable_switch=true with a rollwise planner: "
                         "the switch waits until N groups of any step are sampleable, a planner step waits for its "
                         "own rounds")


def skip_prepared_steps(trainer, buffer) -> None:
    """Route this trainer instance's `_add_batch_to_generate` (prepare_step's submission) through the
    buffer: it submits nothing while the buffer has the next step open (its first round went out at the
    end of the last `sample`, or with verl's warmup)."""
    add = trainer._add_batch_to_generate

    def _add_batch_to_generate():
        if buffer.step_open:
            return None
        return add()

    trainer._add_batch_to_generate = _add_batch_to_generate


def clear_restored_round(trainer, partition_id: str = "train") -> int:
    """After verl restored an async checkpoint's TransferQueue: clear the training partition (the next
    step's first round, in flight when the checkpoint was taken), so that verl does not re-issue it
    behind the planner; the restored planner opens that step again. Returns the keys cleared."""
    import transfer_queue as tq

    keys = list((tq.kv_list(partition_id) or {}).get(partition_id, {}))
    if keys:
        tq.kv_clear(keys=keys, partition_id=partition_id)
    trainer._restored_tq_prompt_count = 0  # verl's warmup then submits (through the planner) as on a fresh start
    return len(keys)
