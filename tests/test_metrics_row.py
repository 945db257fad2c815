"""The metrics row is built in one place (run/records.py step_row) for the trainer and the simulator: the
same planner's step gives rows with the same fields, apart from the ones declared for one side only
(`ONLY`), the learner's own stats and the fields the simulator cannot know (null there: `NULL_IN_SIM`).
A field added on one side without being built for both, or declared, fails here."""
import pytest

from rollwise.run.records import NULL_IN_SIM, ONLY, step_row


def _trainer_row(tmp_path):
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {"out": str(tmp_path), "eval_every": 0, "steps": 1, "batch_size": 4, "n": 4})
    tr = Trainer(cfg, log=lambda *a: None)
    done = tr.one_step()
    stats = set(done.out.stats)  # the torch learner's own (loss, entropy, grad_norm, ...), before the row
    return tr.step_row(done.ctx, done.out, done.view, done.tokens_before), stats


def _sim_row():
    from rollwise.sim.runner import SimConfig, Simulator

    sim = Simulator(SimConfig(prompts=200, steps=1, batch=4, n=4, planner="uniform", seed=0))
    return sim, sim.train_step()


def test_a_trainer_row_and_a_sim_row_have_the_same_fields(tmp_path):
    trow, learner_stats = _trainer_row(tmp_path)
    _, srow = _sim_row()
    # the learner's own stats are the trainer's; the ones the builder makes for both stay compared
    trainer_side = set(trow) - set(ONLY["trainer"]) - (learner_stats - set(srow))
    sim_side = set(srow) - set(ONLY["sim"])
    assert trainer_side == sim_side, (sorted(trainer_side - sim_side), sorted(sim_side - trainer_side))
    assert set(ONLY["trainer"]) <= set(trow) and set(ONLY["sim"]) <= set(srow)  # declared, and present
    assert not set(ONLY["sim"]) & set(trow) and not set(ONLY["trainer"]) & set(srow)
    assert all(srow[k] is None for k in NULL_IN_SIM) and all(trow[k] is not None for k in NULL_IN_SIM)
    for row in (trow, srow):  # the shared figures, from the same definitions
        assert row["step"] == 1 and row["prompts"] == 4 and row["batch_groups"] == 4
        assert row["step_tokens"] == row["tokens"] == row["tokens_train"] > 0
        assert 0 <= row["zero_var_frac_gen"] <= 1 and row["group_min"] == row["group_max"] == 4


def test_a_field_for_one_side_only_must_be_declared():
    from rollwise.control.base import Assembled, StepContext
    from rollwise.core.history import GroupStats
    from rollwise.core.types import Batch
    from rollwise.run.driver import StepOutcome
    from rollwise.run.records import ledger_view

    sim, _ = _sim_row()
    ctx = StepContext(0, 4, 4, sim.pool, sim.history, sim.ledger, sim.rng)
    out = StepOutcome(Assembled(Batch([]), [], [], [], []), [], visits=GroupStats.of([]))
    row = step_row(ctx, out, ledger_view(sim.ledger), 0, counts_only=True, side="sim", extra={"rounds": 1})
    assert row["rounds"] == 1 and row["prompts"] == 0 and row["reward_mean"] == 0
    with pytest.raises(ValueError, match=r"\['wall_clock'\] are not declared for the sim"):
        step_row(ctx, out, ledger_view(sim.ledger), 0, counts_only=True, side="sim", extra={"wall_clock": 1.0})
