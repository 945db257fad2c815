"""rollwise planners in verl's async v1 trainers (`colocate_async`, `separate_async`): one step ahead.

Tested at the hook: the stub trainer of test_integrations_verl.py in an async trainer_mode (so verl's own
`_submit_batch_to_rollout` persists prompts as its async modes do), with verl's own `prepare_step`,
`_add_async_warmup_batches`, `_add_prompts_to_generate` and checkpoint methods, driven step by step as
`PPOTrainer.fit` drives them, against a real (CPU) TransferQueue. Stood in: the rollout servers and agent
loop (a scripted loop, sample j of prompt x fixed, that holds each submitted round until the test lets it
generate: generation that overlaps the update), the actor's update (nothing trains) and weight sync.
The partial-rollout resume itself (verl's `FullyAsyncLLMServerClient`, inside the agent loop) is invisible
to the replay buffer and is not exercised here.
Skipped unless verl's v1 trainer and transferqueue are installed (`bash scripts/setup.sh --with verl-v1`).
"""
from types import SimpleNamespace

import pytest

tq = pytest.importorskip("transfer_queue", exc_type=ImportError)
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base", exc_type=ImportError)

from omegaconf import OmegaConf  # noqa: E402

from rollwise.integrations import verl as rv  # noqa: E402

from test_integrations_verl import make_trainer, train_keys_left, transfer_queue  # noqa: E402,F401
from test_integrations_verl_stages import AR3PO, ScriptAgentLoop, mixed, staged  # noqa: E402

PPOTrainer = trainer_base.PPOTrainer
PODS_AR3PO = {"ar3po": {"k": 2, "stages": 3}, "pods": {"m": 2}}


class HeldLoop(ScriptAgentLoop):
    """The scripted agent loop, but a submitted round generates only when `run()` is called (by the test,
    while the actor 'trains', or by the buffer's poll): what was submitted and not yet generated is
    `held`. Each round's trajectories carry the trainer's step at submission (`global_steps`)."""

    def __init__(self, script):
        super().__init__(script)
        self.held = []
        self.submitted = []  # ([(prompt, n)], the trainer's step at submission) per round, in order

    def generate_sequences(self, batch):
        self.held.append(batch)
        self.submitted.append(([(int(batch["index"][i]), int(batch["__rollout_n__"][i])) for i in range(len(batch))],
                               int(batch["global_steps"])))

    def run(self):
        held, self.held = self.held, []
        for batch in held:
            super().generate_sequences(batch)


def async_trainer(mode, loop, pool=16, B=4, n=2, steps=None, out=None):
    trainer = make_trainer(train_batch_size=B, n=n)
    trainer.train_dataset = trainer.train_dataset[:pool]
    trainer.trainer_mode = mode
    trainer.agent_loop_manager = loop
    trainer._restored_tq_prompt_count = 0
    trainer.config = OmegaConf.merge(trainer.config, {"skip": {"rollout_tq": {"enable": False}}})
    trainer._add_async_warmup_batches = PPOTrainer._add_async_warmup_batches.__get__(trainer)
    if steps is not None:
        trainer.total_training_steps = steps
    if out is not None:  # verl's own checkpoint methods, with stand-ins for what they save (model, data)
        for name in ("_save_checkpoint", "_load_checkpoint"):
            setattr(trainer, name, getattr(PPOTrainer, name).__get__(trainer))
        trainer.config = OmegaConf.merge(trainer.config, {
            "trainer": {"default_local_dir": str(out), "default_hdfs_dir": None, "resume_mode": "auto",
                        "resume_from_path": None, "del_local_ckpt_after_load": False},
            "actor_rollout_ref": {"actor": {"checkpoint": {}}}})
        trainer.use_critic = False
        trainer.actor_rollout_wg = SimpleNamespace(save_checkpoint=lambda *a, **k: None,
                                                   load_checkpoint=lambda *a, **k: None)
        trainer.train_dataloader.state_dict = lambda: {}
        trainer.train_dataloader.load_state_dict = lambda state: None
        trainer.checkpoint_callback = SimpleNamespace(on_save=lambda **kw: None)
    return trainer


