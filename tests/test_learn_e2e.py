"""Every registered learner component runs one real training step of the loop by name."""
import pytest

from rollwise.core import registry
from rollwise.run.config import load_config
from rollwise.run.loop import Trainer

from conftest import SMALL

# inputs the synchronous loop does not produce; these must fail with a clear message instead
NEEDS_INPUT = {"mssr": "baseline_G", "gd2po": "reward_parts_NK"}


def one_step(tmp_path, **learner):
    cfg = load_config(None, {**SMALL, "out": str(tmp_path), "steps": 1, "eval_every": 0,
                             **{f"learner.{k}": v for k, v in learner.items()}})
    return Trainer(cfg).run()[-1]


@pytest.mark.parametrize("kind,key", [("advantage", "advantage"), ("loss", "loss"), ("aggregation", "loss_agg"),
                                      ("correction", "correction"), ("recompose", "recompose")])
def test_every_component_runs_a_step(tmp_path, small_policy, kind, key):
    for e in registry.entries(kind):
        if kind == "advantage" and e.name in NEEDS_INPUT:
            with pytest.raises(ValueError, match=NEEDS_INPUT[e.name]):
                one_step(tmp_path / e.name, **{key: e.name})
            continue
        if kind == "advantage" and e.name == "pvpo":
            cfg = load_config(None, {**SMALL, "out": str(tmp_path / e.name), "steps": 1, "eval_every": 0,
                                     "planner": "pvpo", "learner.advantage": "pvpo"})
            row = Trainer(cfg).run()[-1]
        else:
            row = one_step(tmp_path / e.name, **{key: e.name})
        assert row["step"] == 1 and row["tokens"] > 0, e.name
        for k in ("loss", "grad_norm", "mean_abs_adv"):
            if k in row:
                assert row[k] == row[k] and abs(row[k]) != float("inf"), (e.name, k, row[k])
