"""The planner's state in verl's checkpoints: a resumed buffer continues exactly as an uninterrupted one.

verl's own `_save_checkpoint` and `_load_checkpoint` run on the stub trainer of test_integrations_verl.py
(its workers, dataloader and callback stubbed: they save nothing here), so the folder the planner's state
goes to and comes back from is the one verl writes and finds (`global_step_N`, the latest-iteration
marker). The environment (the fake agent loop's reward stream) carries over, as a real policy's would.
Skipped unless verl's v1 trainer and transferqueue are installed.
"""
from types import SimpleNamespace

import pytest
import torch

tq = pytest.importorskip("transfer_queue", exc_type=ImportError)
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base", exc_type=ImportError)

from omegaconf import OmegaConf  # noqa: E402
from test_integrations_verl import (FakeAgentLoop, make_buffer, make_trainer, run_step,  # noqa: E402
                                    train_keys_left, transfer_queue)  # noqa: F401

from test_integrations_verl_stages import AR3PO, POOL, ScriptAgentLoop, outcome, verl_step  # noqa: E402

from rollwise.core.types import KIND_TAG, Rollout  # noqa: E402
from rollwise.integrations import verl as rv  # noqa: E402

PPOTrainer = trainer_base.PPOTrainer
OPTIONS = {"greso": {"p_easy": 0.6, "p_hard": 0.4}}


def checkpointing_trainer(out, loop, resume_mode="auto", pool=None, **kw):
    """The stub trainer with verl's own checkpoint methods and stand-ins for what they save (model, data)."""
    trainer = make_trainer(**kw)
    trainer.train_dataset = trainer.train_dataset[:pool]
    trainer.agent_loop_manager = loop
    for name in ("_save_checkpoint", "_load_checkpoint"):
        setattr(trainer, name, getattr(PPOTrainer, name).__get__(trainer))
    trainer.config = OmegaConf.merge(trainer.config, {
        "trainer": {"default_local_dir": str(out), "default_hdfs_dir": None, "resume_mode": resume_mode,
                    "resume_from_path": None, "del_local_ckpt_after_load": False},
        "actor_rollout_ref": {"actor": {"checkpoint": {}}}})
    trainer.use_critic = False
    trainer.actor_rollout_wg = SimpleNamespace(save_checkpoint=lambda *a, **k: None,
                                               load_checkpoint=lambda *a, **k: None)
    trainer.train_dataloader.state_dict = lambda: {}
    trainer.train_dataloader.load_state_dict = lambda state: None
    trainer.checkpoint_callback = SimpleNamespace(on_save=lambda **kw: None)
    return trainer


def steps(trainer, buffer, first, last):
    """Run steps first..last; per step: the rounds submitted ((prompt, n) each), the trained groups' sizes,
    the metrics."""
    loop, out = trainer.agent_loop_manager, []
    for step in range(first, last + 1):
        before = len(loop.batches)
        keys, metrics = run_step(trainer, buffer, step)
        uids = {k.split("_")[0] for k in keys}
        out.append((loop.batches[before:], sorted(len([k for k in keys if k.startswith(u)]) for u in uids), metrics))
        assert not train_keys_left()
    return out


def test_a_resumed_buffer_continues_as_an_uninterrupted_one(transfer_queue, tmp_path):
    spec = "greso+dapo"
    whole = checkpointing_trainer(tmp_path / "whole", FakeAgentLoop(seed=3))
    wbuf = make_buffer(whole, spec, seed=5, planner_options=OPTIONS)
    expected = steps(whole, wbuf, 1, 8)

    first = checkpointing_trainer(tmp_path / "run", FakeAgentLoop(seed=3))
    fbuf = make_buffer(first, spec, seed=5, planner_options=OPTIONS)
    assert steps(first, fbuf, 1, 4) == expected[:4]
    first._save_checkpoint()  # verl's own, at global step 4
    assert (tmp_path / "run" / "global_step_4" / rv.STATE_FILE).exists()
    assert (tmp_path / "run" / "latest_checkpointed_iteration.txt").read_text() == "4"

    # a new process: a fresh trainer and buffer; verl finds the latest checkpoint and loads it
    resumed = checkpointing_trainer(tmp_path / "run", first.agent_loop_manager)
    rbuf = make_buffer(resumed, spec, seed=99, planner_options=OPTIONS)  # the seed is overwritten by the state
    resumed._load_checkpoint()
    assert resumed.global_steps == 4 and rbuf.host.step_count == 4
    assert steps(resumed, rbuf, 5, 8) == expected[4:]  # the same prompts, sizes, refills, filters, metrics
    assert sum(m["training/rollwise/skipped"] for _, _, m in expected[4:]) > 0  # GRESO decided from history
    for a, b in zip(wbuf.host.history.state_dict().values(), rbuf.host.history.state_dict().values()):
        assert (a == b).all()
    counts = [{k: v for k, v in b.ledger.state_dict().items() if k != "seconds"} for b in (wbuf, rbuf)]
    assert counts[0] == counts[1]  # the token accounting goes on from where it was (wall-clock times aside)
    assert wbuf.host.rng.bit_generator.state == rbuf.host.rng.bit_generator.state

    # without the state the resume would have drawn other prompts: the check is not vacuous
    fresh = checkpointing_trainer(tmp_path / "run", FakeAgentLoop(seed=3))
    fresh_buf = make_buffer(fresh, spec, seed=5, planner_options=OPTIONS)
    fresh.global_steps = 4
    assert [r for r, _, _ in steps(fresh, fresh_buf, 5, 5)] != [r for r, _, _ in expected[4:5]]


