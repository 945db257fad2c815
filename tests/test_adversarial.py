"""Adversarial suite: bad input and faults, one group of tests per root cause of the "correct and hard to
break" issue (part B). Each asserts the clear error or the correct behaviour that replaced a traceback,
a silent wrong result, a data loss, a hang or code execution. docs/robustness.md is the table of them.

Runs are the tiny model on the small test config (conftest.SMALL) for one to three steps; nothing here
waits on a real timeout longer than a second."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from rollwise.run.config import load_config
from rollwise.run.checkpoint import CKPT, from_plain, read_checkpoint, to_plain
from rollwise.run.loop import RunStopped, Trainer
from rollwise.run.records import finite_row
from rollwise.run.rundir import OutLock
from rollwise.tasks.reward import Scorer

from conftest import SMALL

QUIET = dict(log=lambda m: None)


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread while these tests run: on 2 shared cores, two threads per process make a tiny step
    ten times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def cfg_for(out, **kw):
    return load_config(None, {**SMALL, "out": str(out), "eval_every": 0, **kw})


def strict_rows(path):
    """metrics.jsonl parsed as strict JSON: NaN/Infinity tokens are an error."""
    def no_constant(c):
        raise AssertionError(f"{path}: non-JSON token {c}")
    return [json.loads(line, parse_constant=no_constant) for line in open(path).read().splitlines()]


def cli(capsys, *argv):
    """`rollwise ARGV` in this process: (exit code, stderr); stdout is kept in cli.out."""
    from rollwise.cli import main

    code = main(list(argv))
    captured = capsys.readouterr()
    cli.out = captured.out
    return code, captured.err


# ---- 1. code execution from a data file -------------------------------------------------------------

class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # what a crafted checkpoint does: run a command when unpickled
        return (os.system, (f"touch {self.marker}",))


def test_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path, small_policy):
    out, marker = tmp_path / "run", tmp_path / "pwned"
    out.mkdir()
    torch.save({"format": 2, "step": _Payload(marker)}, out / CKPT)
    with pytest.raises(ValueError, match=r"checkpoint.pt: refused: .*(posix|os)\.system"):
        Trainer(cfg_for(out, steps=1), **QUIET).run()
    assert not marker.exists()


def test_config_cannot_make_a_planner_or_task_of_a_command(tmp_path):
    """A config names components by import path and builds them with its options: a callable that is not a
    component of that kind is refused before it is called."""
    marker = tmp_path / "pwned"
    for overrides, msg in (({"planner": "os:system", "planner_options": {"os:system": {"command": f"touch {marker}"}}},
                            "'os:system': refused: 'os' is the standard library"),
                           ({"task": "subprocess:Popen", "task_options": {"args": f"touch {marker}", "shell": True}},
                            "'subprocess:Popen': refused: 'subprocess' is the standard library")):
        with pytest.raises(ValueError, match=msg):
            load_config(None, overrides)
    assert not marker.exists()


def test_checkpoint_state_is_plain_data_and_round_trips_exactly(tmp_path):
    rng = np.random.default_rng(7)
    rng.random(3)
    state = {"arr": np.arange(5, dtype=np.int64), "f32": np.float32(0.1), "u16": np.arange(3, dtype=np.uint16),
             "mask": np.array([True, False]), "rng": rng.bit_generator.state, "keys": {(1, "a"): 2, 3: {4, 5}},
             "np_key": {np.int64(3): 1.5}, "t": torch.arange(3), "tup": (1, None, "x")}
    torch.save(to_plain(state), tmp_path / "s.pt")
    back = from_plain(torch.load(tmp_path / "s.pt", weights_only=True))
    assert back["arr"].dtype == np.int64 and back["arr"].tolist() == [0, 1, 2, 3, 4]
    assert type(back["f32"]) is np.float32 and back["f32"] == np.float32(0.1)
    assert back["u16"].dtype == np.uint16 and back["mask"].tolist() == [True, False]
    assert back["rng"] == rng.bit_generator.state and back["keys"] == {(1, "a"): 2, 3: {4, 5}}
    assert back["np_key"] == {3: 1.5} and back["t"].tolist() == [0, 1, 2] and back["tup"] == (1, None, "x")
    with pytest.raises(TypeError, match=r"state.planner: cannot checkpoint a .*_Payload"):
        to_plain({"planner": _Payload("x")})


def test_truncated_or_foreign_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "a.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="a.pt: not a readable checkpoint"):
        read_checkpoint(tmp_path / "a.pt")
    torch.save({"step": 3}, tmp_path / "b.pt")  # an older or foreign format
    with pytest.raises(ValueError, match="b.pt: checkpoint format None is not 2"):
        read_checkpoint(tmp_path / "b.pt")


# ---- 2. non-finite values are caught ----------------------------------------------------------------

def test_huge_lr_skips_steps_then_stops_without_saving_nan(tmp_path, small_policy, capsys, cache_dir):
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--steps", "6", "--reward", "rewards_for_tests:by_length"]  # a gradient
    for k, v in {**SMALL, "eval_every": 0, "learner.lr": 1e10}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    code, err = cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1 and "rollwise: error: 3 steps in a row" in err and "Traceback" not in err
    rows = strict_rows(out / "metrics.jsonl")
    assert [r["skipped_steps"] for r in rows] == [1, 2, 3] and all(r["updated"] == 0 for r in rows)
    assert rows[0]["loss"] is None and "loss" in rows[0]["nonfinite"]  # NaN written as null, and named
    state = read_checkpoint(out / CKPT)  # saved after steps 1 and 2: the restored, finite weights
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    code, err = cli(capsys, *args)  # a resume stops the same way, not with a crash in torch.multinomial
    assert code == 2 and "3 steps in a row (to step 3)" in err and f"resuming {out} from step 2" in cli.out


def test_non_finite_reward_scores_zero_and_counts(tmp_path, small_policy):
    s = Scorer("adversarial_rewards:not_finite", trusted=False, timeout_s=2)
    scores = s.judge_many([("nan", ""), ("inf", ""), ("-inf", ""), ("ok", "")])
    assert [x.reward for x in scores] == [0.0, 0.0, 0.0, 1.0] and s.errors == 3 and "non-finite" in s.last_error
    s.close()
    rows = Trainer(cfg_for(tmp_path / "r", steps=1, reward="adversarial_rewards:nan_reward"), **QUIET).run()
    n = rows[-1]["rollouts"]
    assert rows[-1]["reward_errors"] == n and rows[-1]["reward_mean"] == 0.0 and rows[-1]["skipped_steps"] == 0
    assert strict_rows(tmp_path / "r" / "metrics.jsonl")


def test_metrics_rows_are_strict_json():
    row = finite_row({"step": 1, "loss": float("nan"), "kl": float("inf"), "ok": 0.5})
    assert row == {"step": 1, "loss": None, "kl": None, "ok": 0.5, "nonfinite": ["kl", "loss"]}
    json.dumps(row, allow_nan=False)


def test_eval_of_a_nan_model_is_an_error_not_zero(tmp_path, small_policy, capsys):
    from rollwise.policy.policy import Policy

    bad = Policy.load(small_policy[0])
    with torch.no_grad():
        next(bad.model.parameters()).fill_(float("nan"))
    bad.save(tmp_path / "nan-model")
    code, err = cli(capsys, "eval", "--model", str(tmp_path / "nan-model"), "--size", "3")
    assert code == 2 and "non-finite weights" in err and str(tmp_path / "nan-model") in err
    with pytest.raises(ValueError, match="non-finite weights"):  # nor can it be trained
        Trainer(cfg_for(tmp_path / "t", model=str(tmp_path / "nan-model")), **QUIET)


@pytest.mark.parametrize("key,value", [("temperature", float("nan")), ("learner.grad_clip", float("nan")),
                                       ("learner.lr", float("inf")), ("top_p", 0.0)])
def test_non_finite_settings_are_refused_at_load(key, value):
    with pytest.raises(ValueError, match=f"^{key} must be"):
        load_config(None, {key: value})


# ---- 3. user rewards run in a separate process ------------------------------------------------------

@pytest.mark.parametrize("fn,bad", [("exits", "exit"), ("exits", "_exit"), ("spins", "spin"), ("flaky", "hang"),
                                    ("hogs_memory", "hog"), ("flaky", "boom")])
def test_reward_that_exits_hangs_spins_or_hogs_memory_scores_zero(fn, bad):
    s = Scorer(f"adversarial_rewards:{fn}", trusted=False, timeout_s=0.5, memory_mb=512)
    t0 = time.perf_counter()
    first = s.judge_many([("ok", "ok"), (bad, "ok"), ("ok", "ok")])
    assert first[0].reward == 1.0 or fn == "flaky"  # scored before the fault: kept
    assert first[1].reward == 0.0 and s.errors >= 1
    assert s.judge("ok", "ok").reward == 1.0 or fn == "flaky"  # the worker (or its replacement) serves on
    assert time.perf_counter() - t0 < 4  # one timeout per call, not one per rollout
    s.close()


def test_reward_timeout_is_per_call_not_per_rollout():
    s = Scorer("adversarial_rewards:hangs_always", trusted=False, timeout_s=0.5)
    t0 = time.perf_counter()
    scores = s.judge_many([("a", "")] * 16)
    assert [x.reward for x in scores] == [0.0] * 16 and s.errors == 16
    assert time.perf_counter() - t0 < 3  # 16 serial timeouts would take 8 s
    s.close()


def test_reward_output_on_stdout_does_not_corrupt_the_worker():
    s = Scorer("adversarial_rewards:prints", trusted=False, timeout_s=2)
    assert [x.reward for x in s.judge_many([("a", ""), ("b", "")])] == [1.0, 1.0] and s.errors == 0
    s.close()


def test_bad_reward_spec_is_an_error_before_training():
    for spec, msg in (("no_such_module_x:f", "no module .no_such_module_x. on the import path"), ("adversarial_rewards:nope", "not a callable"),
                      ("adversarial_rewards", "module:function")):
        with pytest.raises(ValueError, match=msg):
            Scorer(spec, trusted=False)
    with pytest.raises(ValueError, match=r"reward_timeout_s must be a number in \(0, 86400\] \(seconds\), got 0"):
        load_config(None, {"reward_timeout_s": 0})


def test_failing_reward_warns_and_run_ends_with_no_worker_left(tmp_path, small_policy):
    logs = []
    tr = Trainer(cfg_for(tmp_path / "r", steps=1, reward="adversarial_rewards:always_fails"), log=logs.append)
    rows = tr.run()
    assert rows[-1]["reward_errors"] == rows[-1]["rollouts"]
    assert any("warning: step 1: the reward function failed on" in m and "ZeroDivisionError" in m for m in logs)
    assert tr.scorer.worker.proc is None  # killed at the end of the run
    assert not [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_a_hanging_reward_lets_the_process_exit(tmp_path, small_policy, cache_dir):
    args = [sys.executable, "-m", "rollwise.cli", "train", "--out", str(tmp_path / "h"), "--steps", "1",
            "--reward", "adversarial_rewards:hangs_always"]
    for k, v in {**SMALL, "reward_timeout_s": 0.3, "eval_every": 0, "batch_size": 2}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    env = {**os.environ, "ROLLWISE_CACHE": str(cache_dir), "PYTHONPATH": os.path.dirname(__file__),
           "OMP_NUM_THREADS": "1"}
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "timed out after 0.3s" in res.stdout  # the warning names the cause


# ---- 4. a resume never mixes configs ----------------------------------------------------------------

def test_resume_with_changed_settings_is_refused_unless_allowed(tmp_path, small_policy):
    out = tmp_path / "run"
    Trainer(cfg_for(out, steps=1), **QUIET).run()
    recorded = (out / "config.json").read_text()
    for change in ({"learner.lr": 3e-4}, {"seed": 5}, {"planner": "dapo"}, {"learner.advantage": "rloo"},
                   {"batch_size": 4}, {"task_options": {**SMALL["task_options"], "pool_size": 150}}):
        with pytest.raises(ValueError, match="made with other settings .*" + list(change)[0].replace(".", r"\.")):
            Trainer(cfg_for(out, steps=2, **change), **QUIET).run()
        assert (out / "config.json").read_text() == recorded  # the record still tells the truth
    rows = Trainer(cfg_for(out, steps=2, eval_every=1, checkpoint_every=2), **QUIET).run()  # cadence, steps: fine
    assert rows[-1]["step"] == 2
    logs = []
    rows = Trainer(cfg_for(out, steps=3, **{"learner.lr": 3e-4}), log=logs.append, allow_config_change=True).run()
    assert rows[-1]["step"] == 3 and any("changed settings (learner.lr: 0.0001 -> 0.0003)" in m for m in logs)
    change = json.loads((out / "config_changes.jsonl").read_text().splitlines()[-1])
    assert change == {"step": 2, "changes": {"learner.lr": [0.0001, 0.0003]}}
    assert json.loads((out / "config.json").read_text())["learner"]["lr"] == 3e-4


# ---- 5. --out is locked ------------------------------------------------------------------------------

def test_second_trainer_on_the_same_out_fails_at_once(tmp_path, small_policy):
    out = tmp_path / "run"
    out.mkdir()
    with OutLock(out):  # another run holds it
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=f"--out {out}: in use by another rollwise process .pid {os.getpid()}"):
            Trainer(cfg_for(out, steps=1), **QUIET).run()
        assert time.perf_counter() - t0 < 5 and not (out / "metrics.jsonl").exists()
    Trainer(cfg_for(out, steps=1), **QUIET).run()  # released: runs


def test_bench_locks_its_out_and_names_never_become_paths(tmp_path):
    from rollwise.bench.runner import BenchConfig, run_all, run_dir, safe_name

    cfg = BenchConfig(out=str(tmp_path / "b"), planners=["uniform"], seeds=1)
    (tmp_path / "b").mkdir()
    with OutLock(tmp_path / "b"):
        with pytest.raises(ValueError, match="bench --out .*in use by another rollwise process"):
            run_all(cfg)
    assert "/" not in safe_name("../../x") and safe_name("greso+ar3po") == "greso_plus_ar3po"
    d = run_dir(cfg, "default", "../../../x", 0).resolve()
    assert str(d).startswith(str((tmp_path / "b" / "runs").resolve()))
    with pytest.raises(ValueError, match="cannot name a run directory"):
        safe_name("..")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_bench_trainer_dies_with_the_bench(tmp_path):
    """A trainer started by a bench (ROLLWISE_PARENT_PID set, as run_all does) ends when the bench is
    SIGKILLed, which no cleanup code in the bench sees."""
    import signal

    child = ("import sys, time; from rollwise.cli import die_with_parent; die_with_parent(); "
             f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(60)")
    bench = ("import os, subprocess, sys, time; "
             f"p = subprocess.Popen([sys.executable, '-c', {child!r}], env={{**os.environ, 'ROLLWISE_PARENT_PID': str(os.getpid())}}); "
             f"open({str(tmp_path / 'pid')!r}, 'w').write(str(p.pid)); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", bench])
    deadline = time.time() + 30
    while not (tmp_path / "ready").exists() and time.time() < deadline:
        time.sleep(0.05)
    pid = int((tmp_path / "pid").read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z"):
            break
        time.sleep(0.05)
    assert state in ("gone", "Z"), f"the trainer outlived its bench (state {state})"


# ---- 6. --out never destroys files -------------------------------------------------------------------

def test_out_with_foreign_files_and_no_checkpoint_is_refused(tmp_path, small_policy):
    out = tmp_path / "copied"
    out.mkdir()
    lines = "".join(json.dumps({"step": i, "tokens": i}) + "\n" for i in range(97))
    (out / "metrics.jsonl").write_text(lines)
    with pytest.raises(ValueError, match="holds metrics.jsonl but no checkpoint.pt .*never replaces"):
        Trainer(cfg_for(out, steps=1), **QUIET).run()
    assert (out / "metrics.jsonl").read_text() == lines
    hf = tmp_path / "hf-model"  # a model directory: its config.json is not a run's
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="never replaces"):
        Trainer(cfg_for(hf, steps=1), **QUIET).run()
    assert (hf / "config.json").read_text() == '{"model_type": "llama"}'


def test_run_stopped_before_its_first_checkpoint_starts_over(tmp_path, small_policy, monkeypatch):
    out = tmp_path / "run"
    with monkeypatch.context() as m:  # killed before the first save
        m.setattr(Trainer, "save_checkpoint", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            Trainer(cfg_for(out, steps=1), **QUIET).run()
    assert not (out / CKPT).exists() and len(strict_rows(out / "metrics.jsonl")) == 1
    rows = Trainer(cfg_for(out, steps=1), **QUIET).run()
    assert [r["step"] for r in strict_rows(out / "metrics.jsonl")] == [r["step"] for r in rows] == [1]


def test_empty_out_is_refused():
    with pytest.raises(ValueError, match="out must name a directory, got an empty string"):
        load_config(None, {"out": ""})


# ---- 7. file tasks ------------------------------------------------------------------------------------

def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_task_without_warm_start_or_model_says_what_it_needs():
    # a file task warm-starts the tiny model on its rows (tests/test_file_warmstart.py); a task with no
    # supervised examples cannot, and needs --model
    load_config(None, {"task": "file", "task_options": {"train_path": "t.jsonl", "heldout_path": "h.jsonl"}})
    task = "rewards_for_tests:TaskWithoutWarmStart"
    with pytest.raises(ValueError, match=f"task '{task}' has no supervised warm start.*--model PATH"):
        load_config(None, {"task": task})
    load_config(None, {"task": task, "model": "some/dir"})


@pytest.mark.parametrize("prompt,answer,msg", [
    ("what is 1+1?", "2", None),
    ("WHAT IS 1+1?", "2", "the prompt has text outside the model's vocabulary .characters \\['A', 'H', 'I', 'S', 'T', 'W'\\]"),
    ("1" * 60, "2", "the prompt is 60 tokens; with max_new_tokens=8 that is more than the model's context of 64"),
    ("1+1=", "22222222222", "the answer is 11 tokens, more than max_new_tokens=8"),
    ("1+1=", "\u00e9", "the answer has text outside the model's vocabulary"),
])
def test_file_rows_checked_against_the_policy_before_training(tmp_path, small_policy, prompt, answer, msg):
    train = _write_jsonl(tmp_path / "t.jsonl", [{"prompt": "2+2=", "answer": "4"}, {"prompt": prompt, "answer": answer}])
    held = _write_jsonl(tmp_path / "h.jsonl", [{"prompt": "3+3=", "answer": "6"}])
    cfg = cfg_for(tmp_path / "run", steps=1, task="file", model=str(small_policy[0]),
                  task_options={"train_path": train, "heldout_path": held})
    if msg is None:
        Trainer(cfg, **QUIET)  # a good file passes
        return
    with pytest.raises(ValueError, match=f"t.jsonl: row 2: {msg}"):
        Trainer(cfg, **QUIET)
    assert not (tmp_path / "run").exists()  # before any training


def test_file_answers_keep_the_text_written(tmp_path):
    from rollwise.tasks.files import load_prompts

    f = _write_jsonl(tmp_path / "a.jsonl", ['{"prompt": "p", "answer": 3.0}', '{"prompt": "p", "answer": 3}',
                                            '{"prompt": "p", "answer": 1e3}', '{"prompt": "p", "answer": "07"}',
                                            '{"prompt": "p", "answer": -0.50, "level": 2}'])
    ps = load_prompts(f)
    assert [p.answer for p in ps] == ["3.0", "3", "1e3", "07", "-0.50"] and ps[-1].level == 2
    assert all(type(p.answer) is str for p in ps)
    for row, msg in (('{"prompt": "p", "answer": ""}', "field 'answer' is empty"),
                     ('{"prompt": "p", "answer": "  "}', "field 'answer' is empty"),
                     ('{"prompt": "p", "answer": true}', "field 'answer' must be a string or number, got a boolean"),
                     ('{"prompt": "p", "answer": NaN}', "not valid JSON .NaN is not JSON"),
                     ('{"prompt": 5, "answer": "5"}', "field 'prompt' must be a non-empty string"),
                     ('{"prompt": "p", "answer": "1", "level": 1.5}', "field 'level' must be an integer")):
        with pytest.raises(ValueError, match=f"b.jsonl: row 1: {msg}"):
            load_prompts(_write_jsonl(tmp_path / "b.jsonl", [row]))


def test_parquet_float_answer_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from rollwise.tasks.files import load_prompts

    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "answer": 3}]), tmp_path / "i.parquet")
    assert load_prompts(tmp_path / "i.parquet")[0].answer == "3"
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "answer": 3.0}]), tmp_path / "f.parquet")
    with pytest.raises(ValueError, match="f.parquet: row 1: field 'answer' is a float"):
        load_prompts(tmp_path / "f.parquet")


# ---- 8. config values ----------------------------------------------------------------------------------

BAD_VALUES = [
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"n": 0}, "n must be >= 1, got 0"),
    ({"n": 1}, "n must be >= 2 with advantage 'grpo', got 1"),
    ({"eval_size": -7}, "eval_size must be >= 0"),
    ({"steps": -1}, "steps must be >= 1, got -1"),
    ({"steps": "ten"}, "steps must be an integer, got 'ten'"),
    ({"checkpoint_every": 0}, "checkpoint_every must be >= 1, got 0"),
    ({"learner.epochs": 0}, "learner.epochs must be >= 1, got 0"),
    ({"learner.minibatches": 0}, "learner.minibatches must be >= 1, got 0"),
    ({"learner.micro_batch_rows": 0}, "learner.micro_batch_rows must be >= 1"),
    ({"learner.lr": -1}, "learner.lr must be a finite number > 0"),
    ({"learner.betas": [0.9, 1.5]}, "learner.betas must be two numbers in"),
    ({"learner.kl_estimator": "k9"}, "learner.kl_estimator must be one of"),
    ({"learner.drop_zero_adv": "yes"}, "learner.drop_zero_adv must be true or false"),
    ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
    ({"seed": -1}, "seed must be in"),
    ({"budget_tokens": -5}, "budget_tokens must be >= 0"),
    ({"eval_k": 4, "eval_samples": 2}, "eval_samples must be >= eval_k"),
    ({"warmstart.warmup": 0}, "warmstart.warmup must be >= 1"),
    ({"warmstart.n_embd": 130}, "warmstart.n_embd must be a multiple of warmstart.n_head"),
    ({"reward": "nocolon"}, "reward must be 'module:function'"),
    ({"task_options": {"pool_size": "many"}}, "task_options.pool_size must be an integer, got 'many'"),
    ({"planner": "greso", "planner_options": {"greso": {"p_min": "x"}}}, "planner_options.greso.p_min must be a number"),
    ({"learner": 3}, "learner must be a mapping of its fields"),
]


@pytest.mark.parametrize("overrides,msg", BAD_VALUES, ids=[next(iter(o)) for o, _ in BAD_VALUES])
def test_bad_config_values_are_one_clear_error(overrides, msg):
    with pytest.raises(ValueError) as e:
        load_config(None, overrides)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_integral_floats_are_integers():
    assert load_config(None, {"budget_tokens": 4e4}).budget_tokens == 40000


def test_bench_checks_come_before_any_run(tmp_path):
    from rollwise.bench.runner import BenchConfig, run_all

    with pytest.raises(ValueError, match="--jobs must be >= 1, got 0"):
        run_all(BenchConfig(out=str(tmp_path / "a"), jobs=0))
    with pytest.raises(ValueError, match="no planner named 'nope'"):
        run_all(BenchConfig(out=str(tmp_path / "b"), planners=["uniform", "nope"], seeds=1))
    assert not (tmp_path / "b" / "runs").exists()  # refused before GRPO's runs started


# ---- the CLI: one line, no traceback, for bad input ---------------------------------------------------

@pytest.mark.parametrize("argv,msg", [
    (["train", "--set", "batch_size=0"], "batch_size must be >= 1, got 0"),
    (["train", "--set", "nokey"], "--set 'nokey': expected KEY=VALUE"),
    (["train", "--set", "learner.lrr=1"], "unknown key 'lrr'"),
    (["train", "--planner", "nope"], "no planner named 'nope'"),
    (["train", "--task", "file"], "file task: set both task_options.train_path and task_options.heldout_path"),
    (["train", "--task", "rewards_for_tests:TaskWithoutWarmStart"], "needs --model PATH"),
    (["train", "--config", "/nonexistent/c.yaml"], "No such file"),
    (["train", "--out", ""], "out must name a directory"),
    (["train", "--set", "x=[1"], "not a YAML value"),
    (["eval", "--size", "-1"], "--size must be >= 0, got -1"),
    (["eval", "--model", "/nonexistent"], "not a checkpoint directory"),
    (["bench", "--jobs", "0", "--out", "/tmp/rollwise-never"], "--jobs must be >= 1"),
    (["bench", "--mixes", "nope"], "unknown mix 'nope'"),
])
def test_cli_bad_input_is_one_line(capsys, argv, msg):
    code, err = cli(capsys, *argv)
    assert code == 2 and err.startswith("rollwise: error: ") and msg in err and err.count("\n") == 1, err
