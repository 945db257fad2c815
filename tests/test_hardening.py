"""Issue 30 ("Hard to break, the rest of the way"): one test per root cause, each failing on 55832b4.
docs/robustness.md keeps the table (the rows marked "issue 30")."""
import json

import sys

import pytest
import torch

from rollwise.run.config import load_config

from conftest import SMALL
from test_adversarial import cfg_for, one_thread  # noqa: F401  (one_thread: an autouse fixture)


def cli(capsys, *argv):
    """`rollwise ARGV` in this process: (exit code, stderr)."""
    from rollwise.cli import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    cli.out = captured.out
    return code, captured.err


# ---- 1. a config names a command as a component built from keyword options --------------------------

@pytest.mark.parametrize("key,spec,options", [
    ("reward_shaping", "os:system", "reward_shaping_options"),
    ("engine", "os:system", "engine_options"),
    ("learner.advantage", "os:system", None),
    ("learner.loss", "os:system", None),
    ("learner.correction", "os:system", None),
    ("learner.recompose", "os:system", None),
    ("learner.loss_agg", "os:system", None),
])
def test_no_kind_builds_an_unmarked_callable_from_a_config(tmp_path, key, spec, options):
    marker = tmp_path / "pwned"
    overrides = {key: spec}
    if options:
        overrides[options] = {"command": f"touch {marker}"}
    with pytest.raises(ValueError, match=r"os:system': refused: 'os' is the standard library"):
        load_config(None, overrides)
    assert not marker.exists()


def test_os_system_shaping_config_is_one_line_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"reward_shaping": "os:system",
                                  "reward_shaping_options": {"command": f"touch {marker}"}}))
    code, err = cli(capsys, "train", "--config", config, "--out", tmp_path / "run")
    assert code == 2 and err.count("\n") == 1 and "shaping 'os:system': refused" in err
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_a_marked_plugin_loads_and_a_plugin_that_raises_on_import_is_one_line(tmp_path, monkeypatch):
    from rollwise.core import registry

    (tmp_path / "plug_ok.py").write_text(
        "from rollwise.control.base import Component\n"
        "class Mine(Component):\n    pass\n"
        "class Loose:\n    pass\n")
    (tmp_path / "plug_bad.py").write_text("raise RuntimeError('plugin is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.get("planner", "plug_ok:Mine").obj.__name__ == "Mine"  # a Component subclass carries it
    with pytest.raises(ValueError, match="'plug_ok:Loose' is not a task component"):
        registry.get("task", "plug_ok:Loose")
    with pytest.raises(ValueError, match=r"importing module 'plug_bad' raised RuntimeError: plugin is broken"):
        registry.get("planner", "plug_bad:X")


# ---- 2. a recorded run is never overwritten -----------------------------------------------------------

def test_recorded_run_is_never_replaced(tmp_path, small_policy, capsys):
    from rollwise.run.loop import CKPT, Trainer
    import shutil

    out = tmp_path / "run"
    Trainer(cfg_for(out, steps=1), log=lambda m: None).run()
    (out / CKPT).unlink()  # an archived record keeps config.json and metrics.jsonl
    shutil.rmtree(out / "model")
    before = (out / "metrics.jsonl").read_bytes()
    code, err = cli(capsys, "train", "--config", out / "config.json", "--out", out)
    assert code == 2 and err.count("\n") == 1 and "saved checkpoints but its checkpoint.pt is gone" in err
    (out / ".rollwise-run").unlink()  # a record from elsewhere (or an older rollwise): no marker at all
    code, err = cli(capsys, "train", "--config", out / "config.json", "--out", out)
    assert code == 2 and "rollwise did not start a run there" in err and "starting over" not in cli.out + err
    assert (out / "metrics.jsonl").read_bytes() == before and not (out / CKPT).exists()


def test_config_with_an_absolute_out_needs_out(tmp_path, capsys):
    elsewhere = tmp_path / "recording-machine" / "run"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**{k: v for k, v in SMALL.items() if "." not in k}, "out": str(elsewhere)}))
    code, err = cli(capsys, "train", "--config", config)
    assert code == 2 and "out is the absolute path" in err and "give --out DIR" in err
    assert not elsewhere.exists()