def test_resume_path_a_missing_state_and_another_planner(transfer_queue, tmp_path):
    first = checkpointing_trainer(tmp_path / "run", FakeAgentLoop(seed=1))
    buf = make_buffer(first, "greso+dapo", seed=5)
    steps(first, buf, 1, 2)
    first._save_checkpoint()
    folder = tmp_path / "run" / "global_step_2"

    by_path = checkpointing_trainer(tmp_path / "run", first.agent_loop_manager, resume_mode="resume_path")
    by_path.config.trainer.resume_from_path = str(folder)
    pbuf = make_buffer(by_path, "greso+dapo", seed=5)
    by_path._load_checkpoint()
    assert pbuf.host.step_count == 2 and (pbuf.host.history.visits == buf.host.history.visits).all()

    other = checkpointing_trainer(tmp_path / "run", first.agent_loop_manager)
    make_buffer(other, "dapo", seed=5)
    with pytest.raises(ValueError, match=r"the checkpoint's planner 'greso\+dapo' .* is not this run's 'dapo'"):
        other._load_checkpoint()

    (folder / rv.STATE_FILE).unlink()  # a checkpoint saved before rollwise kept its state there
    again = checkpointing_trainer(tmp_path / "run", first.agent_loop_manager)
    abuf = make_buffer(again, "greso+dapo", seed=5)
    with pytest.warns(UserWarning, match=r"rollwise_planner.pt is missing .* the planner starts afresh"):
        again._load_checkpoint()
    assert again.global_steps == 2 and abuf.host is None  # built afresh at the first step

    started = checkpointing_trainer(tmp_path / "none", FakeAgentLoop(seed=1))  # no checkpoint: a fresh start
    sbuf = make_buffer(started, "greso+dapo", seed=5)
    started._load_checkpoint()
    assert started.global_steps == 0 and sbuf.host is None


def test_state_is_plain_data_and_refused_mid_step(transfer_queue, tmp_path):
    trainer = checkpointing_trainer(tmp_path / "run", FakeAgentLoop(seed=1))
    buf = make_buffer(trainer, "greso+dapo", seed=5)
    steps(trainer, buf, 1, 1)
    path = buf.save_state(str(tmp_path / "s"))
    torch.load(path, weights_only=True)  # loads without unpickling code
    trainer.global_steps = 2
    trainer.prepare_step()  # a step is open: its prompts are with verl
    with pytest.raises(RuntimeError, match="cannot save the planner in the middle of a step"):
        buf.state_dict()
    buf.sample(global_steps=2, partition_id="train", batch_size=4)
    tq.kv_clear(keys=list(train_keys_left()), partition_id="train")
    with pytest.raises(ValueError, match="a rollout of kind 'other', which no loaded module defines"):
        Rollout.from_state({KIND_TAG: "other"})


def test_responses_ar3po_keeps_survive_the_checkpoint(transfer_queue, tmp_path):
    """AR3PO's stored correct responses live in its state with their TransferQueue fields and tags: after a
    resume, the one it reuses goes back into verl's group as in the uninterrupted run (tokens, behaviour
    log-probs, the step that generated it)."""
    def ar3po_trainer(out, loop):
        return checkpointing_trainer(out, loop, pool=POOL, train_batch_size=POOL, n=2)

    whole = ar3po_trainer(tmp_path / "whole", ScriptAgentLoop())
    wbuf = make_buffer(whole, "ar3po", seed=0, planner_options=AR3PO)
    expected = [verl_step(whole, wbuf, step) for step in (1, 2, 3)]

    first = ar3po_trainer(tmp_path / "run", ScriptAgentLoop())
    fbuf = make_buffer(first, "ar3po", seed=0, planner_options=AR3PO)
    assert verl_step(first, fbuf, 1) == expected[0]
    first._save_checkpoint()
    resumed = ar3po_trainer(tmp_path / "run", first.agent_loop_manager)
    rbuf = make_buffer(resumed, "ar3po", seed=0, planner_options=AR3PO)
    resumed._load_checkpoint()
    (ar3po,) = rbuf.host.planner.components
    assert all(isinstance(r, rv.VerlRollout) and r.saved is not None for rs in ar3po.buffer.values() for r in rs)
    assert [verl_step(resumed, rbuf, step) for step in (2, 3)] == expected[1:]
    reused = {pid: rows[-1] for pid, rows in expected[1][0].items()}  # step 2 reuses step 1's correct responses
    for pid, j in ((2, 0), (3, 5)):
        toks, lps, _ = outcome(pid, j)
        assert reused[pid][1:] == (toks, torch.tensor(lps).tolist(), 1)
    assert not train_keys_left()
