"""Asynchronous training: the staleness bound (pure, with threads), then real Ray runs of a few steps:
async with S = 0 and one worker equals the synchronous loop, the bound holds per step, a killed worker's
requests are requeued, and a resumed async run continues exactly."""
import json
import threading
import time

import pytest

from rollwise.run.records import TIMING
from rollwise.core.staleness import StalenessGate

from conftest import SMALL


# ---- the bound, as a pure class ----------------------------------------------------------------
def test_admission_is_t_le_version_plus_s():
    g = StalenessGate(2, version=3)
    assert [g.allowed(t) for t in (4, 5, 6)] == [True, True, False]
    with pytest.raises(ValueError, match="went back"):
        g.publish(2)


@pytest.mark.parametrize("S", [0, 1, 3])
def test_with_threads_no_step_is_generated_from_weights_older_than_s(S):
    """A generator thread runs ahead of a learner thread; each step records the version current when it
    was admitted. Every step t must see version >= t - S, and with S = 0 exactly t (prime-rl #1902: a
    bound of 0 mixed two policies through an off-by-one)."""
    gate, seen, steps = StalenessGate(S), {}, 40
    lock = threading.Lock()
    done = []

    def generator():
        for t in range(steps):
            assert gate.admit(t, timeout=10)
            with lock:
                seen[t] = gate.version
            done.append(t)

    def learner():
        for t in range(steps):
            while t not in done:
                time.sleep(0.0005)
            time.sleep(0.001)  # the update
            gate.release(t)
            gate.publish(t + 1)

    threads = [threading.Thread(target=generator), threading.Thread(target=learner)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert len(seen) == steps and all(v >= t - S for t, v in seen.items())
    if S == 0:
        assert all(v == t for t, v in seen.items())
    assert max(t - v for t, v in seen.items()) <= S and not gate.running


def test_the_bound_holds_after_recovery_from_a_checkpoint():
    """AReaL #1388: staleness above the bound after recovery. A gate restored from a checkpoint counts
    nothing in flight and admits exactly as the uninterrupted one would."""
    g = StalenessGate(1)
    for t in range(5):
        g.admit(t, timeout=1)
        g.release(t)
        g.publish(t + 1)
    r = StalenessGate.from_state(g.state_dict())
    assert r.version == 5 and not r.running
    assert r.allowed(6) and not r.allowed(7) and r.admit(7, timeout=0.05) is False


def test_a_requeued_sample_spanning_versions_is_stale_at_consume_time():
    """slime #2092: a requeue let one sample's tokens span versions [2, 4, 6]. The consume-time check
    reads the oldest token's version: with S = 2 at learner version 7 it is 5 updates old, refused."""
    g = StalenessGate(2, version=7)
    assert not g.fresh_enough(min([2, 4, 6])) and g.fresh_enough(5) and not g.fresh_enough(4)


def test_close_wakes_waiters():
    g = StalenessGate(0)
    out = []
    th = threading.Thread(target=lambda: out.append(g.admit(5)))
    th.start()
    time.sleep(0.05)
    g.close()
    th.join(timeout=5)
    assert out == [False]


# ---- real Ray runs (the heavy suite: .ci/run) --------------------------------------------------------
heavy = pytest.mark.heavy


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def cfg(out, **kw):
    from rollwise.run.config import load_config

    return load_config(None, {**SMALL, "out": str(out), "eval_every": 2, "checkpoint_every": 2, **kw})


def strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def run(c):
    import torch

    from rollwise.run.loop import Trainer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the async learner uses one thread; compare like with like
    try:
        return Trainer(c).run()
    finally:
        torch.set_num_threads(threads)


@heavy
def test_async_with_no_staleness_and_one_worker_is_the_synchronous_loop(tmp_path, small_policy, ray_cluster):
    sync = run(cfg(tmp_path / "s", steps=3))
    asyn = run(cfg(tmp_path / "a", steps=3, mode="async", workers=1, max_staleness=0, **{"learner.correction": "none"}))
    assert strip(asyn) == strip(sync)


@heavy
def test_async_run_keeps_the_bound_and_its_tokens_balance(tmp_path, small_policy, ray_cluster):
    rows = run(cfg(tmp_path / "a", steps=4, mode="async", workers=2, max_staleness=1))
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert all(r["staleness_max"] <= 1 for r in steps) and steps[-1]["staleness_max"] == 1  # S used, never exceeded
    assert steps[0]["staleness_max"] == 0  # the first step samples from the base
    assert sum(r["step_tokens"] for r in steps) == steps[-1]["tokens"] == steps[-1]["tokens_train"]
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["mode"] == "async" and saved["learner"]["correction"] == "areal-decoupled"  # the async default


@heavy
def test_a_killed_worker_is_replaced_and_its_requests_requeued(tmp_path, small_policy, ray_cluster, monkeypatch):
    from rollwise.generate.ray_pool import RayEnginePool

    polls = {"n": 0}
    poll = RayEnginePool.poll

    def poll_and_kill(self, max_steps=None):
        polls["n"] += 1
        if polls["n"] == 3:  # mid-run: worker 1 dies with requests in hand
            self.kill_worker(1)
        return poll(self, max_steps)

    monkeypatch.setattr(RayEnginePool, "poll", poll_and_kill)
    rows = run(cfg(tmp_path / "k", steps=4, mode="async", workers=2, max_staleness=1))
    steps = [r for r in rows if r["step"] > 0]
    assert len(steps) == 4 and steps[-1]["worker_restarts"] >= 1
    assert all(r["prompts"] == SMALL["batch_size"] and r["batch_rollouts"] == SMALL["batch_size"] * SMALL["n"]
               for r in steps)  # every prompt answered in full
    assert sum(r["step_tokens"] for r in steps) == steps[-1]["tokens"]  # the ledger balances


@heavy
def test_async_resume_continues_exactly(tmp_path, small_policy, ray_cluster):
    full = run(cfg(tmp_path / "f", steps=4, mode="async", workers=2, max_staleness=1))
    run(cfg(tmp_path / "p", steps=2, mode="async", workers=2, max_staleness=1))
    resumed = run(cfg(tmp_path / "p", steps=4, mode="async", workers=2, max_staleness=1))
    assert strip(resumed) == strip(full)


@heavy
def test_async_wall_time_leaves_out_evaluations_and_no_step_is_generated_during_one(tmp_path, small_policy,
                                                                                 ray_cluster, monkeypatch):
    """wall_s is comparable with the synchronous loop's: elapsed training time, evaluations excluded. An
    evaluation that takes 0.4 s more is not counted, and no collect overlaps it (or it would be free)."""
    from rollwise.run.driver import StepDriver
    from rollwise.run.loop import Trainer

    spans = {"eval": [], "collect": []}

    def timed(kind, fn, pad=0.0):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                time.sleep(pad)
                spans[kind].append((t0, time.perf_counter()))
        return wrapper

    monkeypatch.setattr(Trainer, "_evaluate", timed("eval", Trainer._evaluate, pad=0.4))
    monkeypatch.setattr(StepDriver, "collect", timed("collect", StepDriver.collect))
    t0 = time.perf_counter()
    rows = run(cfg(tmp_path / "w", steps=4, mode="async", workers=2, max_staleness=2, eval_every=1))
    elapsed = time.perf_counter() - t0
    walls = [r["wall_s"] for r in rows if r["step"] > 0]
    evals = sum(b - a for a, b in spans["eval"])
    assert len(spans["eval"]) == 5 and len(spans["collect"]) == 4  # step 0's eval and one after each step
    assert all(b > a for a, b in zip(walls, walls[1:]))
    assert walls[-1] <= elapsed - evals  # the evaluations (>= 2 s in all) are not in the wall time
    assert walls[-1] >= sum(b - a for a, b in spans["collect"])  # every collect is (none overlaps a pause)
    overlaps = [(e, c) for e in spans["eval"] for c in spans["collect"] if c[0] < e[1] and e[0] < c[1]]
    assert not overlaps


@heavy
def test_ray_workers_cpu_seconds_are_counted(small_policy, ray_cluster):
    """cpu_s must hold what the workers' own processes spend decoding (issue 42: an async arm's CPU cost
    beside its wall seconds); the pool sums each worker's process CPU time."""
    from rollwise.core.types import Prompt, Request
    from rollwise.generate.ray_pool import RayEnginePool

    pool = RayEnginePool(str(small_policy[0]), workers=1, engine_kwargs={"max_new_tokens": 8})
    try:
        pool.wait_ready()
        c0 = pool.cpu_seconds()
        pool.submit([Request(Prompt(i, f"{i}+{i}=", str(2 * i)), 8, id=i) for i in range(16)])
        done = 0
        while pool.pending:
            done += len(pool.poll())
        assert done == 16 and pool.cpu_seconds() > c0
    finally:
        pool.shutdown()
