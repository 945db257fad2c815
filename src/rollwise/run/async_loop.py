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
from pathlib import Path

import torch

from ..generate.local_pool import LocalEnginePool
from ..generate.ray_pool import RayEnginePool
from .staleness import StalenessGate


class AsyncLoop:
    def __init__(self, trainer):
        self.tr = tr = trainer
        cfg = tr.cfg
        check_async(cfg)
        self.policy = tr.staleness  # the run's StalenessPolicy: admission, sampling weights, resumed rows
        self.S = self.policy.max_staleness
        self.gate = StalenessGate(self.S, version=tr.step)
        # weights after k steps, kept while a step to come may sample from them (k >= steps done - S)
        self.weights: dict[int, dict] = dict(getattr(tr, "async_weights", {}) or {})
        self.weights.setdefault(tr.step, _snapshot(tr.policy))
        kw = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                  **cfg.engine_options)
        # the Ray workers serve stages, the policy's statistics and refills, not in-flight control (peek/stop)
        tr.planner.require("--mode async (Ray workers)", sampling=True, policy=True, refill=True)
        if tr.planner.speculator is not None:  # refused before any worker starts
            raise ValueError(f"--mode async cannot run {tr.planner.speculator.name}: its verification pass reads "
                             "the sampling weights, which live in the workers; run it with --mode sync")
        if cfg.workers == 0:
            self.pool = LocalEnginePool(tr.model_path, cfg.engine, kw, seed=cfg.seed)
        else:
            self.pool = RayEnginePool(tr.model_path, cfg.workers, cfg.engine, kw, seed=cfg.seed)
        self._loaded: int | None = None  # the version whose weights the workers hold (None: the start's)
        if getattr(tr, "engine_state", None) and "workers" in tr.engine_state:  # resumed: the workers' streams
            self.pool.load_state_dict(tr.engine_state)
        tr.driver.engine = tr.engine = self.pool
        if tr.planner.needs_policy:  # prompt statistics from a worker (its weights are the sampling ones)
            tr.driver.policy = _WorkerStats(self.pool, tr.policy)
        self.queue: queue.Queue = queue.Queue(maxsize=self.S + 1)
        self.stop = threading.Event()
        self.saved = threading.Condition()
        self.saved_step = tr.step  # the last checkpointed step count
        self.error: BaseException | None = None
        self.staleness_hist: dict[int, int] = {}
        # Wall time comparable with the synchronous loop's (training only): elapsed time since the loop
        # began, less the pauses for evaluation and checkpoints. Generation holds `quiet` while it collects
        # and evaluation takes it, so no step is generated during an evaluation that is not counted.
        self.quiet = threading.Lock()
        self.paused_s = 0.0

    # ---- generation thread ------------------------------------------------------------------
    def _generate(self) -> None:
        tr, cfg = self.tr, self.tr.cfg
        try:
            for t in range(tr.step, cfg.steps):
                if self.stop.is_set() or (cfg.budget_tokens and tr.ledger.budget_tokens() >= cfg.budget_tokens):
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
                ctx = tr.context(t)
                before = tr.ledger.budget_tokens()
                with self.quiet:
                    out = tr.driver.collect(tr.planner, ctx, version=t)
                tr.planner.observe(out.batch, ctx)
                self.queue.put((t, ctx, out, tr.ledger_view(), before))
        except BaseException as e:  # noqa: BLE001 - handed to the learner thread, which re-raises it
            self.error = tr.sampling_failed(e) if isinstance(e, RuntimeError) else e
        finally:
            self.queue.put(None)

    # ---- learner (the calling thread) --------------------------------------------------------
    def run(self, rows: list[dict], metrics_file: Path) -> list[dict]:
        tr, cfg = self.tr, self.tr.cfg
        gen = threading.Thread(target=self._generate, name="rollwise-generate", daemon=True)
        self.pool.wait_ready()  # worker start-up is not training time (the sync loop builds its engine first)
        wall0 = tr.ledger.seconds.get("step", 0.0)  # a resumed run's training wall time so far
        self.started = time.perf_counter()
        gen.start()
        try:
            while True:
                item = self.queue.get()
                if item is None:
                    break
                t, ctx, out, view, before = item
                tr.driver.learn(out, tr.guard)  # non-finite updates undone
                tr.step = t + 1
                self.weights[tr.step] = _snapshot(tr.policy)
                for k in [k for k in self.weights if k < tr.step - self.S]:
                    del self.weights[k]
                self.gate.publish(tr.step)
                self.gate.release(t)
                lag = out.staleness.get("staleness_max", 0)
                self.staleness_hist[lag] = self.staleness_hist.get(lag, 0) + 1
                # eval counts as the learner (their only writer) has them now, as in the synchronous loop: the
                # generation thread's view of them depended on where the evaluations fell between its steps
                view.update({k: v for k, v in tr.ledger_view().items()
                             if k in ("tokens_eval", "rollouts_eval") or k.startswith("tok/eval/")})
                row = tr.step_row(ctx, out, view, before)
                last = tr.step >= cfg.steps or (cfg.budget_tokens and view["tokens"] >= cfg.budget_tokens)
                if (cfg.eval_every or cfg.eval_every_tokens) and (last or self._eval_due(before, view["tokens"])):
                    with self.quiet:
                        with self._paused():
                            row.update(tr._evaluate())
                tr.ledger.seconds["step"] = wall0 + time.perf_counter() - self.started - self.paused_s
                row["wall_s"] = tr.ledger.seconds["step"]
                row["gen_s"] = tr.ledger.seconds.get("generate", 0.0)
                row["worker_restarts"] = self.pool.restarts
                rows.append(tr._log_row(row, metrics_file))
                if tr.skip_streak >= cfg.max_skipped_steps:
                    raise tr.too_many_skips(row)
                if tr.step % cfg.checkpoint_every == 0 or last:
                    with self._paused():  # generation waits for it (quiescent), as the synchronous loop does
                        self._checkpoint()
                if last:
                    self.stop.set()
        finally:
            self.stop.set()
            self.gate.close()
            with self.saved:
                self.saved.notify_all()
            gen.join(timeout=60)
            self.pool.shutdown()
        if self.error is not None:
            raise self.error
        return rows

    @contextlib.contextmanager
    def _paused(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - t0

    def _eval_due(self, before: int, after: int) -> bool:
        cfg = self.tr.cfg
        if cfg.eval_every and self.tr.step % cfg.eval_every == 0:
            return True
        n = cfg.eval_every_tokens
        return bool(n) and after // n > before // n

    def _checkpoint(self) -> None:
        """Save once generation has caught up with the learner (nothing in flight), with the weights the
        next S steps sample from."""
        tr = self.tr
        tr.async_weights = {k: v for k, v in self.weights.items() if k > tr.step - self.S - 1}
        tr.save_checkpoint()
        with self.saved:
            self.saved_step = tr.step
            self.saved.notify_all()


class _WorkerStats:
    """What the driver needs of a policy for HIVE/DOTS: prompt statistics from a worker, the tokenizer here."""

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
    if cfg.max_staleness is not None and cfg.max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {cfg.max_staleness}")
    if cfg.learner.lora:  # the workers load the base model and take state_dict snapshots of the policy
        raise ValueError("learner.lora: not supported with mode async yet (the rollout workers hold the base "
                         "model, not base + adapter); use mode sync")
    torch.set_num_threads(1)  # the learner shares the machine with the workers
