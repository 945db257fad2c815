"""A console like a trainer's (issue 48, item 4): progress on Python's logging ('rollwise') with reward, entropy,
zero-variance share, tokens and compute; `rollwise compare`; every metrics.jsonl field documented."""
import json
import logging
import re
from pathlib import Path

import pytest

from test_adversarial import cfg_for, one_thread  # noqa: F401  (one_thread: an autouse fixture)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, small_policy):
    """A 2-step run evaluated every step, its console read through a handler of our own on 'rollwise'."""
    from rollwise.run.loop import Trainer

    out = tmp_path_factory.mktemp("console") / "run"
    log = logging.getLogger("rollwise")
    saved = log.handlers[:], log.propagate
    log.handlers = [h := Lines()]  # a handler of the user's replaces the console's
    log.setLevel(logging.INFO)
    try:
        rows = Trainer(cfg_for(out, steps=2, eval_every=1)).run()
    finally:
        log.handlers, log.propagate = saved
    return out, rows, h.records


def test_each_evaluation_logs_a_step_line_with_reward_entropy_zero_variance_tokens_and_compute(short_run):
    _, rows, records = short_run
    assert all(r.name == "rollwise" for r in records)
    lines = [r.getMessage() for r in records if r.getMessage().startswith("train: step")]
    assert len(lines) == 2  # steps 1 and 2 were evaluated
    last = rows[-1]  # this tiny base solves almost nothing, so no update and no entropy: the rest is said
    assert lines[-1] == (f"train: step 2/2, {last['tokens']:,} generated tokens, compute {last['compute']:.3g}, "
                         f"reward {last['reward_mean']:.3f}, zero-var {last['zero_var_frac_gen']:.3f}, held-out "
                         f"{last['eval_acc']:.3f} at step 2")
    verdicts = [r for r in records if r.getMessage().startswith("verdict: ")]
    assert len(verdicts) == 1 and verdicts[0].levelno == logging.INFO


def test_the_progress_line_reads_the_last_steps_row(tmp_path, small_policy):
    from rollwise.run.loop import Trainer

    tr = Trainer(cfg_for(tmp_path / "run", steps=10), log=lambda m: None)
    tr.step = 3
    tr._last_row = {"compute": 123456.0, "reward_mean": 0.4375, "entropy": 0.81234, "zero_var_frac_gen": 0.75}
    assert tr.progress() == "step 3/10, 0 generated tokens, compute 1.23e+05, reward 0.438, entropy 0.812, zero-var 0.750"


def test_warnings_go_out_at_warning_level_and_the_console_writes_to_the_current_stdout(capsys):
    from rollwise.run.progress import Console, console, say

    log = logging.getLogger("rollwise")
    saved = log.handlers[:], log.propagate
    log.handlers = []
    try:
        assert isinstance(console().handlers[0], Console) and not console().propagate
        assert len(console().handlers) == 1  # once
        seen = Lines()
        log.addHandler(seen)
        say("warning: step 1: nothing to learn")
        say("resuming run from step 3")
        assert [r.levelno for r in seen.records] == [logging.WARNING, logging.INFO]
        assert capsys.readouterr().out == "warning: step 1: nothing to learn\nresuming run from step 3\n"
    finally:
        log.handlers, log.propagate = saved


def test_every_metrics_field_of_a_run_is_documented_cumulative_or_per_step(short_run):
    out, rows, _ = short_run
    table = DOCS.read_text().split("## metrics.jsonl fields", 1)[1]
    documented = set(re.findall(r"`([^`]+)`", table))
    documented |= {f"rollouts_{p}" for p in ("train", "discarded", "eval", "pilot", "profile", "oracle")}
    fields = {k for r in rows for k in r}
    patterns = (r"tok/[a-z]+/[a-z]+/[a-z]+", r"eval_acc_L\d+")
    missing = sorted(k for k in fields if k not in documented and not any(re.fullmatch(p, k) for p in patterns))
    assert missing == []
    assert "| `wall_s` | cumulative |" in table


def _run_dir(path: Path, evals: dict, compute_per_step: float = 100.0) -> Path:
    path.mkdir(parents=True)
    rows = [{"step": s, "tokens": 10 * s, **({"compute": compute_per_step * s} if s else {}),
             "eval_acc": a, "eval_se": 0.05} for s, a in sorted(evals.items())]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_prints_the_curves_their_difference_and_verdicts(tmp_path, capsys):
    """A at steps 0, 2, 4: 0.5, 0.6, 0.7. B at steps 0, 3, 6: 0.5, 0.8, 0.8, read at A's steps: 0.5, 0.5 + 0.3 *
    2/3 = 0.7, 0.8; differences 0, +0.1, +0.1."""
    from rollwise.cli import main

    a = _run_dir(tmp_path / "a", {0: 0.5, 2: 0.6, 4: 0.7})
    b = _run_dir(tmp_path / "b", {0: 0.5, 3: 0.8, 6: 0.8}, compute_per_step=50.0)
    plot = tmp_path / "c.png"
    assert main(["compare", str(a), str(b), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == ["step      a      b   b - a",
                       "   0  0.500  0.500  +0.000",
                       "   2  0.600  0.700  +0.100",
                       "   4  0.700  0.800  +0.100"]
    assert out[5].startswith("a: verdict: learning: held-out accuracy 0.500 (step 0) -> 0.700 (step 4)")
    assert out[6].startswith("b: verdict: learning:") and out[-1] == f"plot: {plot}"
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"
    # by compute, b (half the compute per step) is ahead at equal cost: at a's 200 units it is at step 4
    assert main(["compare", str(a), str(b), "--x", "compute"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split() == ["200", "0.600", "0.800", "+0.200"]


def test_compare_refuses_what_it_cannot_read_in_one_line(tmp_path, capsys):
    from rollwise.cli import main

    a = _run_dir(tmp_path / "a", {0: 0.5, 2: 0.6})
    assert main(["compare", str(a), str(tmp_path / "nope")]) == 2
    assert "nope: no metrics.jsonl (not a run directory)" in capsys.readouterr().err
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "metrics.jsonl").write_text(json.dumps({"step": 1, "tokens": 5}) + "\n")
    assert main(["compare", str(a), str(tmp_path / "flat")]) == 2
    assert "flat: no held-out evaluation in its metrics.jsonl (set eval_every)" in capsys.readouterr().err
    assert main(["compare", str(a)]) == 2
    assert "compare needs at least two run directories" in capsys.readouterr().err


def test_trains_last_line_names_the_compute_spent_and_how_to_compare_at_equal_compute(tmp_path, small_policy, capsys):
    """Equal tokens cost AR3PO ~1.45x GRPO's compute units and the single-run path never said so (issue 48)."""
    from rollwise.cli import main

    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--steps", "1", "--set", "eval_every=1", "--set",
                 "task_options.pool_size=200", "--set", "task_options.heldout_size=40", "--set", "warmstart.steps=20",
                 "--set", "batch_size=8", "--set", "n=4", "--set", "max_new_tokens=8"]) == 0
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    said = capsys.readouterr().out.splitlines()[-1]
    assert f", {last['compute']:.4g} compute units (compare planners at equal budget_compute, or rollwise compare " \
           "--x compute); metrics in " in said
