"""The bench-wide family (issue 47, item 4): every confirmatory hypothesis of every record, Holm over all."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_holm import hypotheses  # noqa: E402

from rollwise.bench.stats import holm  # noqa: E402


def test_every_confirmatory_family_joins_and_the_bench_wide_p_is_never_below_the_plans():
    hs = hypotheses()
    records = {f.parent.name: json.loads(f.read_text()) for f in (ROOT / "benchmarks/results").glob("*/summary.json")}
    confirmatory = {k: s for k, s in records.items() if s.get("kind") == "confirmatory"}
    assert sorted((h["record"], h["arm"]) for h in hs) == sorted((k, a) for k, s in confirmatory.items()
                                                                  for a in s["family"])
    for h, adj in zip(hs, holm([h["p"] for h in hs])):
        assert adj >= h["p_plan"] - 1e-12, h  # a larger family is never less strict


def _record(root: Path, name: str, plan: str, arms: dict) -> None:
    """A suite file (root/plans/NAME.yaml) and its record (root/NAME): the plan it ran and a summary with the
    figures `suite` reads. `arms` None: the file has not run yet."""
    (root / "plans").mkdir(exist_ok=True)
    text = (ROOT / "benchmarks/plans" / plan).read_text()
    (root / "plans" / f"{name}.yaml").write_text(text)
    if arms is None:
        return
    d = root / name
    d.mkdir()
    (d / "plan.yaml").write_text(text)
    (d / "summary.json").write_text(json.dumps({"kind": "confirmatory", "task": "remainder", "family": list(arms),
                                                "arms": arms}))


def _arm(p: float, diff: float, lo2: float, hi2: float, ratio: float, rlo: float, seeds: int = 10) -> dict:
    return {"seeds_paired": seeds, "p": p, "p_holm": p, "primary": {"diff": diff, "lo": diff - 0.01, "hi": diff + 0.01},
            "primary_two_way": {"diff": diff, "lo": lo2, "hi": hi2},
            "symmetric": {"defined": True, "ratio": ratio, "lo": rlo, "hi": ratio + 1}}


def test_a_suite_is_one_family_over_its_files_judged_by_the_plans_rule(tmp_path):
    from bench_holm import suite
    # p 0.002, 0.01, 0.04 over m = 3 -> Holm 0.006, 0.02, 0.04 (all under 0.05); the files alone would give
    # 0.002 (a family of one) and 0.02, 0.04
    _record(tmp_path, "s_a", "suite_confirm_remainder.yaml", {"ar3po": _arm(0.002, +0.02, +0.005, +0.035, 2.5, 1.2)})
    _record(tmp_path, "s_b", "suite_confirm_easy.yaml", {
        "ar3po": _arm(0.01, +0.01, -0.002, +0.02, 3.0, 1.5),          # seeds pass, two-way interval crosses 0
        "reinforce-ada": _arm(0.04, -0.02, -0.03, -0.004, 0.5, 0.2)})  # lower on both
    _record(tmp_path, "other_c", "suite_confirm_hard.yaml", {"ar3po": _arm(1e-6, 0.1, 0.05, 0.2, 9.0, 5.0)})
    v = suite("s", tmp_path, tmp_path / "plans", goal_tasks=1)
    assert v["family_size"] == 3 and v["fewest_seeds"] == 7  # ceil(log2(2 * 3 / 0.05)) = ceil(6.91)
    got = {(r["record"], r["arm"]): r for r in v["rows"]}
    assert [round(got[k]["p_suite"], 6) for k in [("s_a", "ar3po"), ("s_b", "ar3po"), ("s_b", "reinforce-ada")]] \
        == [0.006, 0.02, 0.04]
    assert got["s_a", "ar3po"]["verdict"] == "higher" and got["s_a", "ar3po"]["goal_met"]
    assert got["s_b", "ar3po"]["verdict"] == "no difference shown" and not got["s_b", "ar3po"]["goal_met"]
    assert got["s_b", "reinforce-ada"]["verdict"] == "lower"
    assert v["tasks_meeting_goal"] == ["s_a"] and v["goal_met"]
    assert not suite("s", tmp_path, tmp_path / "plans", goal_tasks=3)["goal_met"]
    # a file not run yet joins the family with p = 1: 0.002, 0.01, 0.04, 1 -> 0.008, 0.03, 0.08, 1
    _record(tmp_path, "s_d", "suite_confirm_hard.yaml", None)
    v = suite("s", tmp_path, tmp_path / "plans")
    got = {(r["record"], r["arm"]): r for r in v["rows"]}
    assert v["family_size"] == 4 and v["not_run"] == ["s_d"] and got["s_d", "ar3po"]["verdict"] == "not run yet"
    assert got["s_b", "reinforce-ada"]["p_suite"] == pytest.approx(0.08)
    assert got["s_b", "reinforce-ada"]["verdict"] == "no difference shown"
    # below the fewest seeds for the family, nothing is decided
    _record(tmp_path, "s_c", "suite_confirm_hard.yaml", {"ar3po": _arm(0.0001, 0.1, 0.05, 0.2, 9.0, 5.0, seeds=5)})
    rows = suite("s", tmp_path, tmp_path / "plans")["rows"]
    assert next(r for r in rows if r["record"] == "s_c")["verdict"].startswith("none")


def test_a_suite_refuses_an_exploratory_file_and_a_missing_prefix(tmp_path):
    from bench_holm import suite
    (tmp_path / "plans").mkdir()
    with pytest.raises(SystemExit, match="no plan files named s_"):
        suite("s", tmp_path, tmp_path / "plans")
    _record(tmp_path, "s_a", "pool_easy_explore.yaml", None)
    with pytest.raises(SystemExit, match="not confirmatory"):
        suite("s", tmp_path, tmp_path / "plans")