def buffer_for(trainer, mode, planner, options=None, seed=1, warmup=1, **config):
    buffer = rv.RollwiseReplayBuffer(
        trainer_mode=mode, trainer_config=OmegaConf.create({"num_warmup_batches": warmup, **config}),
        max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs=OmegaConf.create({"planner": planner, "seed": seed,
                                         **({"planner_options": options} if options else {})}),
        poll_interval=0.01, refill_fn=trainer._add_prompts_to_generate)
    loop = trainer.agent_loop_manager
    if isinstance(loop, HeldLoop):  # while the buffer waits for a round, the rollout servers generate
        buffer._wait_for_next_poll = lambda partition_id, last: (loop.run(), last)[1]
    return buffer


def run(trainer, buffer, first, last, B=4):
    """PPOTrainer.fit's order around the buffer: (warmup before step 1), then per step prepare_step, sample,
    the update (here: the held rounds generate, as on separate rollout GPUs), clear. Per step: the rounds
    submitted from its prepare_step until its sample returned ((prompt, n) each), the trained groups
    {prompt: [(tokens, step at submission)]}, and what was submitted but not yet generated when the
    update began."""
    loop, out = trainer.agent_loop_manager, []
    if first == 1:
        trainer.global_steps = 1
        trainer._add_async_warmup_batches(buffer.trainer_config.get("num_warmup_batches", 1))
    for step in range(first, last + 1):
        trainer.global_steps = step
        before = len(loop.submitted)
        trainer.prepare_step()
        meta, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=B)
        held = [[(int(b["index"][i]), int(b["__rollout_n__"][i])) for i in range(len(b))]
                for b in getattr(loop, "held", [])]
        data = tq.kv_batch_get(keys=list(meta.keys), partition_id="train", select_fields=["index", "responses"])
        groups = {}
        for k, key in enumerate(meta.keys):
            groups.setdefault(int(data["index"][k]), []).append((data["responses"][k].tolist(),
                                                                 meta.tags[k]["global_steps"]))
        if isinstance(loop, HeldLoop):
            loop.run()  # generation overlaps the update
        tq.kv_clear(keys=list(meta.keys), partition_id="train")  # as PPOTrainer.fit does after the update
        out.append({"rounds": [r for r, _ in loop.submitted[before:]], "groups": groups, "held": held,
                    "metrics": metrics})
    return out


@pytest.mark.parametrize("mode", ["separate_async", "colocate_async"])
@pytest.mark.parametrize("planner, options, script", [
    ("greso+dapo", None, mixed),  # selection and refill
    ("test_integrations_verl:Staircase", None, mixed),  # per-prompt n
    ("ar3po", AR3PO, mixed),  # stages and reuse
    ("pods+ar3po", PODS_AR3PO, staged),  # Bench 3.0's passing arm
])
def test_a_planner_one_step_ahead_decides_as_in_the_sync_trainer(transfer_queue, mode, planner, options, script):
    steps = 4
    sync_trainer = make_trainer(train_batch_size=4, n=2)
    sync_trainer.agent_loop_manager = ScriptAgentLoop(script)
    sync_buffer = buffer_for(sync_trainer, "sync", planner, options)
    expected = []
    for step in range(1, steps + 1):  # verl's sync step around the buffer
        sync_trainer.global_steps = step
        before = len(sync_trainer.agent_loop_manager.rounds)
        sync_trainer.prepare_step()
        meta, _ = sync_buffer.sample(global_steps=step, partition_id="train", batch_size=4)
        data = tq.kv_batch_get(keys=list(meta.keys), partition_id="train", select_fields=["index", "responses"])
        groups = {}
        for k in range(len(meta.keys)):
            groups.setdefault(int(data["index"][k]), []).append(data["responses"][k].tolist())
        tq.kv_clear(keys=list(meta.keys), partition_id="train")
        expected.append((sync_trainer.agent_loop_manager.rounds[before:], groups))

    loop = HeldLoop(script)
    trainer = async_trainer(mode, loop, steps=steps)
    buffer = buffer_for(trainer, mode, planner, options)
    got = run(trainer, buffer, 1, steps)
    # the same rounds in the same order (prompts and n), the same trained rows
    assert [r for r, _ in loop.submitted] == [r for rounds, _ in expected for r in rounds]
    for (rounds, groups), step in zip(expected, got):
        assert {p: [t for t, _ in rows] for p, rows in step["groups"].items()} == groups
    # one step ahead: while step t trains, step t + 1's first round (exactly) is out, not yet generated;
    # none after the last step
    for t in range(steps - 1):
        assert got[t]["held"] == [expected[t + 1][0][0]]
    assert got[-1]["held"] == []
    # the first round of step t + 1 is submitted at step t (it samples from the weights before step t's
    # update), its later rounds (stages, refills) at step t + 1; step 1's first round with verl's warmup
    when = [t - 1 if k == 0 and t > 1 else t for t, (rounds, _) in enumerate(expected, start=1) for k in range(len(rounds))]
    assert [gs for _, gs in loop.submitted] == when
    assert any(k > 0 for _, (rounds, _) in enumerate(expected) for k in range(len(rounds))) or planner == \
        "test_integrations_verl:Staircase"
    assert not train_keys_left() and not loop.held


