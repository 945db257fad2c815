"""`rollwise train --mode async`: rollout workers run ahead of the learner, within a staleness bound.

The same driver, split in two threads:

    generation thread                                   learner (this thread)
    for step t:                                         for step t, in order:
        gate.admit(t)        # t <= version + S             take step t's batch from the queue
        workers <- weights after step t - S                 learner.update(batch)
        out = driver.collect(planner, ctx_t)                publish version t + 1 (and its weights)
        planner.observe(batch, ctx_t)                       metrics row, eval, checkpoint
        queue <- (t, out)

Workers are Ray actors (generate/ray_pool.py), each with its own engine and policy copy; `--workers 0`
runs one worker in this process instead (generate/local_pool.py: no Ray, the same loop). Step t is
generated with the weights published after step t - S *exactly* (AReaL's admission rule makes that the
oldest allowed; rollwise takes it always), so a run is a function of its seed: S = 0 with one worker
reproduces the synchronous loop bit for bit, and larger S only changes which weights sample each step.

Ordering: `observe` runs when a step's rollouts are collected, before its update (components read
outcomes, never the model, so the order is free; observing before the next step's selection keeps the
planners' state one step fresh instead of S). Checkpoints are taken at quiescent points: generation
does not start step t (t a multiple of checkpoint_every) until the learner has trained and saved step
t - 1, so a checkpoint never holds rollouts in flight, and the weights the next S steps will sample from
are saved with it. Resume is then exact, and the bound holds after recovery.

Wall time (`wall_s`), as the synchronous loop counts it, training only: time since the loop began less
evaluations and checkpoints, during which generation is held still (it would otherwise run ahead for
free). Starting the Ray workers is not counted, as building the engine is not in the synchronous loop.

Off-policy data: tokens of step t come from a policy up to S updates old. Unless the config names a
correction, async runs use AReaL's decoupled PPO (`correction=areal-decoupled`: the PPO ratio against
recomputed old log-probs, each token reweighted by pi_old / mu from its own behaviour log-prob, capped
at 5) because that is the objective the bound was designed with.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time

import torch

from ..generate.local_pool import LocalEnginePool
from ..generate.ray_pool import RayEnginePool
from .budget import LEARNER_WORK
from ..core.staleness import StalenessGate
from .driver import StepDriver


class AsyncLoop:
    """The asynchronous source of trained steps. `parts`: the run's (run/build.py), of which it uses the
    planner, ledger, history, scorer, learner's guard, policy and budget; it builds its own worker pool and a
    StepDriver over it, and replaces nothing. `run`: the Trainer, read for its step count, step contexts,
    ledger view and resumed state, and asked to save checkpoints (with the pool's streams and the weights
    the next steps sample from)."""

    def __init__(self, parts, run):
        self.parts, self.run = parts, run
        cfg = self.cfg = parts.cfg
        check_async(cfg)
        self.planner, self.ledger, self.budget = parts.planner, parts.ledger, parts.budget
        self.policy = parts.staleness  # the run's StalenessPolicy: admission, sampling weights, resumed rows
        self.S = self.policy.max_staleness
        self.gate = StalenessGate(self.S, version=run.step)
        resumed = run.resumed or {}
        # weights after k steps, kept while a step to come may sample from them (k >= steps done - S)
        self.weights: dict[int, dict] = dict(resumed.get("async_weights") or {})
        self.weights.setdefault(run.step, _snapshot(parts.policy))
        kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                  **cfg.engine_options)
        # the Ray workers serve stages, the policy's statistics and refills, not in-flight control (peek/stop)
        self.planner.require("--mode async (Ray workers)", sampling=True, policy=True, refill=True)
        if self.planner.speculator is not None:  # refused before any worker starts
            raise ValueError(f"--mode async cannot run {self.planner.speculator.name}: its verification pass reads "
                             "the sampling weights, which live in the workers; run it with --mode sync")
        if cfg.engine_options.get("drafts") is not None:  # the pools declare no engine capability to charge them by
            raise ValueError("--mode async cannot run engine_options.drafts: the worker pools do not report the "
                             "engine's draft counts to the ledger, and partial rollouts abort drafted rows; run it "
                             "with --mode sync")
        if cfg.workers == 0:
            self.pool = LocalEnginePool(parts.model_path, cfg.engine, kw, seed=cfg.seed)
        else:
            self.pool = RayEnginePool(parts.model_path, cfg.workers, cfg.engine, kw, seed=cfg.seed)
        self._loaded: int | None = None  # the version whose weights the workers hold (None: the start's)
        engine_state = resumed.get("engine")
        if engine_state and "workers" in engine_state:  # resumed: the workers' streams
            self.pool.load_state_dict(engine_state)
        # prompt statistics from a worker (its weights are the sampling ones); else the run's policy
        policy = _WorkerStats(self.pool, parts.policy) if self.planner.needs_policy else parts.policy
        self.driver = StepDriver(self.pool, parts.ledger, parts.history, parts.scorer, policy)
        self.queue: queue.Queue = queue.Queue(maxsize=self.S + 1)
        self.stop = threading.Event()
        self.saved = threading.Condition()
        self.saved_step = run.step  # the last checkpointed step count
        self.error: BaseException | None = None
        self.staleness_hist: dict[int, int] = {}
        # Wall time comparable with the synchronous loop's (training only): elapsed time since the loop
        # began, less the pauses for evaluation and checkpoints. Generation holds `quiet` while it collects
        # and evaluation takes it, so no step is generated during an evaluation that is not counted.
        self.quiet = threading.Lock()
        self.paused_s = self.paused_cpu = 0.0

    # ---- generation thread ------------------------------------------------------------------
    def _generate(self) -> None:
        run, cfg, led = self.run, self.cfg, self.ledger
        try:
            for t in range(run.step, cfg.steps):
                if self.stop.is_set() or self.budget.exhausted(led):
                    break
                if t % cfg.checkpoint_every == 0 and t > 0:  # a quiescent checkpoint first
                    with self.saved:
                        self.saved.wait_for(lambda: self.saved_step >= t or self.stop.is_set())
                if not self.gate.admit(t):
                    break
                src = self.policy.sampling_version(t, min(self.weights))
                if self._loaded != src:
                    self.pool.update_weights(src, self.weights[src])
                    self._loaded = src
                ctx = run.context(t)
                before = led.budget_tokens()
                with self.quiet:
                    out = self.driver.collect(self.planner, ctx, version=t)
                self.planner.observe(out.batch, ctx)
                self.queue.put((t, ctx, out, run.ledger_view(), before, led.work()))
        except BaseException as e:  # noqa: BLE001 - handed to the learner thread, which re-raises it
            self.error = run.sampling_failed(e) if isinstance(e, RuntimeError) else e
        finally:
            self.queue.put(None)

    # ---- the learner side: a source of trained steps for the run's one schedule (Trainer._schedule) ----
    def steps(self):
        """Start the generation thread; for each step it hands over, in order: learn, publish the new
        weights, and yield the trained step (with the learner's own counts as it has them now)."""
        from .loop import TrainedStep

        run, led = self.run, self.ledger
        gen = threading.Thread(target=self._generate, name="rollwise-generate", daemon=True)
        self._gen = gen
        self.pool.wait_ready()  # worker start-up is not training time (the sync loop builds its engine first)
        self.wall0 = led.seconds.get("step", 0.0)  # a resumed run's training wall time so far
        self.cpu0 = led.seconds.get("step_cpu", 0.0)
        self.started, self.cpu_started = time.perf_counter(), time.process_time()
        self.pool_cpu0 = self.pool.cpu_seconds()  # Ray workers' own processes (0 in-process)
        gen.start()
        while True:
            item = self.queue.get()
            if item is None:
                break
            t, ctx, out, view, before, work = item
            self.driver.learn(out, self.parts.guard)  # non-finite updates undone
            step = t + 1
            self.weights[step] = _snapshot(self.parts.policy)
            for k in [k for k in self.weights if k < step - self.S]:
                del self.weights[k]
            self.gate.publish(step)
            self.gate.release(t)
            lag = out.staleness.get("staleness_max", 0)
            self.staleness_hist[lag] = self.staleness_hist.get(lag, 0) + 1
            # eval counts and the learner's own counts as the learner (their only writer) has them now, as in
            # the synchronous loop: the generation thread's view of them depended on where evaluations and
            # updates fell between its steps
            view.update({k: v for k, v in run.ledger_view().items()
                         if k in ("tokens_eval", "rollouts_eval", "learner_tokens", "old_logprob_tokens",
                                  "ref_logprob_tokens") or k.startswith("tok/eval/")})
            learned = led.work()
            spent = self.budget.spent_of(view["tokens"], {**work, **{k: learned[k] for k in LEARNER_WORK}})
            view["compute"] = spent.compute
            yield TrainedStep(ctx, out, view, before, spent, step)
        if self.error is not None:
            raise self.error

    @contextlib.contextmanager
    def paused(self):
        """An evaluation: generation is held still (it would otherwise run ahead for free), and the time is
        not training time."""
        with self.quiet, self._unclocked():
            yield

    @contextlib.contextmanager
    def _unclocked(self):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - t0
            self.paused_cpu += time.process_time() - c0

    def timing(self) -> dict:
        """Training time so far: wall, and CPU: this process's (the learner and, with workers 0, generation)
        plus the Ray workers' processes' since the loop began (their idle time in evaluations included)."""
        led = self.ledger
        led.set_seconds("step", self.wall0 + time.perf_counter() - self.started - self.paused_s)
        led.set_seconds("step_cpu", self.cpu0 + time.process_time() - self.cpu_started - self.paused_cpu
                        + self.pool.cpu_seconds() - self.pool_cpu0)
        return {"wall_s": led.seconds["step"], "cpu_s": led.seconds["step_cpu"],
                "gen_s": led.seconds.get("generate", 0.0), "worker_restarts": self.pool.restarts}

    def checkpoint(self) -> None:
        with self._unclocked():  # generation waits for it at checkpoint steps (quiescent), as the sync loop does
            self._checkpoint()

    def close(self) -> None:
        self.stop.set()
        self.gate.close()
        with self.saved:
            self.saved.notify_all()
        gen = getattr(self, "_gen", None)
        deadline = time.monotonic() + 120
        while gen is not None and gen.is_alive() and time.monotonic() < deadline:
            try:  # a generation thread blocked on a full queue: make room until it ends
                self.queue.get_nowait()
            except queue.Empty:
                pass
            gen.join(timeout=0.1)
        self.pool.shutdown()

    def _checkpoint(self) -> None:
        """Save once generation has caught up with the learner (nothing in flight), with the weights the
        next S steps sample from."""
        step = self.run.step
        self.run.save_checkpoint(engine_state=self.pool.state_dict(),
                                 extra={"async_weights": {k: v for k, v in self.weights.items() if k > step - self.S - 1}})
        with self.saved:
            self.saved_step = step
            self.saved.notify_all()


class _WorkerStats:
    """What the driver needs of a policy for PromptStats components: prompt statistics from a worker, the tokenizer here."""

    def __init__(self, pool, policy):
        self.pool, self.encode = pool, policy.encode

    def prompt_stats(self, texts):
        return self.pool.prompt_stats(texts)


def _snapshot(policy) -> dict:
    # CPU copies: the workers' policies are on the CPU, and the snapshot goes into checkpoints
    return {k: v.detach().to("cpu", copy=True) for k, v in policy.model.state_dict().items()}


def check_async(cfg) -> None:
    """Async settings that cannot work, refused before any work is done."""
    if cfg.workers < 0:
        raise ValueError(f"workers must be >= 0 (0: one worker in this process, no Ray), got {cfg.workers}")
    if cfg.mode == "one-step-off" and cfg.max_staleness not in (None, 1):
        raise ValueError(f"max_staleness: mode one-step-off is async with S = 1, got {cfg.max_staleness}; use mode "
                         "async for another bound")
    if cfg.max_staleness is not None and cfg.max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {cfg.max_staleness}")
    if cfg.learner.lora:  # the workers load the base model and take state_dict snapshots of the policy
        raise ValueError("learner.lora: not supported with mode async yet (the rollout workers hold the base "
                         "model, not base + adapter); use mode sync")
    torch.set_num_threads(1)  # the learner shares the machine with the workers