# ---- 3. --allow-config-change applies what it records, refuses what the saved state overrides -------------

@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_allowed_lr_change_is_applied_and_seed_change_is_refused(tmp_path, small_policy):
    import shutil

    from safetensors.torch import load_file

    from rollwise.run.loop import Trainer

    quiet = dict(log=lambda m: None)
    a, b = tmp_path / "a", tmp_path / "b"
    kw = dict(reward="rewards_for_tests:by_length")  # a reward with variance: every step updates
    Trainer(cfg_for(a, steps=1, **kw), **quiet).run()
    shutil.copytree(a, b)
    Trainer(cfg_for(a, steps=2, **kw), **quiet).run()  # unchanged resume
    tr = Trainer(cfg_for(b, steps=2, **kw, **{"learner.lr": 3e-3}), allow_config_change=True, **quiet)
    rows = tr.run()
    assert rows[-1]["step"] == 2 and rows[-1]["updated"] == 1
    assert [g["lr"] for g in tr.learner.opt.param_groups] == [3e-3] * len(tr.learner.opt.param_groups)
    wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)  # the new lr moved the weights differently
    recorded = (a / "config.json").read_text()
    with pytest.raises(ValueError, match=r"cannot resume with seed: 0 -> 5, even with --allow-config-change"):
        Trainer(cfg_for(a, steps=3, seed=5, **kw), allow_config_change=True, **quiet).run()
    with pytest.raises(ValueError, match=r"cannot resume with warmstart\.lr"):
        Trainer(cfg_for(a, steps=3, **kw, warmstart={"steps": 20, "lr": 2e-3}), allow_config_change=True,
                **quiet).run()
    assert (a / "config.json").read_text() == recorded


# ---- 4. a reward outside its range is an error, not a right answer -----------------------------------------

def test_reward_outside_its_range_is_an_error_counted_like_a_failure():
    from rollwise.tasks.reward import Score, Scorer

    s = Scorer("adversarial_rewards:huge", trusted=False, timeout_s=5)
    try:
        assert s.judge_many([("1", "1"), ("2", "1")]) == [Score(0.0, False, None)] * 2
        assert s.errors == 2 and "outside its reward_range [0, 1]" in s.last_error
    finally:
        s.close()
    s = Scorer("adversarial_rewards:signed", trusted=False, timeout_s=5)  # declares (-1, 1)
    try:
        assert s.judge_many([("bad", ""), ("ok", "")]) == [Score(-1.0, False), Score(1.0, True)] and s.errors == 0
    finally:
        s.close()
    with pytest.raises(ValueError, match="outside its reward_range"):  # a trusted verifier's bug raises
        Scorer(lambda r, a: 2.0).judge("", "")
    assert Scorer(lambda r, a: {"correct": 1.0, "format": 0.5}).judge("", "").correct


def test_eval_with_a_reward_that_always_fails_reports_it(small_policy, capsys):
    args = ["eval", "--size", "4", "--set", f"task_options={json.dumps(SMALL['task_options'])}",
            "--set", f"warmstart={json.dumps(SMALL['warmstart'])}", "--set", "max_new_tokens=8"]
    code, err = cli(capsys, *args, "--reward", "adversarial_rewards:huge")
    assert code == 2 and err.count("\n") == 1 and "failed on 4 of 4 responses" in err
    assert "no accuracy to report" in err and "outside its reward_range" in err
    code, err = cli(capsys, *args, "--reward", "rewards_for_tests:by_length")
    assert code == 0 and json.loads(cli.out)["reward_errors"] == 0


def test_nothing_to_learn_warning_blames_the_reward_when_it_failed(tmp_path, small_policy):
    from rollwise.run.loop import Trainer

    logs = []
    Trainer(cfg_for(tmp_path / "r", steps=1, reward="adversarial_rewards:always_fails"), log=logs.append).run()
    (warning,) = [m for m in logs if "nothing to learn" in m]
    assert "the reward function failed on 32 of 32 rollouts" in warning and "the model solves" not in warning


