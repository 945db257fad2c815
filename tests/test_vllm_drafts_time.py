"""benchmarks/vllm_drafts_time.py: the figures it reads from a run's cumulative counters, by hand (no vLLM)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

from vllm_drafts_time import figures, summarize  # noqa: E402


def _rows(gen, tokens, kept=None, scored=None):
    out = []
    for i, (g, t) in enumerate(zip(gen, tokens)):
        r = {"step": i + 1, "gen_s": g, "wall_s": 2 * g, "tokens_train": t}
        if kept is not None:
            r.update({"das/kept": kept[i], "das/scored": scored[i]})
        out.append(r)
    return [{"step": 0, "eval_acc": 0.5}] + out  # the step-0 evaluation row carries no counters


def test_step_one_is_left_out_and_the_rest_read_from_the_cumulative_counters():
    # step 1: 8 s (vLLM warming up) for 1000 tokens; steps 2-3: 2 s and 3 s for 1000 and 1500 tokens
    f = figures(_rows([8.0, 10.0, 13.0], [1000, 2000, 3500], kept=[0, 400, 1000], scored=[0, 500, 1300]))
    assert f["steps"] == 2 and f["gen_s"] == 5.0 and f["tokens"] == 2500
    assert f["s_per_token"] == pytest.approx(5.0 / 2500) and f["gen_s_per_step"] == 2.5 and f["wall_s_per_step"] == 5.0
    assert f["accept"] == pytest.approx(1000 / 1300) and f["draft_tokens"] == 1000
    assert figures(_rows([8.0, 10.0], [1000, 2000]))["accept"] is None  # plain decoding scores no drafts


def test_the_ratio_is_plain_over_das_per_seed():
    runs = [{"arm": "plain", "seed": 0, **figures(_rows([8, 10, 12], [1000, 2000, 3000]))},  # 2 ms / token
            {"arm": "das", "seed": 0, **figures(_rows([8, 9, 10], [1000, 2000, 3000], [0, 500, 1000], [0, 600, 1200]))},
            {"arm": "plain", "seed": 1, **figures(_rows([8, 11, 14], [1000, 2000, 3000]))},  # 3 ms / token
            {"arm": "das", "seed": 1, **figures(_rows([8, 11, 14], [1000, 2000, 3000], [0, 0, 0], [0, 10, 20]))}]
    s = summarize(runs)
    assert s["s_per_token_ratio"] == pytest.approx([2.0, 1.0]) and s["median_ratio"] == pytest.approx(1.5)
    assert s["draft_share"] == pytest.approx((1000 / 2000 + 0) / 2)
