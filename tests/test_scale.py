"""From a tiny run to a cluster profile's scale (systems/scale.py; issue 41 item 3): lengths rebuilt from a
row's shape, the same factor for every arm, GPU-seconds from the step-time model. Hand-computed cases."""
import numpy as np
import pytest

from rollwise.systems import scale
from rollwise.systems.profile import load_profile
from rollwise.systems.steptime import step_time


def test_lengths_keep_the_rows_median_p90_max_and_mean():
    L = scale.lengths_from_shape(100, mean=58.0, p50=40.0, p90=100.0, top=200.0)  # reachable: lo in [1, 40]
    assert len(L) == 100 and L.max() <= 200 and L.min() >= 1
    assert np.percentile(L, 50) == pytest.approx(40.0, abs=2.0) and np.percentile(L, 90) == pytest.approx(100.0, abs=8)
    assert L.mean() == pytest.approx(58.0, abs=0.5)
    # a mean the knots cannot reach (below what lo = 1 gives) is as near as they allow: lo clipped
    assert scale.lengths_from_shape(10, mean=1.0, p50=40.0, p90=100.0, top=200.0).min() >= 1


def _rows(lens, n_rows=8, groups=2):
    rows, tot = [{"step": 0, "tokens": 0}], {"rollouts": 0, "prompt_tokens": 0, "learner_tokens": 0}
    for s, m in enumerate(lens, 1):
        tot = {"rollouts": tot["rollouts"] + n_rows, "prompt_tokens": tot["prompt_tokens"] + 10 * groups,
               "learner_tokens": tot["learner_tokens"] + n_rows * (10 + m)}
        rows.append({"step": s, "prompts": groups, "len_mean": m, "len_p50": m, "len_p90": m, "len_max": m, **tot})
    return rows


def test_each_step_is_the_same_work_at_the_profiles_length():
    works = scale.step_works(_rows([5, 5]), factor=100.0)
    assert len(works) == 2
    w = works[0]
    (rnd,) = w.rounds
    assert rnd.lengths.tolist() == [500] * 8 and rnd.prompt_lengths.tolist() == [1000.0] * 8  # 10 per prompt x 100
    assert rnd.groups.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] and w.trained_tokens == 100.0 * 8 * 15


def test_gpu_seconds_are_the_step_time_models_times_the_gpus():
    p = load_profile("h100x16-llama8b-v1")
    rows = _rows([5, 10])
    secs = scale.gpu_seconds(rows, p, 100.0, "sync")
    works = scale.step_works(rows, 100.0)
    one = step_time(p, works[0], "sync").step_s * p.gpus
    assert secs[0] == 0 and secs[1] == pytest.approx(one)
    assert secs[2] == pytest.approx(one + step_time(p, works[1], "sync").step_s * p.gpus)
    # one step off overlaps generation and training on split GPUs: never more than sync here
    assert scale.gpu_seconds(rows, p, 100.0, "one-step-off")[2] <= secs[2]


def test_variant_two_maps_lengths_onto_the_long_tail_by_one_monotone_map():
    from statistics import NormalDist
    # two baseline lengths 10 and 30, sigma with sigma * z(0.75) = ln 3: quantiles in the ratio 1 : 9,
    # rescaled to the same mean 20 -> knots 10 -> 4, 30 -> 36
    m = scale.longtail_map([30.0, 10.0], np.log(3) / NormalDist().inv_cdf(0.75))
    assert m.x.tolist() == [10.0, 30.0] and m.y == pytest.approx([4.0, 36.0])
    # between the knots linear, past them proportional (an arm's longer rows stay longer): 5 -> 2, 60 -> 72
    assert m(np.array([10.0, 20.0, 30.0, 5.0, 60.0])) == pytest.approx([4.0, 20.0, 36.0, 2.0, 72.0])
    # three knots at mid-ranks 1/6, 1/2, 5/6 with sigma * z(5/6) = ln 2: shape 1/2 : 1 : 2, mean 7/6 -> mean 20
    m3 = scale.longtail_map([10.0, 20.0, 30.0], np.log(2) / NormalDist().inv_cdf(5 / 6))
    assert m3.y == pytest.approx([60 / 7, 120 / 7, 240 / 7])
    # ties share one knot with their quantiles averaged, so the map stays a function
    tied = scale.longtail_map([5.0, 5.0], 1.0)
    assert tied.x.tolist() == [5.0] and tied(np.array([5.0, 10.0])) == pytest.approx([5.0, 10.0])
    with pytest.raises(ValueError, match="every one > 0"):
        scale.longtail_map([0.0, 3.0], 1.0)