def test_nothing_to_learn_warning_is_not_given_to_an_estimator_that_teaches_equal_groups(tmp_path, small_policy):
    # the same failing reward makes every group equal; GRPO warns, RL-ZVP trains those groups (learn/zvp.py)
    from rollwise.run.loop import Trainer

    logs = {}
    for adv in ("grpo", "rl-zvp"):
        logs[adv] = []
        Trainer(cfg_for(tmp_path / adv, steps=1, reward="adversarial_rewards:always_fails",
                        learner={"advantage": adv}), log=logs[adv].append).run()
    assert any("nothing to learn" in m for m in logs["grpo"])
    assert not any("nothing to learn" in m for m in logs["rl-zvp"])


# ---- 5. export refuses a NaN model; a damaged one is one line ----------------------------------------------

def test_export_refuses_a_nan_or_damaged_model(tmp_path, small_policy, capsys):
    from rollwise.policy.policy import Policy

    bad = Policy.load(small_policy[0])
    with torch.no_grad():
        for p in bad.model.parameters():
            p.fill_(float("nan"))
    bad.save(tmp_path / "nan-model")
    code, err = cli(capsys, "export", "--model", tmp_path / "nan-model", "--out", tmp_path / "x")
    assert code == 2 and err.count("\n") == 1 and "non-finite weights" in err and "not exporting it" in err
    assert not (tmp_path / "x").exists()
    damaged = tmp_path / "damaged"
    Policy.load(small_policy[0]).save(damaged)
    (damaged / "model.safetensors").write_bytes(b"\x00" * 64)
    code, err = cli(capsys, "export", "--model", damaged, "--out", tmp_path / "y")
    assert code == 2 and err.count("\n") == 1 and f"model {damaged}" in err and "Traceback" not in err
    assert not (tmp_path / "y").exists()


# ---- 6. raw tracebacks become one line naming the problem ----------------------------------------------

@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   RuntimeError("[enforce fail at inline_container.cc:783] . PytorchStreamWriter "
                                                "failed writing file data/3: file write failed")])
def test_disk_full_while_saving_a_checkpoint_is_one_line_and_keeps_the_last(tmp_path, small_policy, capsys,
                                                                          monkeypatch, error):
    from rollwise.run.checkpoint import CKPT, read_checkpoint

    out = tmp_path / "run"
    args = ["train", "--out", out]
    for k, v in {**SMALL, "eval_every": 0}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    assert cli(capsys, *args, "--steps", "1")[0] == 0
    real_save = torch.save

    def full(obj, f, *a, **kw):
        real_save(obj, f, *a, **kw)  # part of it written, then the disk is full
        raise error
    monkeypatch.setattr(torch, "save", full)
    code, err = cli(capsys, *args, "--steps", "2")
    assert code == 2 and err.count("\n") == 1 and "step 2: " in err and f"while saving the checkpoint in {out}" in err
    assert "the previous checkpoint (step 1) is kept" in err and "Traceback" not in err
    assert read_checkpoint(out / CKPT)["step"] == 1 and not (out / ".checkpoint-saving").exists()


@pytest.mark.parametrize("sets,msg", [
    (["learner=5", "learner.lr=1e-3"], "learner.lr: learner is 5, not a mapping of fields"),
    (["warmstart=5"], "warmstart must be a mapping of its fields, got 5"),
    (["planner=uniform+april", "planner_options.april.overprovision=nan"],
     "planner_options.april.overprovision must be a number, got nan"),
    (["planner=uniform+april", "planner_options.april.overprovision=inf"],
     "april: overprovision must be a finite number >= 0, got inf"),
    (["engine=vllm"], "engine 'vllm': --engine vllm needs vLLM"),
])
def test_bad_settings_are_one_line_before_any_work(tmp_path, capsys, monkeypatch, sets, msg):
    from rollwise.run import build

    # vLLM absent, wherever this runs: patching find_spec alone is not enough in the vLLM environment
    # (.venv-vllm), where the engine's check then imports the installed vllm and passes; a None entry in
    # sys.modules makes find_spec answer None and `import vllm` raise ImportError, as without the package
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setattr(build, "load_policy", lambda path: pytest.fail("a model was loaded"))
    args = ["train", "--out", tmp_path / "run"]
    for s in sets:
        args += ["--set", s]
    code, err = cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and msg in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("cmd", ["warmstart", "train"])
