"""Run real rollwise planners through the population simulator.

`Simulator.train_step` runs the one step driver (run/driver.py) with the simulator's engine in place of
the torch engine and `DynamicsLearner` (the population model's update on the trained groups' counts,
see dynamics.py) in place of the learner: the same planner hooks in the same order, the same ledger
charging and settling, the same PromptHistory rows, the same metrics row (run/records.py step_row). Groups stay count-level (SimGroup), so 1M prompts
x 1,000 steps runs in seconds.

Planners that need a real model (`needs_policy`: HIVE's prompt entropy, DOTS' embeddings, CurES with
sigma='grad') are refused with a clear message.
"""
from __future__ import annotations

import gc
import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..control.base import StepContext, build_planner
from ..core.history import GroupStats, PromptHistory
from ..core.ledger import Ledger
from ..core.types import Batch
from ..run.driver import StepDriver
from ..run.records import ledger_view, step_row
from .dynamics import Dynamics, DynamicsConfig
from .engine import SimEngine, SimPool
from .population import Population, PopulationConfig
from .timing import TimingConfig, TimingModel


def unsupported_reason(spec: str, options: dict | None = None) -> str | None:
    """Why the simulator cannot run this planner (None if it can): it has no policy to read."""
    planner = build_planner(spec, 1, np.random.default_rng(0), options)
    try:
        planner.require("the simulator", sampling=True, policy=False, refill=True)
    except ValueError as e:
        return str(e)
    return None


class DynamicsLearner:
    """The simulator's learner: Dynamics.update on the trained groups' counts. `version` counts
    updates, so the engine draws step s's samples at the policy of step s."""

    def __init__(self, dynamics: Dynamics, batch_size: int, timing: TimingModel):
        self.dynamics, self.batch_size, self.timing = dynamics, batch_size, timing
        self.version = 0

    def update(self, batch: Batch) -> dict:
        b = batch.stats if batch.stats is not None else GroupStats.of(batch.groups, drop_empty=False)
        dyn = self.dynamics.update(self.version, b.prompt, b.n, b.correct, self.batch_size)
        self.version += 1
        k = len(b)  # the batch as the torch learner's stats report it (the metrics row reads them)
        return {"learner_tokens": int(b.tokens.sum()), "informative_groups": dyn["informative_groups"],
                "batch_groups": k, "zero_var_frac": int(b.zero_variance.sum()) / max(k, 1)}


@dataclass
class SimConfig:
    prompts: int = 100_000
    steps: int = 100
    batch: int = 512
    n: int = 16
    planner: str = "uniform"
    planner_options: dict = field(default_factory=dict)
    seed: int = 0  # the run: sampling and the planner's draws
    # The population (prompts, difficulties, initial skills): the task and base model. None = `seed`.
    # The bench fixes it across seeds, as the tiny-model bench shares one pool and one base checkpoint.
    population_seed: int | None = None
    eval_every: int = 0  # steps between accuracy rows (0: start and end only)
    greedy_eval: bool = False  # held-out accuracy as greedy decoding measures it (Population.heldout_acc)
    keep_rows: bool = True  # keep one metrics dict per step in Simulator.rows
    population: PopulationConfig = field(default_factory=PopulationConfig)
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)


MAX_PROMPTS = 10 ** 8  # the simulator's documented range is 10^5-10^7 prompts


