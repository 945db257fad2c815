"""Shared fakes for the tests: rollouts, a deterministic sampler, step contexts, a constant policy."""
import numpy as np
import torch

from rollwise.control.base import StepContext
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Group, Prompt, Rollout


def R(pid, correct, purpose="train", version=0, entropy=0.0, ntok=3):
    return Rollout(pid, [1, 2], torch.arange(ntok), torch.zeros(ntok), "x", "eos", version, purpose,
                   entropy=entropy, reward=float(correct), correct=bool(correct))


class Engine:
    """Deterministic: the j-th sample of prompt x is correct iff floor((j+1) p) > floor(j p).

    Rollouts carry `version` (bumped by run_step(..., advance_version=True)); `calls` records
    the number of requests per call."""

    def __init__(self, rates, ledger):
        self.rates, self.ledger, self.seen, self.version, self.calls = rates, ledger, {}, 0, []

    def __call__(self, requests):
        self.calls.append(len(requests))
        out = []
        for q in requests:
            pid, p = q.prompt.id, self.rates[q.prompt.id]
            rs = []
            for _ in range(q.n):
                j = self.seen.get(pid, 0)
                self.seen[pid] = j + 1
                rs.append(R(pid, int((j + 1) * p + 1e-9) > int(j * p + 1e-9), q.purpose, self.version))
            self.ledger.charge(rs)
            out.append(Group(q.prompt, rs))
        return out


def make_ctx(pool_size=8, B=4, n=8, step=0, seed=0):
    pool = [Prompt(i, f"q{i}", str(i)) for i in range(pool_size)]
    return StepContext(step, B, n, pool, PromptHistory(pool_size), Ledger(), np.random.default_rng(seed))


def make_sampled_ctx(rates, B=4, n=8, seed=0):
    """A context over len(rates) prompts whose ctx.sample is an Engine on them: (ctx, engine)."""
    ctx = make_ctx(len(rates), B, n, seed=seed)
    ctx.sample = Engine(rates, ctx.ledger)
    return ctx, ctx.sample


def run_step(planner, ctx, engine, reset_metrics=True, advance_version=False):
    """One planner step against `engine`: (batch, rejected, the {prompt id: n} requested per round)."""
    ctx.groups = {}
    if reset_metrics:
        ctx.metrics = {}
    reqs = planner.start(ctx)
    rounds = []
    while reqs:
        rounds.append({q.prompt.id: q.n for q in reqs})
        grown = []
        for g in engine(reqs):
            if g.prompt.id in ctx.groups:
                ctx.groups[g.prompt.id].rollouts.extend(g.rollouts)
            else:
                ctx.groups[g.prompt.id] = g
            grown.append(ctx.groups[g.prompt.id])
        reqs = planner.more(grown, ctx)
    batch, rejected = planner.assemble(ctx)
    ctx.history.record(ctx.groups.values(), ctx.step)
    planner.observe(batch, ctx)
    if advance_version:
        engine.version += 1
    return batch, rejected, rounds


class ConstPolicy:
    """Log-prob -1 for every response token and one parameter for the optimizer: for learner tests
    where only the data path (advantages, recomposition, state) is under test."""

    def __init__(self):
        self.model, self.version = torch.nn.Linear(1, 1), 0

    def response_logprobs(self, prompts, responses, temperature):
        x = self.model.bias * 0 - 1.0
        out = torch.nn.utils.rnn.pad_sequence([x.expand(len(r)) for r in responses], batch_first=True)
        return out, torch.zeros_like(out), None