def test_warmup_opens_step_one_and_prepare_step_submits_nothing_for_an_open_step(transfer_queue):
    loop = HeldLoop(mixed)
    trainer = async_trainer("separate_async", loop, steps=2)
    buffer = buffer_for(trainer, "separate_async", "uniform")
    trainer.global_steps = 1
    trainer._add_async_warmup_batches(1)  # verl's own, as on_train_begin calls it
    assert buffer.step_open and len(loop.held) == 1 and len(loop.held[0]) == 4
    trainer.prepare_step()  # verl's: nothing more is submitted for the open step
    assert len(loop.held) == 1
    buffer.sample(global_steps=1, partition_id="train", batch_size=4)
    assert buffer.step_open and len(loop.held) == 1  # step 2's first round, out while step 1 trains
    loop.run()
    trainer.global_steps = 2
    meta, _ = buffer.sample(global_steps=2, partition_id="train", batch_size=4)
    assert not buffer.step_open and not loop.held  # the last step opens nothing
    tq.kv_clear(keys=list(meta.keys), partition_id="train")
    for key in list(tq.kv_list("train").get("train", {})):
        tq.kv_clear(keys=[key], partition_id="train")


def test_without_warmup_step_one_goes_out_with_prepare_step(transfer_queue):
    loop = HeldLoop(mixed)
    trainer = async_trainer("colocate_async", loop, steps=3)
    buffer = buffer_for(trainer, "colocate_async", "uniform", warmup=0)
    got = run(trainer, buffer, 1, 3)
    assert [len(s["held"]) for s in got] == [1, 1, 0] and len(loop.rounds) == 3
    assert not train_keys_left()


