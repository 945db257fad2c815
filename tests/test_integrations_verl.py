"""rollwise planners inside verl's v1 trainer: the custom replay buffer, on a real (CPU) TransferQueue.

verl's full trainer needs GPUs. As verl's own CPU tests do (test_replay_buffer_on_cpu.py and the
trainer_base tests), the trainer is a stub that carries verl's real methods for submitting prompts
(prepare_step -> _add_batch_to_generate -> _next_train_batch -> _submit_batch_to_rollout, and
refill_fn = _add_prompts_to_generate); the agent loop is a fake that writes scored trajectories to
TransferQueue the way verl's AgentLoopWorkerTQ does, one per session, `__rollout_n__` sessions per prompt.
Skipped unless verl's v1 trainer and transferqueue are installed (`bash scripts/setup.sh --with verl-v1`).
"""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

tq = pytest.importorskip("transfer_queue", exc_type=ImportError)
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base", exc_type=ImportError)
ray = pytest.importorskip("ray")

from omegaconf import OmegaConf  # noqa: E402
from verl.utils.dataset.rl_dataset import collate_fn  # noqa: E402

from rollwise.control.base import Component  # noqa: E402
from rollwise.integrations import verl as rv  # noqa: E402

PPOTrainer = trainer_base.PPOTrainer
POOL = 16  # prompt index % 4: 0 always right, 1 always wrong, 2 and 3 a coin flip per sample


class Staircase(Component):
    """A test allocator: prompt i gets 1 + i % 4 samples (n per prompt differs within a batch)."""

    name = "staircase"

    def allocate(self, prompts, ns, ctx):
        return [1 + p.id % 4 for p in prompts]


class FakeAgentLoop:
    """Writes what verl's AgentLoopWorkerTQ writes: per session a trajectory `{uid}_{session}_0` with
    rm_scores (the reward on the last token) and its tags, then the prompt's status `finished`."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.batches = []  # (index, n) per submitted row
        self.rewards = {}  # uid -> rewards

    def generate_sequences(self, batch):
        rows = []
        for i in range(len(batch)):
            uid, idx, n = batch["uid"][i], int(batch["index"][i]), int(batch["__rollout_n__"][i])
            p = {0: 1.0, 1: 0.0}.get(idx % 4, 0.5)
            rewards = [float(self.rng.random() < p) for _ in range(n)]
            self.rewards[uid] = rewards
            rows.append((idx, n))
            for s, r in enumerate(rewards):
                length = 3 + s
                scores = torch.zeros(length)
                scores[-1] = r
                tq.kv_put(key=f"{uid}_{s}_0", partition_id="train", fields={"rm_scores": scores},
                          tag={"status": "success", "prompt_len": 4, "response_len": length, "seq_len": 4 + length,
                               "global_steps": int(batch["global_steps"])})
            tq.kv_put(key=uid, partition_id="train", tag={"status": "finished"})
        self.batches.append(rows)


def make_trainer(train_batch_size=4, n=4, filter_groups=False):
    """A stub carrying verl's own prompt-submission methods (no GPU, no workers)."""
    stub = SimpleNamespace()
    for name in ("prepare_step", "_add_batch_to_generate", "_add_prompts_to_generate", "_submit_batch_to_rollout",
                 "_next_train_batch", "_fetch_one_gen_batch"):
        setattr(stub, name, getattr(PPOTrainer, name).__get__(stub))
    stub.config = OmegaConf.create({"data": {"train_batch_size": train_batch_size, "gen_batch_size": None},
                                    "actor_rollout_ref": {"rollout": {"n": n}},
                                    "algorithm": {"filter_groups": {"enable": filter_groups}}})
    stub.trainer_mode, stub.global_steps = "sync", 1
    stub.train_dataset = [{"raw_prompt": [{"role": "user", "content": f"q{i}"}], "index": i, "data_source": "toy",
                           "reward_model": {"ground_truth": str(i)}} for i in range(POOL)]
    stub.train_dataloader = SimpleNamespace(collate_fn=collate_fn)
    stub.agent_loop_manager = FakeAgentLoop()
    return stub


def make_buffer(trainer, planner, **kw):
    return rv.RollwiseReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}),
                                   max_off_policy_threshold=None, max_off_policy_strategy="drop",
                                   sampler_kwargs=OmegaConf.create({"planner": planner, **kw}), poll_interval=0.01,
                                   refill_fn=trainer._add_prompts_to_generate)


def run_step(trainer, buffer, step):
    """What verl's sync step does around the replay buffer: submit, sample, train (skipped), clear."""
    trainer.global_steps = step
    trainer.prepare_step()
    meta, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=4)
    keys = list(meta.keys)
    tq.kv_clear(keys=keys, partition_id="train")  # as PPOTrainer.fit does after the update
    return keys, metrics


