"""Every registered learner component runs one real training step of the loop by name."""
import pytest

from rollwise.run.records import TIMING
from rollwise.core import registry
from rollwise.run.config import load_config
from rollwise.run.loop import Trainer

from conftest import SMALL

# what an estimator needs from the rest of the pipeline, beyond the defaults
NEEDS = {"pvpo": {"planner": "pvpo"},  # the planner measures the reference pass rates
         "gd2po": {"reward": "rewards_for_tests:by_length_parts"}}  # reward components
VARIED = {"reward": "rewards_for_tests:by_length"}  # rewards that vary within a group on the test base


def run(out, steps=1, **overrides):
    cfg = load_config(None, {**SMALL, "out": str(out), "steps": steps, "eval_every": 0, **overrides})
    return Trainer(cfg).run()


def one_step(tmp_path, extra=None, **learner):
    return run(tmp_path, **(extra or {}), **{f"learner.{k}": v for k, v in learner.items()})[-1]


@pytest.mark.parametrize("kind,key", [("advantage", "advantage"), ("loss", "loss"), ("aggregation", "loss_agg"),
                                      ("correction", "correction"), ("recompose", "recompose")])
def test_every_component_updates_the_model(tmp_path, small_policy, kind, key):
    """One real step per component, on rewards that vary within groups: the model must change, and
    every reported number must be finite."""
    for e in registry.entries(kind):
        extra = {**VARIED, **(NEEDS.get(e.name, {}) if kind == "advantage" else {})}
        cfg = load_config(None, {**SMALL, "out": str(tmp_path / e.name), "steps": 1, "eval_every": 0, **extra,
                                 f"learner.{key}": e.name})
        trainer = Trainer(cfg)
        before = [p.detach().clone() for p in trainer.policy.model.parameters()]
        row = trainer.run()[-1]
        assert row["step"] == 1 and row["tokens"] > 0, e.name
        assert row["updated"] == 1 and row["learn_rows"] > 0, (e.name, row.get("learn_rows"))
        moved = max(float((a - b.detach()).abs().max()) for a, b in zip(before, trainer.policy.model.parameters()))
        assert moved > 0, f"{kind} {e.name} left the model unchanged"
        for k in ("loss", "grad_norm", "mean_abs_adv", "entropy"):
            assert k in row and row[k] == row[k] and abs(row[k]) != float("inf"), (e.name, k, row.get(k))


def test_gd2po_on_scalar_rewards_fails_clearly(tmp_path, small_policy):
    with pytest.raises(ValueError, match="reward_parts_NK"):
        one_step(tmp_path, advantage="gd2po")


def test_reward_components_reach_the_learner(tmp_path, small_policy):
    row = one_step(tmp_path, {"task_options": {**SMALL["task_options"], "reward_parts": True}}, advantage="gd2po")
    assert 0.0 <= row["reward_mean"] <= 1.0  # the mean of two components in [0, 1]
    row = one_step(tmp_path / "user", NEEDS["gd2po"], advantage="gd2po")
    assert 0.0 <= row["reward_mean"] <= 1.0 and row["learn_rows"] > 0


def test_stateful_learner_resumes_exactly(tmp_path, small_policy):
    """MSSR's baseline and RoRecomp's buffer are in the learner checkpoint: 1 + 1 steps equal 2 steps.
    A pool of 8 with batches of 8 revisits every prompt, so the baseline matters at step 2."""
    kw = {"task_options": {"pool_size": 8, "heldout_size": 40}, "learner.advantage": "mssr",
          "learner.recompose": "rorecomp", "learner.recompose_options": {"compensation_size": 2}}
    full = run(tmp_path / "full", steps=2, **kw)
    run(tmp_path / "part", steps=1, **kw)
    resumed = run(tmp_path / "part", steps=2, **kw)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]  # noqa: E731
    assert strip(resumed) == strip(full)