class Simulator:
    def __init__(self, cfg: SimConfig):
        why = unsupported_reason(cfg.planner, cfg.planner_options)
        if why:
            raise ValueError(why)
        if cfg.batch < 1 or cfg.n < 1 or cfg.steps < 0:
            raise ValueError("sim: need batch >= 1, n >= 1, steps >= 0")
        # refused before any array is made: 10^11 prompts would try to allocate ~373 GiB
        if cfg.prompts < 1 or cfg.prompts > MAX_PROMPTS or cfg.batch * cfg.n > MAX_PROMPTS:
            raise ValueError(f"sim: need 1 <= prompts <= {MAX_PROMPTS:.0e} and batch x n <= {MAX_PROMPTS:.0e} "
                             f"(arrays of that many entries; about 4 bytes each), got prompts {cfg.prompts}, "
                             f"batch x n {cfg.batch * cfg.n}")
        self.cfg = cfg
        pop_seed = cfg.seed if cfg.population_seed is None else cfg.population_seed
        self.pop = Population(cfg.prompts, cfg.population, seed=pop_seed)
        self.dynamics = Dynamics(self.pop, cfg.dynamics)
        self.pool = SimPool(cfg.prompts)
        self.history = PromptHistory(cfg.prompts)
        self.ledger = Ledger()
        eng_ss, plan_ss = np.random.SeedSequence([int(cfg.seed), 0xE9]).spawn(2)
        self.rng = np.random.default_rng(plan_ss)  # the planner's stream (as the loop's self.rng)
        self.planner = build_planner(cfg.planner, cfg.prompts, self.rng, cfg.planner_options)
        self.timing = TimingModel(cfg.timing)
        self.engine = SimEngine(self.pop, self.timing, np.random.default_rng(eng_ss))
        self.learner = DynamicsLearner(self.dynamics, cfg.batch, self.timing)
        self.driver = StepDriver(self.engine, self.ledger, self.history, staleness=False)
        self.step = 0
        self.rows: list[dict] = []
        self.totals = {"gen_s": 0.0, "learn_s": 0.0, "groups": 0, "zero_var_groups": 0, "trained_groups": 0,
                       "informative_trained": 0, "rounds": 0, "util_x_s": 0.0}
        self.init_acc = self.pop.heldout_acc(cfg.greedy_eval)

    # ---- one step: the driver, with the simulator's engine and learner -------------------------
    def train_step(self) -> dict:
        cfg = self.cfg
        self.engine.rounds = []
        ctx = StepContext(self.step, cfg.batch, cfg.n, self.pool, self.history, self.ledger, self.rng)
        tokens_before, learned_before = self.ledger.budget_tokens(), self.ledger.learner_tokens
        out = self.driver.run_step(self.planner, ctx, self.learner)  # charges the learner's tokens
        batch = out.batch
        learner_tokens = self.ledger.learner_tokens - learned_before
        gen = out.visits  # this step's train groups with rollouts, as columns
        # simulated system time of the step
        gen_s = sum(t.seconds for _, t in self.engine.rounds)
        learn_s = self.timing.learn_seconds(learner_tokens)
        informative = out.stats.pop("informative_groups", 0)  # the dynamics' count, a field of the sim's own
        tot = self.totals
        tot["gen_s"] += gen_s
        tot["learn_s"] += learn_s
        tot["groups"] += len(gen)
        tot["zero_var_groups"] += int(gen.zero_variance.sum())
        tot["trained_groups"] += len(batch.groups)
        tot["informative_trained"] += informative
        tot["rounds"] += len(self.engine.rounds)
        tot["util_x_s"] += sum(t.util * t.seconds for _, t in self.engine.rounds)
        self.step += 1
        return step_row(ctx, out, ledger_view(self.ledger), tokens_before, counts_only=True, side="sim",
                        extra={"trained_groups": len(batch.groups), "informative_trained": informative,
                               "rounds": len(self.engine.rounds), "sim_gen_s": gen_s, "sim_learn_s": learn_s})

    # ---- the run ---------------------------------------------------------------------------
    def run(self, steps: int | None = None, log=None) -> dict:
        steps = self.cfg.steps if steps is None else steps
        every = self.cfg.eval_every
        report = max(steps // 10, 1)
        t0, c0 = time.perf_counter(), time.process_time()
        with heap_frozen():  # the objects made before the loop stay out of the collector's full passes
            for _ in range(steps):
                row = self.train_step()
                if every and (self.step % every == 0 or self.step == steps):
                    row["heldout_acc"] = self.pop.heldout_acc(self.cfg.greedy_eval)
                    row["pool_acc"] = self.pop.pool_acc(self.step)
                if self.cfg.keep_rows:
                    self.rows.append(row)
                if log is not None and (self.step % report == 0 or self.step == steps):
                    log(f"sim {self.cfg.planner}: step {self.step}/{steps}  tokens {row['tokens']:.3g}  "
                        f"acc {self.pop.heldout_acc(self.cfg.greedy_eval):.4f}  zv {row['zero_var_frac_gen']:.2f}  "
                        f"{time.perf_counter() - t0:.1f}s")
        return self.summary(time.perf_counter() - t0, time.process_time() - c0)

    def summary(self, elapsed_s: float, cpu_s: float | None = None) -> dict:
        tot, led = self.totals, self.ledger
        steps = max(self.step, 1)
        return {
            "planner": self.cfg.planner, "prompts": self.cfg.prompts, "steps": self.step,
            "batch": self.cfg.batch, "n": self.cfg.n, "seed": self.cfg.seed,
            "clusters": self.cfg.population.clusters,
            "elapsed_s": round(elapsed_s, 3),
            # CPU seconds of the loop (this process): on a loaded machine the wall time above waits for a
            # core, this does not (benchmarks/sim_speed.py judges it)
            "cpu_s": None if cpu_s is None else round(cpu_s, 3),
            "steps_per_s": round(self.step / elapsed_s, 2) if elapsed_s > 0 else None,
            "init_acc": self.init_acc,
            "final_acc": self.pop.heldout_acc(self.cfg.greedy_eval),
            "pool_acc": self.pop.pool_acc(self.step),
            "tokens": led.budget_tokens(),
            "rollouts": led.budget_rollouts(),
            "tokens_by_purpose": led.legacy_tokens(),
            "rollouts_by_purpose": led.legacy_rollouts(),
            "prompt_tokens": led.prompt_tokens,
            "learner_tokens": led.learner_tokens,
            "zero_var_frac": tot["zero_var_groups"] / max(tot["groups"], 1),
            "groups_generated": tot["groups"],
            "trained_groups_per_step": tot["trained_groups"] / steps,
            "informative_trained_per_step": tot["informative_trained"] / steps,
            "rounds_per_step": tot["rounds"] / steps,
            "sim_gen_s": tot["gen_s"],
            "sim_learn_s": tot["learn_s"],
            "sim_step_s_mean": (tot["gen_s"] + tot["learn_s"]) / steps,
            "gen_util": tot["util_x_s"] / tot["gen_s"] if tot["gen_s"] > 0 else None,
            "peak_mem_mb": round(peak_rss_mb(), 1),
        }


@contextmanager
def heap_frozen():
    """Keep the objects that exist before the loop out of the garbage collector's full passes while it
    runs. A step makes ~10^4 short-lived objects (prompts, requests, groups); the few thousand alive at a
    young collection are promoted, and every ~150 steps that triggers a full collection, which walks the
    whole heap, ~2*10^5 objects of torch, numpy and the rest: ~10% of the loop's time, spent re-checking
    objects the loop never touches. gc.freeze sets them aside until unfreeze (they are still freed by
    reference counting; only a reference cycle among them waits until after the loop). A caller's own
    freeze is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def peak_rss_mb() -> float:
    """Peak resident memory of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