def train_keys_left():
    return set(tq.kv_list("train").get("train", {}))


@pytest.fixture(scope="module")
def transfer_queue():
    # Ray CPUs are logical: TransferQueue's controller and two storage units need 3, this machine has 2 cores.
    started = not ray.is_initialized()  # another suite's Ray is reused, not shut down under it
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init()
    yield
    tq.close()
    if started:
        ray.shutdown()


def test_contract_with_installed_verl():
    from importlib.metadata import version

    rv.check_verl()  # the hooks and source fragments the integration relies on are all there
    assert version("verl") == rv.TESTED["verl"] and version("transferqueue") == rv.TESTED["transferqueue"], (
        "verl or transferqueue is not the version rollwise's integration was tested with: re-run "
        "tests/test_integrations_verl.py against it, then update TESTED and scripts/extras/verl-v1.sh")


@pytest.mark.parametrize("installed", ["0.8.2", "0.10.0"])
def test_a_verl_outside_the_supported_range_is_refused_in_one_line(monkeypatch, installed):
    monkeypatch.setattr(rv.verl, "__version__", installed)
    with pytest.raises(RuntimeError, match=rf"^rollwise's verl integration supports verl >=0.9.1,<0.10 .*installed "
                                           rf"verl {installed}: install a supported verl$"):
        make_buffer(make_trainer(), "dapo")


def test_a_changed_hook_fails_loudly(monkeypatch):
    def _next_train_batch(self, n_prompts=None):  # a release that renamed the parameter
        pass

    monkeypatch.setattr(PPOTrainer, "_next_train_batch", _next_train_batch)
    with pytest.raises(RuntimeError, match=r"PPOTrainer\._next_train_batch.*no longer starts with"):
        rv.check_verl()
    monkeypatch.undo()
    monkeypatch.setattr(PPOTrainer, "_add_prompts_to_generate", lambda self, num_prompts: 0)
    with pytest.raises(RuntimeError, match=r"_add_prompts_to_generate no longer contains"):
        rv.check_verl()


@pytest.mark.parametrize("planner, needs", [
    ("hive", "hive needs the policy itself"), ("dots", "dots needs the policy itself"),
    ("e3", "e3 sets sampling parameters per step"),
    ("arrol", "arrol reads hidden states in flight, which verl's rollout servers do not expose"),
    ("april", "april carries unfinished rows to the next step"),
    ("treepo", "treepo needs an engine that continues rows from their tokens"),
    ("spec-rl", "spec-rl needs the policy itself")])
def test_refuses_what_verl_cannot_serve_by_name(planner, needs):
    with pytest.raises(ValueError, match=f"^verl 0.9.1 v1 trainer cannot run planner .*{needs}"):
        make_buffer(make_trainer(), planner)


@pytest.mark.parametrize("planner", ["ar3po", "aero", "dars", "pilot-commit", "pvpo", "sgpo", "cures",
                                     "greso+oracle", "duet+duet-abort"])
def test_builds_every_sampling_and_token_watching_planner(planner, monkeypatch):
    monkeypatch.setattr(rv, "_start_watch_server", lambda: (None, "no-ray-here"))  # built, not run
    buffer = make_buffer(make_trainer(), planner)
    assert buffer.watched == ("duet-abort" in planner)


def test_refuses_config_it_cannot_serve_in_one_line():
    trainer = make_trainer()
    trainer.config.actor_rollout_ref.rollout.calculate_log_probs = False
    with pytest.raises(ValueError, match=r"ar3po reuses responses of earlier steps.*calculate_log_probs=true"):
        make_buffer(trainer, "ar3po")
    make_buffer(trainer, "ar3po", planner_options={"ar3po": {"reuse": "none"}})  # nothing reused: fine
    trainer = make_trainer()
    trainer.config.algorithm.rollout_correction = {"rollout_is": "token"}
    with pytest.raises(ValueError, match="duet-abort gives rows importance weights"):
        make_buffer(trainer, "duet-abort")
    with pytest.raises(ValueError, match="disable algorithm.filter_groups"):
        make_buffer(make_trainer(filter_groups=True), "dapo")


def test_verl_builds_the_buffer_from_the_documented_config():
    """verl's own _build_replay_buffer, reading the config keys of docs/integrations.md."""
    trainer = make_trainer()
    trainer.config = OmegaConf.merge(trainer.config, OmegaConf.create({"trainer": {"v1": {
        "trainer_mode": "sync", "sync": {},
        "sampler": {"max_off_policy_threshold": 8, "max_off_policy_strategy": "drop",
                    "custom_sampler": {"path": "pkg://rollwise.integrations.verl", "name": "RollwiseReplayBuffer"},
                    "sampler_kwargs": {"planner": "greso+dapo", "seed": 0, "correct_field": "acc"}}}}}))
    buffer = PPOTrainer._build_replay_buffer.__get__(trainer)()
    assert isinstance(buffer, rv.RollwiseReplayBuffer)
    assert buffer.spec == "greso+dapo" and buffer.correct_field == "acc"
    assert trainer._next_train_batch == buffer._next_train_batch  # the trainer now submits the planner's prompts