def test_variant_two_keeps_every_rows_rank_within_its_step_and_the_same_map_for_every_arm():
    rows = [{"step": 0}, {"step": 1, "rollouts": 8, "prompts": 2, "len_mean": 58.0, "len_p50": 40.0, "len_p90": 100.0,
                          "len_max": 200.0, "prompt_tokens": 20, "learner_tokens": 600}]
    first = scale.base_lengths([rows], factor=10.0)
    assert first.tolist() == pytest.approx((10 * scale.lengths_from_shape(8, 58.0, 40.0, 100.0, 200.0)).tolist())
    lt = scale.longtail_map(first, 0.8)
    v1 = scale.step_works(rows, 10.0)[0].rounds[0].lengths
    v2 = scale.step_works(rows, 10.0, lt)[0].rounds[0].lengths
    assert (np.argsort(v2, kind="stable") == np.argsort(v1, kind="stable")).all()  # ranks kept
    assert v2.mean() == pytest.approx(v1.mean(), rel=0.01)  # the baseline's own first step keeps its mean
    assert v2.max() / v2.mean() > v1.max() / v1.mean()  # and takes the longer tail of the published shape
    # an arm whose step is narrower (every row at the median) stays narrower under the same map
    narrow = [rows[0], {**rows[1], "len_mean": 40.0, "len_p90": 40.0, "len_max": 40.0}]
    n2 = scale.step_works(narrow, 10.0, lt)[0].rounds[0].lengths
    assert n2.std() < v2.std() and n2.max() < v2.max()


def test_the_base_length_and_the_mode_of_a_run():
    assert scale.base_mean_length([_rows([4, 9]), _rows([6, 9])]) == 5.0
    assert scale.mode_of({"mode": "one-step-off"}) == "one-step-off" and scale.mode_of({}) == "sync"
    assert not scale.has_lengths([{"step": 0}, {"step": 1, "len_mean": None}]) and scale.has_lengths(_rows([3]))


def test_a_plan_report_reads_modelled_gpu_hours_when_rows_carry_lengths():
    """Two arms with the same learning per step; the arm's responses are half as long: the same target
    is reached in the same steps, each cheaper at scale, so GPU-hours to target and per step are > 1."""
    from rollwise.bench import clock

    def run(m):
        rows = _rows([m] * 4)
        for r, acc in zip(rows, [0.2, 0.4, 0.6, 0.7, 0.7]):
            r["eval_acc"] = acc
        return {"rows": rows, "config": {"mode": "sync"}}
    base, arm = [run(40), run(40)], [run(20), run(20)]
    g = clock.modelled(base, arm, [b["rows"] for b in base], [a["rows"] for a in arm], np.random.default_rng(0))
    assert g["profile"] == "h100x16-llama8b-v1" and g["factor"] == pytest.approx(2000 / 40)
    assert g["to_target"]["ratio"] > 1.2 and g["per_step"]["ratio"] > 1.2
    lt = g["longtail"]  # variant 2, and its assumed sigma at x0.5 and x2: the half-length arm is cheaper in each
    assert lt["sigma"] == scale.LONGTAIL_SIGMA and set(lt["sensitivity"]) == {"x0.5", "x2"}
    assert lt["per_step"]["ratio"] > 1.2 and all(v["per_step"]["ratio"] > 1.2 for v in lt["sensitivity"].values())
    text = "\n".join(clock.markdown_lines({"arm": {"clock": None, "gpu_hours": g}}))
    assert "not available" in text  # no measured clock in these rows; the modelled figure needs none
    assert "Second variant" in text and f"sigma = {scale.LONGTAIL_SIGMA:g}" in text
    # rows with neither a shape nor decoded tokens per step (these hand-made rows carry no `tokens`): nothing
    # to scale (rows with `tokens` fall back to each step's mean: tests/test_gpu_hours_fallback.py)
    old = [{k: v for k, v in r.items() if not k.startswith("len_")} for r in base[0]["rows"]]
    assert clock.modelled([{"rows": old, "config": {}}], arm[:1], [old], [arm[0]["rows"]],
                          np.random.default_rng(0)) is None
