"""The warm start's learning-rate schedule: linear warm-up, then constant (the shipped bases) or a half
cosine (`warmstart.lr_decay: cosine`), against hand-computed rates; the decay enters a base's fingerprint
only when it is not the default, so the shipped bases are still found."""
import json
import math

import pytest

from rollwise.policy.warmstart import SHIPPED, WarmStartConfig, fingerprint, warmstart_lr
from rollwise.tasks.remainder import RemainderTask


def test_constant_and_cosine_rates_by_hand():
    const = WarmStartConfig(steps=10, warmup=2, lr=1.0)
    assert [warmstart_lr(const, s) for s in range(10)] == [0.5] + [1.0] * 9
    cos = WarmStartConfig(steps=10, warmup=2, lr=1.0, lr_decay="cosine")
    rates = [warmstart_lr(cos, s) for s in range(10)]
    assert rates[:2] == [0.5, 1.0]  # the warm-up is the same
    # after it, step s (from 0) is at (s + 1 - 2) / 9 of a half cosine: 1/9 at step 2, 8/9 at the last
    assert rates[2] == pytest.approx(0.5 * (1 + math.cos(math.pi / 9)))
    assert rates[9] == pytest.approx(0.5 * (1 + math.cos(8 * math.pi / 9)))
    assert all(a > b > 0 for a, b in zip(rates[1:], rates[2:]))  # falling, and the last step still learns


def test_the_default_keeps_the_shipped_fingerprints_and_cosine_is_another_base():
    from rollwise.run.config import load_config

    for sets, name in [({"task": "remainder"}, "remainder"),
                       ({"task": "remainder", "warmstart.arch": "llama"}, "remainder-llama")]:
        cfg = load_config(None, sets).warmstart
        assert cfg.lr_decay == "constant"
        build = json.loads((SHIPPED / name / "build.json").read_text())
        assert fingerprint(RemainderTask(), cfg) == build["fingerprint"]
        cos = load_config(None, {**sets, "warmstart.lr_decay": "cosine"}).warmstart
        assert fingerprint(RemainderTask(), cos) != build["fingerprint"]


def test_an_unknown_decay_is_a_one_line_error(capsys):
    from rollwise.cli import main
    from rollwise.run.config import load_config

    with pytest.raises(ValueError, match="warmstart.lr_decay must be one of constant, cosine, got 'linear'"):
        load_config(None, {"warmstart.lr_decay": "linear"})
    assert main(["warmstart", "--task", "arithmetic", "--set", "warmstart.lr_decay=linear"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rollwise: error: warmstart.lr_decay") and "\n" not in err