def test_refuses_async_modes_double_filtering_and_a_missing_trainer():
    trainer = make_trainer()
    with pytest.raises(ValueError, match="runs in trainer_mode sync, colocate_async or separate_async .got 'async'"):
        rv.RollwiseReplayBuffer("async", OmegaConf.create({}), None, "drop", {"planner": "dapo"},
                                refill_fn=trainer._add_prompts_to_generate)
    with pytest.raises(ValueError, match="needs verl's refill_fn"):
        rv.RollwiseReplayBuffer("sync", OmegaConf.create({}), None, "drop", {"planner": "dapo"}, refill_fn=None)
    with pytest.raises(ValueError, match="sampler_kwargs needs 'planner'"):
        make_buffer(trainer, "dapo", max_round=3)


def test_greso_dapo_filters_refills_and_learns_from_history(transfer_queue):
    trainer = make_trainer()
    buffer = make_buffer(trainer, "greso+dapo", seed=0)
    loop = trainer.agent_loop_manager
    for step in range(1, 7):
        before = len(loop.batches)
        keys, metrics = run_step(trainer, buffer, step)
        trained = {k.split("_")[0] for k in keys}
        assert 0 < len(trained) <= 4
        for uid in trained:  # only groups with a learning signal train
            assert len(set(loop.rewards[uid])) == 2
            assert sum(k.startswith(uid + "_") for k in keys) == 4  # every session of the group
        rounds = loop.batches[before:]
        assert len(rounds) == metrics["training/rollwise/rounds"]
        ids = [i for r in rounds for i, _ in r]
        assert len(ids) == len(set(ids))  # a prompt is drawn once per step
        assert {n for r in rounds for _, n in r} == {4}
        if len(trained) < 4:  # short only when the planner ran out of refill rounds
            assert len(rounds) == 5
        assert metrics["training/rollwise/zero_variance_trained"] == 0
        assert not train_keys_left()  # filtered and surplus groups were cleared from TransferQueue
    submitted = np.bincount([i for b in loop.batches for i, _ in b], minlength=POOL)
    assert (buffer.host.history.visits == submitted).all()  # PromptHistory saw every group rolled out
    assert len(loop.batches) > 6  # refill rounds happened (a quarter of the pool is always right, one always wrong)
    # GRESO skips prompts whose last visits were all right or all wrong
    assert sum(e.get("skipped", 0) for e in buffer.log) > 0
    visits = buffer.host.history.visits.reshape(-1, 4)  # columns: always right, always wrong, coin, coin
    assert visits[:, 2:].sum() > visits[:, :2].sum()


def test_per_prompt_rollout_n_reaches_the_agent_loop(transfer_queue):
    trainer = make_trainer()
    buffer = make_buffer(trainer, "test_integrations_verl:Staircase")
    loop = trainer.agent_loop_manager
    keys, metrics = run_step(trainer, buffer, 1)
    (rows,) = loop.batches
    assert [n for _, n in rows] == [1 + i % 4 for i, _ in rows]  # __rollout_n__ per prompt
    assert len(keys) == sum(n for _, n in rows)  # uniform trains every group, every session
    assert metrics["training/rollwise/samples"] == len(keys)
    assert list(buffer.host.history.last_n[[i for i, _ in rows]]) == [n for _, n in rows]


def test_validation_is_verls_own_sampling(transfer_queue):
    buffer = make_buffer(make_trainer(), "dapo")
    tq.kv_put(key="val1_0_0", partition_id="val", fields={"rm_scores": torch.ones(2)}, tag={"status": "success"})
    tq.kv_batch_put(keys=["val1"], partition_id="val", tags=[{"is_prompt": True, "status": "finished", "global_steps": 1}])
    meta, _ = buffer.sample(global_steps=1, partition_id="val", batch_size=1)
    assert list(meta.keys) == ["val1_0_0"]
    tq.kv_clear(keys=list(meta.keys), partition_id="val")


def test_refuses_a_dataset_without_the_column_the_agent_loop_reads(monkeypatch):
    monkeypatch.setattr(rv, "_start_watch_server", lambda: (None, "no-ray-here"))
    trainer = make_trainer()
    trainer.train_dataset = [{"prompt": "q", "index": i} for i in range(POOL)]
    make_buffer(trainer, "duet-abort")
    with pytest.raises(ValueError, match=r"train dataset's rows have no 'raw_prompt' column \(row 0 has \['index', "
                                         r"'prompt'\]\)"):
        trainer._next_train_batch()