def test_block_size_too_small_for_the_embedded_task_is_one_line_with_a_size_that_works(tmp_path, capsys, cmd,
                                                                                       cache_dir):
    code, err = cli(capsys, cmd, "--set", "warmstart.block_size=8", "--set", "warmstart.steps=2",
                    *(["--out", tmp_path / "run"] if cmd == "train" else []))
    assert code == 2 and err.count("\n") == 1 and "more than the base's context warmstart.block_size=8" in err
    size = int(err.rsplit("--set warmstart.block_size=", 1)[1])
    assert size >= 24  # the longest arithmetic prompt (14 tokens) + max_new_tokens (10)


# ---- 7. file tasks: held-out prompts leave the RL pool; one prompt, one answer -------------------------------

def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_file_task_drops_heldout_prompts_from_the_pool_and_refuses_conflicting_answers(tmp_path):
    from rollwise.tasks.files import FileTask

    train = _jsonl(tmp_path / "t.jsonl", [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(5)])
    held = _jsonl(tmp_path / "h.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "3+1=", "answer": "4"},
                                         {"prompt": "9+1=", "answer": "10"}])
    t = FileTask(train, held)
    assert [p.text for p in t.train_pool()] == ["0+1=", "2+1=", "4+1="] and [p.id for p in t.train_pool()] == [0, 1, 2]
    assert t.notes() == [f"2 train row(s) of {train} dropped from the RL pool: their prompt is a held-out prompt "
                         f"of {held} (3 left)"]
    assert t.describe_prompt("train", 2) == f"{train}: row 5"  # rows still name the file's lines
    rows = [{"prompt": "a=", "answer": "1"}, {"prompt": "b=", "answer": "2"}, {"prompt": "a=", "answer": "1"},
            {"prompt": "b=", "answer": "3"}, {"prompt": "c=", "answer": "4"}, {"prompt": "a=", "answer": "5"}]
    bad = _jsonl(tmp_path / "dup.jsonl", rows)
    with pytest.raises(ValueError, match=r"dup.jsonl: row 4: 2 prompt\(s\) appear on several rows with different "
                                         r"answers \(first: row 4 has the prompt of row 2, answer '3' vs '2'\)"):
        FileTask(bad, held)


def test_trainer_logs_the_dropped_heldout_prompts(tmp_path, small_policy):
    from rollwise.run.loop import Trainer

    train = _jsonl(tmp_path / "t.jsonl", [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(5)])
    held = _jsonl(tmp_path / "h.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    logs = []
    tr = Trainer(load_config(None, {"task": "file", "task_options": {"train_path": train, "heldout_path": held},
                                    "model": str(small_policy[0]), "out": str(tmp_path / "r"), "max_new_tokens": 4,
                                    "batch_size": 2, "n": 2}), log=logs.append)
    assert len(tr.pool) == 4 and any(m.startswith("task: 1 train row(s)") for m in logs)


# ---- 8. smaller ones ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,msg", [
    (["train", "--set", "task_options.pool_size=1e8"], "task_options.pool_size must be at most 100,000"),
    (["train", "--task", "chain", "--set", "task_options.heldout_size=1e8"],
     "task_options.heldout_size must be at most 100,000"),
    (["train", "--planner", "greso+greso"], "planner 'greso+greso': greso named more than once"),
    (["sim", "--steps", "1", "--prompts", "50", "--batch", "4", "--quiet", "--set", "dynamics.eta_global=nan"],
     "dynamics.eta_global must be a finite number, got nan"),
    # issue 45 item 6: silent or raw on settings
    (["train", "--set", "engine_options.max_rows=0"], "engine_options.max_rows must be >= 1"),
    (["train", "--set", "engine_options.max_rows=-2"], "engine_options.max_rows must be >= 1"),
    (["train", "--set", "task_options.pool_size.x=1"], "task_options.pool_size must be an integer, got {'x': 1}"),
    (["train", "--set", "reward_timeout_s=1e308"], "reward_timeout_s must be a number in (0, 86400]"),
    (["sim", "--steps", "1", "--prompts", "100000000000", "--quiet"], "sim: need 1 <= prompts <= 1e+08"),
    (["sim", "--steps", "1", "--prompts", "50", "--batch", "100000000", "--n", "16", "--quiet"],
     "batch x n <= 1e+08"),
])
def test_smaller_probes_are_one_line_at_once(tmp_path, capsys, args, msg):
    import time

    t0 = time.perf_counter()
    code, err = cli(capsys, *args, *(["--out", tmp_path / "run"] if args[0] == "train" else []))
    assert code == 2 and err.count("\n") == 1 and msg in err and time.perf_counter() - t0 < 30
    assert cli.out == ""  # nothing half-written on stdout (the simulator's figures are strict JSON or nothing)