def test_an_async_checkpoint_resumes_as_the_uninterrupted_run(transfer_queue, tmp_path):
    """verl's own _save_checkpoint (with the TransferQueue snapshot its async modes take) after step 2, when
    step 3's first round is out; a fresh trainer loads it with verl's _load_checkpoint: the planner opens
    step 3 again and the run goes on as the uninterrupted one (the script is fixed per prompt and sample
    index, so the round generated twice draws the same samples: `seen` is carried over as a policy would be)."""
    whole_loop = HeldLoop(mixed)
    whole = async_trainer("separate_async", whole_loop, steps=5, out=tmp_path / "whole")
    expected = run(whole, buffer_for(whole, "separate_async", "greso+dapo", seed=3), 1, 5)

    loop = HeldLoop(mixed)
    first = async_trainer("separate_async", loop, steps=5, out=tmp_path / "run")
    fbuf = buffer_for(first, "separate_async", "greso+dapo", seed=3)
    got = run(first, fbuf, 1, 2)
    assert [s["rounds"] for s in got] == [s["rounds"] for s in expected[:2]] and fbuf.step_open
    seen = dict(loop.seen)  # the script's state once step 3's first round has generated (in run)
    first._save_checkpoint()  # verl's own, at global step 2, step 3's first round in TransferQueue
    assert (tmp_path / "run" / "global_step_2" / rv.STATE_FILE).exists()
    assert (tmp_path / "run" / "global_step_2" / "transfer_queue").exists()  # verl's async modes keep TransferQueue

    resumed_loop = HeldLoop(mixed)
    resumed_loop.seen = {k: v for k, v in seen.items()}
    for pid, n in expected[1]["rounds"][-1]:  # step 3's first round (out at step 2) is generated again
        resumed_loop.seen[pid] -= n
    resumed = async_trainer("separate_async", resumed_loop, steps=5, out=tmp_path / "run")
    rbuf = buffer_for(resumed, "separate_async", "greso+dapo", seed=99)  # the seed comes from the checkpoint
    resumed._load_checkpoint()  # verl's own: restores the actor (stub), data and TransferQueue; the planner
    assert resumed.global_steps == 2 and not train_keys_left() and resumed._restored_tq_prompt_count == 0
    resumed.global_steps = 3  # fit: global_steps += 1; the warmup then opens step 3 through the planner
    resumed._add_async_warmup_batches(1)
    after = run(resumed, rbuf, 3, 5)
    assert [s["rounds"] for s in after] == [s["rounds"] for s in expected[2:]]
    assert [{p: [t for t, _ in r] for p, r in s["groups"].items()} for s in after] == \
        [{p: [t for t, _ in r] for p, r in s["groups"].items()} for s in expected[2:]]
    assert not train_keys_left()


@pytest.mark.parametrize("mode,config,planner,words", [
    ("separate_async", {"max_off_policy_threshold": 1}, "uniform", r"max_off_policy_threshold=1 .* span of 2"),
    ("separate_async", {"num_warmup_batches": 2}, "uniform", r"num_warmup_batches=2 .* one step ahead"),
    ("colocate_async", {"num_warmup_batches": 0.5}, "uniform", r"num_warmup_batches=0.5"),
    ("separate_async", {"parameter_sync_step": 4}, "uniform", r"separate_async.parameter_sync_step=1"),
    ("separate_async", {"hybrid_rollout": {"enable_switch": True}}, "uniform", r"enable_switch=true"),
])
def test_what_an_async_mode_cannot_run_is_refused_in_one_line(mode, config, planner, words):
    trainer = make_trainer()
    trainer.trainer_mode = mode
    threshold = config.pop("max_off_policy_threshold", None)
    with pytest.raises(ValueError, match=words) as e:
        rv.RollwiseReplayBuffer(mode, OmegaConf.create(config), threshold, "drop",
                                {"planner": planner},
                                refill_fn=trainer._add_prompts_to_generate)
    assert "\n" not in str(e.value)


def test_april_stays_refused_in_every_mode():
    trainer = make_trainer()
    for mode in ("sync", "separate_async"):
        with pytest.raises(ValueError, match="april carries unfinished rows to the next step"):
            rv.RollwiseReplayBuffer(mode, OmegaConf.create({}), None, "drop", {"planner": "april"},
                                    refill_fn=trainer._add_prompts_to_generate)


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_verls_own_build_replay_buffer_loads_it_in_the_async_modes(mode):
    """verl's _build_replay_buffer with the keys of docs/integrations.md's async command."""
    trainer = make_trainer()
    trainer.trainer_mode = mode
    trainer.config = OmegaConf.merge(trainer.config, OmegaConf.create({"trainer": {"v1": {
        "trainer_mode": mode, mode: {"num_warmup_batches": 1, "parameter_sync_step": 1},
        "sampler": {"max_off_policy_threshold": 8, "max_off_policy_strategy": "drop",
                    "custom_sampler": {"path": "pkg://rollwise.integrations.verl", "name": "RollwiseReplayBuffer"},
                    "sampler_kwargs": {"planner": "pods+ar3po", "planner_options": PODS_AR3PO,
                                       "drop_zero_adv": True}}}}}))
    trainer._compute_advantage = PPOTrainer._compute_advantage.__get__(trainer)
    buffer = PPOTrainer._build_replay_buffer.__get__(trainer)()
    assert isinstance(buffer, rv.RollwiseReplayBuffer) and buffer.ahead and buffer.drop_zero_adv
    assert trainer._next_train_batch == buffer._next_train_batch
    assert "_add_batch_to_generate" in vars(trainer) and "_compute_advantage" in vars(trainer)


