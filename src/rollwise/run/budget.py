"""What ends a run and spaces its evaluations: generated tokens, or compute units under a cost profile.

Bench 3.0 (shared/WAVE3.md) ends runs on a **compute budget**: decode, prefill and the learner's passes,
each priced by a named cost profile (bench/costs.py; `gpu-h100-v1` by default) relative to one decoded
token. The token budget of earlier benches stays: `budget_tokens` / `eval_every_tokens` count generated
tokens exactly as before; `budget_compute` / `eval_every_compute` count compute units. Either, or both,
may be set; a run stops when any set budget is spent, and is evaluated at the first step boundary after
each multiple of a set spacing (as WAVE3 asks: evaluations at every 1/6 of the budget, read in compute).
The ledger is the one source of every count (core/ledger.py `work()`).

Bench 4.0 (issue 41) may also end runs on **modelled GPU-seconds**: `budget_gpu_seconds` /
`eval_every_gpu_seconds` count each trained step's work at a cluster profile's scale (every response length x
`length_scale`), priced by the step-time model in the run's deployment mode: systems/scale.py's GpuMeter, the
very function the reports read GPU-hours with. The ledger does not know a step's length shape, so the schedule
(run/loop.py) meters each step's metrics row and puts the total into `Spent.gpu_s`; the same rules then end
the run (the step whose total reaches the budget is the last) and space its evaluations.
"""
from __future__ import annotations

from dataclasses import dataclass

LEARNER_WORK = ("learner_tokens", "logprob_tokens")  # what the learner's own passes add (written by the learner)


@dataclass(frozen=True)
class Spent:
    tokens: int
    compute: float
    gpu_s: float = 0.0  # modelled GPU-seconds (the schedule's meter; 0 where no GPU-second budget is set)


@dataclass(frozen=True)
class Budget:
    tokens: int = 0  # generated tokens (0: no limit)
    every_tokens: int = 0  # evaluate after each multiple (0: off)
    compute: float = 0.0  # compute units under `profile` (0: no limit)
    every_compute: float = 0.0
    profile: object = None  # a bench.costs.CostProfile
    seconds: float = 0.0  # wall seconds of training (0: no limit); wall-clock plans end runs on it
    gpu_seconds: float = 0.0  # modelled GPU-seconds under `cluster` (0: no limit)
    every_gpu_seconds: float = 0.0
    cluster: object = None  # a systems.profile.ClusterProfile (set with gpu_seconds or every_gpu_seconds)
    length_scale: float = 0.0  # every response length x this at the cluster's scale
    mode: str = "sync"  # the step-time model's deployment mode (systems/scale.py mode_of)

    @classmethod
    def from_config(cls, cfg) -> "Budget":
        from ..bench.costs import load_profile

        gpu = {}
        if cfg.budget_gpu_seconds or cfg.eval_every_gpu_seconds:
            from ..systems.profile import load_profile as load_cluster
            from ..systems.scale import mode_of

            gpu = {"gpu_seconds": float(cfg.budget_gpu_seconds), "every_gpu_seconds": float(cfg.eval_every_gpu_seconds),
                   "cluster": load_cluster(cfg.cluster_profile), "length_scale": float(cfg.length_scale),
                   "mode": mode_of({"mode": cfg.mode})}
        return cls(int(cfg.budget_tokens), int(cfg.eval_every_tokens), float(cfg.budget_compute),
                   float(cfg.eval_every_compute), load_profile(cfg.cost_profile), float(cfg.budget_seconds), **gpu)

    def meter(self, rows: list[dict]):
        """The run's GPU-second meter (systems/scale.py GpuMeter) with the rows recorded so far counted (a resumed
        run's: the same total as before the kill, as the rows are the same); None without a GPU-second budget."""
        if self.cluster is None:
            return None
        from ..systems.scale import GpuMeter

        m = GpuMeter(self.cluster, self.length_scale, self.mode)
        for r in rows:
            m.add(r)
        return m

    def spent(self, ledger) -> Spent:
        return self.spent_of(ledger.budget_tokens(), ledger.work())

    def spent_of(self, tokens: int, work: dict) -> Spent:
        """From counts taken apart (the async loop: the generation side's, with the learner's own on top)."""
        from ..bench.costs import compute_units

        return Spent(int(tokens), compute_units(work, self.profile))

    def exhausted_at(self, s: Spent) -> bool:
        return bool(self.tokens and s.tokens >= self.tokens) or bool(self.compute and s.compute >= self.compute) \
            or bool(self.gpu_seconds and s.gpu_s >= self.gpu_seconds)

    def out_of_time(self, wall_s: float) -> bool:
        """The wall-second budget is spent (read apart from the counts: wall time is the source's clock)."""
        return bool(self.seconds and wall_s >= self.seconds)

    def exhausted(self, ledger) -> bool:
        return self.exhausted_at(self.spent(ledger))

    def crossed(self, before: Spent, after: Spent) -> bool:
        """A set spacing's multiple was passed between two points of the run."""
        return (bool(self.every_tokens) and after.tokens // self.every_tokens > before.tokens // self.every_tokens) \
            or (bool(self.every_compute) and after.compute // self.every_compute > before.compute // self.every_compute) \
            or (bool(self.every_gpu_seconds)
                and after.gpu_s // self.every_gpu_seconds > before.gpu_s // self.every_gpu_seconds)
