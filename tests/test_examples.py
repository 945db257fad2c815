"""The extension guide's example (examples/skip_solved.py) runs as docs/extending.md says, and does what it says."""
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SMALL
from rollwise.control.base import build_planner
from rollwise.core.history import PromptHistory
from rollwise.core.types import Group, Prompt
from rollwise.run.config import load_config
from rollwise.run.loop import Trainer

ROOT = Path(__file__).resolve().parent.parent
SPEC = "examples.skip_solved:SkipSolved"


@pytest.fixture(autouse=True)
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # as `PYTHONPATH=.` from the repository root


def _group(pid: int, correct: list[bool]) -> Group:
    return Group.from_outcomes(Prompt(pid, "x", "y"), [float(c) for c in correct])


def test_skip_solved_drops_prompts_solved_last_time():
    from examples.skip_solved import SkipSolved

    hist = PromptHistory(4)
    hist.record([_group(0, [True, True]), _group(1, [True, False]), _group(2, [False, False])], step=0)
    comp = SkipSolved(keep_prob=0.0)

    class Ctx:
        history, rng, metrics = hist, np.random.default_rng(0), {}

    kept = comp.select([Prompt(i, "x", "y") for i in range(4)], 4, Ctx)
    assert [p.id for p in kept] == [1, 2, 3]  # 0 was all correct; 3 was never visited
    assert Ctx.metrics["skip_solved/skipped"] == 1
    with pytest.raises(ValueError, match="keep_prob"):
        SkipSolved(keep_prob=2)


def test_the_example_trains_by_import_path_with_options(tmp_path, small_policy):
    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "r"), "eval_every": 0, "steps": 2,
                             "model": str(small_policy[0]), "planner": SPEC + "+dapo",
                             "planner_options": {SPEC: {"keep_prob": 0.5}}})
    rows = Trainer(cfg, log=lambda m: None).run()
    assert [r["step"] for r in rows] == [1, 2] and "skip_solved/skipped" in rows[-1]
    planner = build_planner(SPEC, 10, np.random.default_rng(0), {SPEC: {"keep_prob": 0.5}})
    assert planner.components[0].keep_prob == 0.5


def test_trl_dynamic_sampling_recipe_runs_as_the_docs_say():
    """docs/recipe_dynamic_sampling.md's example (examples/trl_dynamic_sampling.py), shortened: DAPO's refill
    inside TRL trains no zero-variance group; plain GRPO with the normaliser takes rows out of the denominator."""
    pytest.importorskip("trl")
    from examples.trl_dynamic_sampling import main

    log = main(["--planner", "greso+dapo", "--steps", "2", "--warm-steps", "60"])
    assert len(log) == 2 and all(e["zero_variance_trained"] == 0 for e in log)
    assert sum(e["filtered_groups"] for e in log) > 0  # zero-variance groups were rolled out and refilled
    log = main(["--planner", "uniform", "--drop-zero-adv", "--steps", "1", "--warm-steps", "60"])
    (e,) = log
    assert e["zero_adv_rows"] == 4 * e["zero_variance_trained"] > 0  # G = 4 rows per zero-variance group
