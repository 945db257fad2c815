"""Every plan file in benchmarks/plans parses under today's rules: a plan committed before its runs must still
be runnable (four suite screens set `task_options.dataset` per arm, which a later rule refuses, and could not
run until they moved it to the plan's own `task_options` block before any run)."""
from pathlib import Path

import pytest

from rollwise.bench.plan import load_plan

PLANS = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "plans").glob("*.yaml"))


@pytest.mark.parametrize("path", PLANS, ids=[p.stem for p in PLANS])
def test_every_shipped_plan_parses(path):
    plan, raw = load_plan(path)
    assert plan.arms and raw == path.read_bytes()