def test_in_flight_abort_one_step_ahead_decides_as_in_the_sync_trainer(transfer_queue):
    """duet-abort in separate_async: the watcher of step t + 1's first round is opened when the round goes out
    (at the end of step t's sample) and consulted while it generates during the update; three steps give the
    same trained rows, pruned rows, charges and DUET counts as verl's sync trainer with the same seed."""
    import asyncio

    from test_integrations_verl_abort import DUET, SegmentedAgentLoop

    class HeldSegmented(SegmentedAgentLoop):
        def __init__(self):
            super().__init__()
            self.held = []
            self.submitted = []

        def generate_sequences(self, batch):
            self.held.append(batch)
            self.submitted.append(int(batch["global_steps"]))

        def run(self):
            held, self.held = self.held, []
            for batch in held:
                asyncio.run(self._run(batch))

    def steps(trainer, buffer, mode):
        out = []
        if mode != "sync":
            trainer.global_steps = 1
            trainer._add_async_warmup_batches(1)
        for step in (1, 2, 3):
            trainer.global_steps = step
            trainer.prepare_step()
            if mode == "sync":
                trainer.agent_loop_manager.run()
            meta, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=2)
            data = tq.kv_batch_get(keys=list(meta.keys), partition_id="train", select_fields=["index", "responses"])
            groups = {}
            for k in range(len(meta.keys)):
                groups.setdefault(int(data["index"][k]), []).append(data["responses"][k].tolist())
            out.append(({p: sorted(r) for p, r in groups.items()},
                        {k: v for k, v in metrics.items() if "duet/" in k or "tokens_" in k}))
            trainer.agent_loop_manager.run()  # the next step's first round generates during the update
            tq.kv_clear(keys=list(meta.keys), partition_id="train")
        return out

    runs = {}
    for mode in ("sync", "separate_async"):
        loop = HeldSegmented()
        trainer = async_trainer(mode, loop, pool=2, B=2, n=2, steps=3)
        buffer = rv.RollwiseReplayBuffer(
            trainer_mode=mode, trainer_config=OmegaConf.create({"num_warmup_batches": 1} if mode != "sync" else {}),
            max_off_policy_threshold=None, max_off_policy_strategy="drop",
            sampler_kwargs=OmegaConf.create({"planner": "duet-abort", "seed": 3, "planner_options": DUET,
                                             "segment_tokens": 1}),
            poll_interval=0.01, refill_fn=trainer._add_prompts_to_generate)
        buffer._wait_for_next_poll = lambda partition_id, last, loop=loop: (loop.run(), last)[1]
        runs[mode] = (steps(trainer, buffer, mode), loop, buffer)
    (sync, sloop, sbuf), (ahead, aloop, abuf) = runs["sync"], runs["separate_async"]
    assert ahead == sync
    assert sum(m.get("training/rollwise/duet/stopped", 0) + m.get("training/rollwise/duet/pruned", 0)
               for _, m in sync) > 0  # the watcher acted
    assert aloop.submitted == [1, 1, 2] and sloop.submitted == [1, 2, 3]  # one step ahead
    for fate in ("trained", "discarded", "pruned", "scored"):
        assert abuf.ledger.count(fate=fate) == sbuf.ledger.count(fate=fate), fate
    assert aloop.server.decoded == sloop.server.decoded == abuf.ledger.count()
    assert not train_keys_left()