def test_a_cut_metrics_row_the_checkpoint_covers_is_refused_on_resume(tmp_path, small_policy):
    from rollwise.run.loop import Trainer

    out = tmp_path / "run"
    Trainer(cfg_for(out, steps=2), log=lambda m: None).run()
    text = (out / "metrics.jsonl").read_text()
    (out / "metrics.jsonl").write_text(text[: len(text) - 40])  # the last row (step 2, checkpointed) cut short
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 is cut short and the rows stop before the "
                                         r"checkpoint's step 2"):
        Trainer(cfg_for(out, steps=3), log=lambda m: None).run()
    assert (out / "metrics.jsonl").read_text() == text[: len(text) - 40]  # untouched


def test_missing_math_verify_names_the_extra(tmp_path):
    from pathlib import Path

    import rollwise.tasks.reward as reward_mod
    from rollwise.tasks.reward import Scorer

    (tmp_path / "math_verify.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'math_verify'\", name='math_verify')\n")
    with pytest.raises(ValueError, match=r"--reward math needs the math-verify package \(pip install "
                                         r"'rollwise\[math\]'\)"):
        Scorer("_math_reward:auto", trusted=False, path=[str(tmp_path), str(Path(reward_mod.__file__).parent)],
               own=True)


# ---- a run that does not learn says so; progress lines when stdout is not a terminal (issue 30, new user) ----

def _rows(entropies, evals):
    """Metrics rows: one per step with its entropy (None: no update), evaluations {step: (acc, se)}."""
    rows = [{"step": 0, "eval_acc": evals[0][0], "eval_se": evals[0][1]}]
    for step, ent in enumerate(entropies, 1):
        row = {"step": step, "updated": 1, "entropy": ent} if ent is not None else \
            {"step": step, "updated": 0, "batch_rollouts": 16}
        if step in evals:
            row.update(eval_acc=evals[step][0], eval_se=evals[step][1])
        rows.append(row)
    return rows


@pytest.mark.parametrize("entropies,acc,warns", [
    ([0.69, 0.68, 0.70, 0.40, 0.20, 0.15], 0.600, True),  # 0.69 -> 0.25 mean of the last 3, accuracy within 1 se
    ([0.69, 0.68, 0.70, 0.40, 0.20, 0.15], 0.640, False),  # accuracy moved by 3 standard errors
    ([0.69, 0.68, 0.70, 0.60, 0.55, 0.50], 0.600, False),  # entropy 0.69 -> 0.55: not collapsed
])
def test_flat_accuracy_while_entropy_collapses_warns_once_and_at_the_end(entropies, acc, warns):
    from rollwise.run.stall import StallWatch

    w = StallWatch()
    lines = [line for row in _rows(entropies, {0: (0.597, 0.016), 6: (acc, 0.016)}) for line in w.see(row)]
    assert len(lines) == warns and len(w.summary()) == warns
    if warns:
        assert lines[0].startswith("warning: step 6: held-out accuracy has not moved (0.597 at step 0 -> 0.600 at "
                                   "step 6, within one standard error 0.016) while the policy's entropy collapsed "
                                   "(0.69 -> 0.25)") and "try a lower learner.lr" in lines[0]


