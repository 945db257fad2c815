"""bench/costs.py: profiles are validated data, and compute units follow the formula on hand-made counts."""
import json
import sys
from pathlib import Path

import pytest

from rollwise.bench import costs

PROFILE = """
name: test-v1
version: 1
ratios:
  decode: {value: 1, source: unit}
  prefill: {value: 0.5, source: a}
  learner: {value: 3, source: b}
  logprob: {value: 1, source: c}
  scoring: {value: 0.25, source: d}
  aux_head: {value: 0.1, source: e}
"""


def test_compute_units_is_the_weighted_sum_of_the_counts():
    p = costs.parse_profile(PROFILE)
    counts = {"decode_tokens": 100, "prefill_tokens": 40, "learner_tokens": 10, "logprob_tokens": 10,
              "scoring_tokens": 8, "aux_tokens": 20}
    # 100 + 0.5*40 + 3*10 + 1*10 + 0.25*8 + 0.1*20 = 100 + 20 + 30 + 10 + 2 + 2
    assert costs.compute_units(counts, p) == pytest.approx(164)
    assert costs.compute_units(counts, p.scaled("learner", 2)) == pytest.approx(194)  # learner 6 x 10
    with pytest.raises(ValueError, match="missing count learner_tokens"):
        costs.compute_units({k: v for k, v in counts.items() if k != "learner_tokens"}, p)


def test_counts_from_a_metrics_row_and_what_it_lacks():
    row = {"step": 3, "tokens": 999, "tok/train/trained/decoded": 300, "tok/train/discarded/decoded": 50,
           "tok/train/trained/shared": 20, "tok/train/trained/draft": 70, "tok/eval/scored/decoded": 1000,
           "tok/oracle/scored/decoded": 400, "tok/verified": 90, "prompt_tokens": 60, "learner_tokens": 800}
    cfg = {"learner": {"epochs": 2, "recompute_old": True, "kl_coef": 0.01}}
    counts, missing = costs.counts_from_row(row, cfg)
    # decode: decoded + shared of every purpose but eval and oracle (a draft token was prefilled, not decoded)
    assert counts["decode_tokens"] == 370 and missing == []
    assert counts["prefill_tokens"] == 60 + 90  # prompts + verified drafts
    # learner_tokens already counts 2 epochs: 400 trained tokens, each with an old and a reference pass
    assert counts["learner_tokens"] == 800 and counts["logprob_tokens"] == 800
    counts, _ = costs.counts_from_row(row, {"learner": {"recompute_old": False}})
    assert counts["logprob_tokens"] == 0
    # a row recorded before prompt/learner tokens were in metrics says so
    counts, missing = costs.counts_from_row({"step": 1, "tokens_train": 10, "tokens_pilot": 2, "tokens_eval": 50})
    assert counts["decode_tokens"] == 12 and missing == ["prompt_tokens", "learner_tokens"]
    assert costs.counts_from_row({"step": 0, "tokens": 0, "eval_acc": 0.4})[1] == []  # the base's row


def test_shipped_profiles_load_and_a_bad_profile_is_one_line_naming_the_field(tmp_path):
    assert {"gpu-h100-v1"} <= set(costs.available_profiles())
    gpu = costs.load_profile("gpu-h100-v1")
    assert gpu.ratios["decode"] == 1 and 0 < gpu.ratios["prefill"] < 1 < gpu.ratios["learner"]
    assert all(gpu.sources[k] for k in costs.RATIOS)
    for name in costs.available_profiles():
        if name.startswith("cpu-"):
            assert costs.load_profile(name).seconds_per_unit > 0
    with pytest.raises(ValueError, match="unknown cost profile 'nope'; available: .*gpu-h100-v1"):
        costs.load_profile("nope")
    with pytest.raises(ValueError, match="ratios.learner must be a mapping"):
        costs.parse_profile(PROFILE.replace("learner: {value: 3, source: b}", "learner: 3"))
    with pytest.raises(ValueError, match="ratios.prefill.value must be a finite number >= 0"):
        costs.parse_profile(PROFILE.replace("value: 0.5", "value: -1"))
    with pytest.raises(ValueError, match="missing field 'version'"):
        costs.parse_profile(PROFILE.replace("version: 1", ""))
    with pytest.raises(ValueError, match="ratios.decode.value must be 1"):
        costs.parse_profile(PROFILE.replace("decode: {value: 1,", "decode: {value: 2,"))
    with pytest.raises(ValueError, match="not valid YAML"):
        costs.parse_profile("name: [")
    f = tmp_path / "mine.yaml"
    f.write_text(PROFILE)
    assert costs.load_profile(str(f)).name == "test-v1"


def test_compute_curve_of_a_recorded_run_states_the_counts_it_lacks():
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from archive import read_member  # the record is in bench2's archive: read it there, nothing unpacked

    run = Path(__file__).parent.parent / "benchmarks/results/bench2/runs/default/uniform/seed0"
    rows = [json.loads(x) for x in read_member(run / "metrics.jsonl").decode().splitlines()]
    xs, missing = costs.compute_curve(rows, costs.load_profile("gpu-h100-v1"))
    assert xs[0] == 0 and xs[-1] == rows[-1]["tokens"]  # decode only: GRPO's budget tokens are all decoded
    assert missing == ["learner_tokens", "prompt_tokens"]
