"""Run real rollwise planners through the population simulator.

`Simulator.train_step` is the training loop's step (run/loop.py) with the simulator in place of the
engine, the scorer and the learner: the same Planner hooks in the same order (start, more until no
requests, assemble, observe), the same ledger accounting (every rollout charged by purpose when
generated, the train rollouts of rejected groups moved to "discarded", ctx.sample's rollouts charged
under their own purpose), the same PromptHistory rows for every group generated this step. Only the
learner differs: `Dynamics.update` on the trained groups' counts (see dynamics.py).

Planners that need a real model are refused with a clear message (UNSUPPORTED).
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field

import numpy as np

from ..control.base import StepContext, build_planner
from ..core.history import PromptHistory
from ..core.ledger import Ledger
from ..core.types import Group, Request
from .dynamics import Dynamics, DynamicsConfig
from .engine import SimEngine, SimGroup, SimPool
from .population import Population, PopulationConfig
from .timing import TimingConfig, TimingModel

# planner -> why the simulator cannot run it (it reads a real policy's internals)
UNSUPPORTED = {
    "hive": "needs ctx.policy.prompt_stats (prompt entropy from a forward pass of a real model)",
    "dots": "needs ctx.policy.prompt_stats (prompt embeddings from a real model)",
}


def unsupported_reason(spec: str, options: dict | None = None) -> str | None:
    options = options or {}
    reasons = []
    for name in (s.strip() for s in spec.split("+")):
        if name in UNSUPPORTED:
            reasons.append(f"{name}: {UNSUPPORTED[name]}")
        elif name == "cures" and options.get("cures", {}).get("sigma") == "grad":
            reasons.append("cures with sigma='grad': needs per-response gradients of a real model")
    if not reasons:
        return None
    return ("the simulator cannot run " + "; ".join(reasons)
            + f". Unsupported planners: {', '.join(sorted(UNSUPPORTED))} (and cures sigma='grad').")


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


class Simulator:
    def __init__(self, cfg: SimConfig):
        why = unsupported_reason(cfg.planner, cfg.planner_options)
        if why:
            raise ValueError(why)
        if cfg.batch < 1 or cfg.n < 1 or cfg.steps < 0:
            raise ValueError("sim: need batch >= 1, n >= 1, steps >= 0")
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
        self.engine = SimEngine(self.pop, self.ledger, self.timing, np.random.default_rng(eng_ss))
        self.step = 0
        self.rows: list[dict] = []
        self.totals = {"gen_s": 0.0, "learn_s": 0.0, "groups": 0, "zero_var_groups": 0, "trained_groups": 0,
                       "informative_trained": 0, "rounds": 0, "util_x_s": 0.0}
        self.init_acc = self.pop.heldout_acc(cfg.greedy_eval)

    # ---- the step (as run/loop.py's Trainer.train_step) ------------------------------------
    def sample(self, requests: list[Request]) -> list[Group]:
        return self.engine.generate(requests)

    def train_step(self) -> dict:
        cfg = self.cfg
        self.engine.step = self.step
        self.engine.rounds = []
        ctx = StepContext(self.step, cfg.batch, cfg.n, self.pool, self.history, self.ledger, self.rng,
                          None, self.sample)
        tokens_before = self.ledger.budget_tokens()
        requests = self.planner.start(ctx)
        while requests:
            grown = []
            for g in self.sample(requests):
                pid = g.prompt.id
                have = ctx.groups.get(pid)
                if have is not None:  # a later stage for the same prompt
                    if isinstance(have, SimGroup):
                        have.extend(g)
                    else:
                        have.rollouts += g.rollouts
                else:
                    ctx.groups[pid] = have = g
                grown.append(have)
            requests = self.planner.more(grown, ctx)
        batch, rejected = self.planner.assemble(ctx)
        for g in rejected:
            if isinstance(g, SimGroup):
                g.reclassify(self.ledger, "train", "discarded")
            else:
                self.ledger.reclassify([r for r in g.rollouts if r.purpose == "train"], "discarded")
        gen = [g for g in ctx.groups.values() if g.n > 0]
        persist = self.history.zero_variance_persistence(gen)  # before they are recorded
        self._record(gen)
        ids = np.fromiter((g.prompt.id for g in batch.groups), np.int64, len(batch.groups))
        bn = np.fromiter((g.n for g in batch.groups), np.int64, len(batch.groups))
        bc = np.fromiter((g.num_correct for g in batch.groups), np.int64, len(batch.groups))
        learner_tokens = sum(g.tokens for g in batch.groups)
        self.ledger.learner_tokens += learner_tokens
        dyn = self.dynamics.update(self.step, ids, bn, bc, cfg.batch)
        self.planner.observe(batch, ctx)
        # simulated system time of the step
        gen_s = sum(t.seconds for _, t in self.engine.rounds)
        learn_s = self.timing.learn_seconds(learner_tokens)
        zv = sum(g.zero_variance for g in gen)
        batch_zv = sum(g.zero_variance for g in batch.groups)
        gen_n = sum(g.n for g in gen)
        tot = self.totals
        tot["gen_s"] += gen_s
        tot["learn_s"] += learn_s
        tot["groups"] += len(gen)
        tot["zero_var_groups"] += zv
        tot["trained_groups"] += len(batch.groups)
        tot["informative_trained"] += dyn["informative_groups"]
        tot["rounds"] += len(self.engine.rounds)
        tot["util_x_s"] += sum(t.util * t.seconds for _, t in self.engine.rounds)
        self.step += 1
        return {"step": self.step, "tokens": self.ledger.budget_tokens(),
                "step_tokens": self.ledger.budget_tokens() - tokens_before,
                "rollouts": self.ledger.budget_rollouts(), "prompts": len(gen),
                "zero_var_frac_gen": zv / max(len(gen), 1), "trained_groups": len(batch.groups),
                "batch_groups": len(batch.groups), "zero_var_frac": batch_zv / max(len(batch.groups), 1),
                "reward_mean": sum(g.num_correct for g in gen) / max(gen_n, 1), **persist,
                "informative_trained": dyn["informative_groups"], "rounds": len(self.engine.rounds),
                "sim_gen_s": gen_s, "sim_learn_s": learn_s, **ctx.metrics}

    def _record(self, groups: list[Group]) -> None:
        if not groups:
            return
        k = len(groups)
        n = np.fromiter((g.n for g in groups), np.int32, k)
        self.history.record_arrays(
            self.step,
            prompt=np.fromiter((g.prompt.id for g in groups), np.int64, k),
            n=n,
            correct=np.fromiter((g.num_correct for g in groups), np.int32, k),
            mean_len=np.fromiter((g.tokens for g in groups), np.float64, k) / n,
            mean_entropy=np.fromiter((g.mean_entropy for g in groups), np.float64, k),
        )

    # ---- the run ---------------------------------------------------------------------------
    def run(self, steps: int | None = None, log=None) -> dict:
        steps = self.cfg.steps if steps is None else steps
        every = self.cfg.eval_every
        report = max(steps // 10, 1)
        t0 = time.perf_counter()
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
        return self.summary(time.perf_counter() - t0)

    def summary(self, elapsed_s: float) -> dict:
        tot, led = self.totals, self.ledger
        steps = max(self.step, 1)
        return {
            "planner": self.cfg.planner, "prompts": self.cfg.prompts, "steps": self.step,
            "batch": self.cfg.batch, "n": self.cfg.n, "seed": self.cfg.seed,
            "clusters": self.cfg.population.clusters,
            "elapsed_s": round(elapsed_s, 3),
            "steps_per_s": round(self.step / elapsed_s, 2) if elapsed_s > 0 else None,
            "init_acc": self.init_acc,
            "final_acc": self.pop.heldout_acc(self.cfg.greedy_eval),
            "pool_acc": self.pop.pool_acc(self.step),
            "tokens": led.budget_tokens(),
            "rollouts": led.budget_rollouts(),
            "tokens_by_purpose": dict(led.tokens),
            "rollouts_by_purpose": dict(led.rollouts),
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


def peak_rss_mb() -> float:
    """Peak resident memory of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
