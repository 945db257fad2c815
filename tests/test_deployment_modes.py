"""Deployment modes (sync, one-step-off, async) as a user and a plan name them, the wall-second budget, and
the CPU-seconds clock beside the wall clock (issue 42, item 1)."""
import pytest

from rollwise.core.staleness import StalenessPolicy
from rollwise.run.config import load_config
from rollwise.run.loop import Trainer
from rollwise.run.records import TIMING

from test_staleness import _async_cfg as _cfg, _run  # a small run's config; a run at one torch thread


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_one_step_off_is_async_with_a_bound_of_one():
    assert StalenessPolicy.for_run("one-step-off", None).max_staleness == 1
    assert StalenessPolicy.for_run("one-step-off", 1).max_staleness == 1
    with pytest.raises(ValueError, match="one-step-off is async with S = 1, got 2"):
        StalenessPolicy.for_run("one-step-off", 2)


def test_an_unknown_mode_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"^mode must be sync or one-step-off or async, got 'asynch'$"):
        load_config(None, {"out": str(tmp_path), "mode": "asynch"})


def test_one_step_off_trains_exactly_as_async_with_s1(tmp_path, small_policy):
    """The name adds nothing but the bound: the same rows as --mode async --max-staleness 1, field for
    field (timing aside), with the AReaL correction both pick when none is named."""
    a = _run(_cfg(tmp_path / "a", steps=3, mode="async", workers=0, max_staleness=1))
    o = _run(_cfg(tmp_path / "o", steps=3, mode="one-step-off", workers=0))
    assert _strip(o) == _strip(a)
    assert max(r.get("staleness_max", 0) for r in o) == 1  # it did run one step off
    cfg = load_config(None, {"out": str(tmp_path / "x"), "mode": "one-step-off"})
    tr = Trainer(cfg, log=lambda *a: None)
    assert tr.cfg.learner.correction == "areal-decoupled"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_rows_carry_cpu_seconds_beside_wall_seconds(tmp_path, small_policy, mode):
    extra = {"workers": 0} if mode == "async" else {}
    rows = _run(_cfg(tmp_path, steps=3, mode=mode, **extra))
    trained = [r for r in rows if r["step"] > 0]
    cpu = [r["cpu_s"] for r in trained]
    assert all(c > 0 for c in cpu) and cpu == sorted(cpu)  # cumulative, like wall_s
    # one process, threads at one each: CPU time cannot exceed wall time by more than the threads it ran
    assert cpu[-1] <= 3 * trained[-1]["wall_s"] + 0.5


def test_a_wall_second_budget_ends_the_run(tmp_path, small_policy):
    rows = _run(_cfg(tmp_path, steps=50, budget_seconds=1e-6))
    assert [r["step"] for r in rows if r["step"] > 0] == [1]  # the first step spends it
    assert "eval_acc" in rows[-1]  # the run's end is evaluated, as at a compute budget


def test_the_wall_second_budget_is_checked(tmp_path):
    with pytest.raises(ValueError, match=r"^budget_seconds must be a finite number >= 0"):
        load_config(None, {"out": str(tmp_path), "budget_seconds": -1})