def test_steps_without_an_update_are_counted_as_they_happen_and_at_the_end():
    from rollwise.run.stall import StallWatch

    w = StallWatch()
    ents = [0.5, None, 0.5] + [None] * 9 + [0.5]  # steps 2 and 4-12 make no update: 10 of 13
    lines = [line for row in _rows(ents, {0: (0.5, 0.05)}) for line in w.see(row)]
    assert lines == ["warning: step 2: no update (every advantage was 0: each group's rollouts scored alike); "
                     "1 of 2 steps so far made none",
                     "warning: step 12: no update (every advantage was 0: each group's rollouts scored alike); "
                     "10 of 12 steps so far made none"]
    assert w.summary()[0].startswith("warning: 10 of 13 steps made no update (first: step 2); try a larger n")
    skipped = StallWatch()  # a step undone for a non-finite loss has its own warning: not counted here
    assert skipped.see({"step": 1, "updated": 0, "skipped": 1}) == [] and skipped.summary() == []


def test_a_run_without_updates_says_so_as_it_happens_and_at_the_end(tmp_path, small_policy):
    from rollwise.run.loop import Trainer

    said = []
    Trainer(cfg_for(tmp_path / "run", steps=3, temperature=0.0), log=said.append).run()  # greedy: groups alike
    assert "warning: step 1: no update (every advantage was 0: each group's rollouts scored alike); 1 of 1 steps " \
           "so far made none" in said
    assert said[-1].startswith("warning: 3 of 3 steps made no update (first: step 1); try")


def test_train_and_eval_print_progress_lines_when_stdout_is_not_a_terminal(tmp_path, small_policy, capsys,
                                                                           monkeypatch):
    import io
    import time

    from rollwise.run import evaluate as evaluate_mod
    from rollwise.run.loop import Trainer
    from rollwise.run.progress import Heartbeat

    monkeypatch.setenv("ROLLWISE_PROGRESS_EVERY", "0.05")
    real = evaluate_mod.evaluate
    monkeypatch.setattr(evaluate_mod, "evaluate", lambda *a, **kw: (time.sleep(0.3), real(*a, **kw))[1])
    code, err = cli(capsys, "eval", "--model", small_policy[0], "--size", "4")
    beats = [line for line in cli.out.splitlines() if line.startswith("eval: ")]
    assert code == 0 and len(beats) >= 2 and beats[0].startswith("eval: evaluating 4 held-out prompts (")

    monkeypatch.setattr(Trainer, "_evaluate", lambda self: (time.sleep(0.3), {"eval_acc": 0.5, "eval_se": 0.1})[1])
    Trainer(cfg_for(tmp_path / "run", steps=1, eval_every=1), log=lambda m: None).run()
    beats = [line for line in capsys.readouterr().out.splitlines() if line.startswith("train: ")]
    assert len(beats) >= 2 and beats[0].startswith("train: step 0/1, 0 generated tokens (")

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    with Heartbeat("train", lambda: "x", stream=tty, every=0.01):
        time.sleep(0.1)
    assert tty.getvalue() == ""  # a terminal has tqdm's bar instead
    monkeypatch.setenv("ROLLWISE_PROGRESS_EVERY", "soon")
    code, err = cli(capsys, "train", "--out", tmp_path / "bad", "--steps", "1")
    assert code == 2 and "ROLLWISE_PROGRESS_EVERY must be a number of seconds, got 'soon'" in err


def test_reasoning_gym_verify_timeout_of_zero_is_refused_at_load():
    pytest.importorskip("reasoning_gym", reason="the reasoning-gym extra is not installed")
    from rollwise.run.config import load_config

    for value in (0, -1, 1e308):
        with pytest.raises(ValueError, match=r"task_options.verify_timeout_s must be a number in \(0, 86400\]"):
            load_config(None, {"task": "reasoning-gym", "task_options": {"dataset": "gcd", "verify_timeout_s": value}})
