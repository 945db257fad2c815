"""Contracts every plug-in must keep, tested over every registered component (as slime tests its
plugins): planners, the torch engine's own rules, and the one step driver that the Trainer and the
Simulator share. Every registered engine also runs the conformance kit (test_engine_conformance.py)."""
import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import Planner, StepContext, build_planner
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Prompt, Request, SamplingParams
from rollwise.generate.engine import Finished, run_sync

from fakes import Engine, Learner, run_step
from test_engine_policy import no_eos, tiny_policy

N = 40
RATES = {i: [0.0, 1.0, 0.5, 0.25, 0.125, 0.875, 1 / 3, 0.75][i % 8] for i in range(N)}
PLANNERS = [e.name for e in registry.entries("planner")] + ["greso+ar3po", "prompt-replay+dapo", "cdas+dars",
                                                             "ar3po+spec-rl", "ar3po+arrol", "arrol+duet-abort"]


def prompt_stats(texts):
    """A deterministic stand-in for the policy's prefill statistics (HIVE, DOTS)."""
    ids = np.array([int(t[1:]) for t in texts])
    return 1.0 + (ids % 5) / 10.0, np.stack([np.cos(ids), np.sin(ids), (ids % 3) / 3.0], axis=1)


def score_drafts(ledger):
    """A deterministic stand-in for the driver's verification pass (SPEC-RL): log-prob -0.3 at even
    positions and -3 at odd ones, charged as the driver charges it."""
    def score(prompt_ids, drafts_T, temperatures):
        ledger.verified_tokens += sum(len(d) for d in drafts_T)
        logp = [torch.tensor([-0.3 if j % 2 == 0 else -3.0 for j in range(len(d))]) for d in drafts_T]
        return logp, [torch.ones(len(d)) for d in drafts_T], 0
    return score


def pool_size(spec):
    """A drafting planner (SPEC-RL) gets a pool of one batch, so that every step revisits its prompts."""
    return 6 if "spec-rl" in spec else N


def context(step=0, seed=0, pool_n=N):
    pool = [Prompt(i, f"q{i}", str(i)) for i in range(pool_n)]
    ledger = Ledger()
    return StepContext(step, 6, 4, pool, PromptHistory(pool_n), ledger, np.random.default_rng(seed),
                       prompt_stats=prompt_stats, score_drafts=score_drafts(ledger))


def steps(planner, ctx, engine, k):
    """k steps from ctx.step on: [(batch as (prompt id, n, correct), rounds)] per step."""
    out = []
    for _ in range(k):
        batch, _, rounds = run_step(planner, ctx, engine, advance_version=True)
        out.append(([(g.prompt.id, g.n, g.num_correct) for g in batch.groups], rounds))
        ctx.step += 1
    return out


@pytest.mark.parametrize("spec", PLANNERS)
def test_planner_contract(spec):
    ctx, engine = context(pool_n=pool_size(spec)), Engine(RATES)
    planner = build_planner(spec, pool_size(spec), ctx.rng)
    for s in range(3):
        ctx.step = s
        before = len(engine.submitted)
        batch, rejected, rounds = run_step(planner, ctx, engine, advance_version=True)
        subs = engine.submitted[before:]
        for sub in subs:  # every request: a pool prompt, n >= 1, one fresh request per prompt per submission
            assert all(0 <= q.prompt.id < N and q.n >= 1 for q in sub), spec
            fresh = [q for q in sub if q.prefix is None]  # a resumed draft (SPEC-RL) is one row of its own
            assert len({q.prompt.id for q in fresh}) == len(fresh), spec
        ids = [g.prompt.id for g in batch.groups]
        assert len(ids) == len(set(ids)) and all(0 <= i < N for i in ids), spec  # one group per prompt
        assert all(r.prompt_id == g.prompt.id for g in batch.groups for r in g.rollouts), spec
        assert all(g.n >= 1 for g in batch.groups), spec
        if planner.refill or planner.partial:  # refill and partial planners train on at most B groups
            assert len(batch.groups) <= ctx.batch_size
        # declarations are honest: no extra sampling without needs_sampling, no policy without needs_policy
        side = [q for sub in subs for q in sub if q.purpose != "train"]
        if not planner.needs_sampling:
            assert not side, spec
            assert len(subs) <= 1 or (planner.refill and all(q.purpose == "train" for sub in subs for q in sub)), spec
        assert ctx.ledger.count(fate="open") == 0, spec  # the driver settled every rollout
    led = ctx.ledger
    decoded = sum(led.count(kind=k) - led.count("oracle", kind=k) - led.count("eval", kind=k)
                  for k in ("decoded", "shared"))  # a shared tree prefix (TreePO) was decoded once
    assert led.budget_tokens() == decoded + round(led.draft_cost * led.verified_tokens), spec
    assert led.verified_tokens >= led.count(kind="draft"), spec  # every accepted draft token was verified
    assert (led.verified_tokens > 0) == ("spec-rl" in spec), spec  # drafts were verified on the revisits


@pytest.mark.parametrize("spec", PLANNERS)
def test_planner_state_round_trips_and_resumes_exactly(spec):
    """state_dict -> a fresh planner (built, so bound, but never set up) -> the same next steps; a
    resumed planner does not repeat its one-time setup (profiles)."""
    ctx, engine = context(pool_n=pool_size(spec)), Engine(RATES)
    planner = build_planner(spec, pool_size(spec), ctx.rng)
    steps(planner, ctx, engine, 2)
    state, rng_state = copy.deepcopy(planner.state_dict()), copy.deepcopy(ctx.rng.bit_generator.state)
    ctx2, engine2 = copy.deepcopy(ctx), copy.deepcopy(engine)
    ctx2.score_drafts = score_drafts(ctx2.ledger)  # the stand-in charges its own context's ledger
    resumed = build_planner(spec, pool_size(spec), ctx2.rng)
    resumed.load_state_dict(copy.deepcopy(state))
    ctx2.rng.bit_generator.state = rng_state
    a = steps(planner, ctx, engine, 2)
    b = steps(resumed, ctx2, engine2, 2)
    assert a == b, spec
    assert engine.calls[-len(b):] == engine2.calls[-len(b):], spec  # no repeated profiling after a resume
    assert (ctx.ledger.tokens, ctx.ledger.rollouts, ctx.ledger.verified_tokens) == \
        (ctx2.ledger.tokens, ctx2.ledger.rollouts, ctx2.ledger.verified_tokens), spec


@pytest.mark.parametrize("spec", PLANNERS)
def test_hosts_that_cannot_sample_refuse_by_name(spec):
    planner = build_planner(spec, N, np.random.default_rng(0))
    if planner.needs_sampling or planner.needs_policy or planner.refill or planner.needs_inflight:
        with pytest.raises(ValueError, match="cannot run planner"):
            planner.require("a test host")
        return
    planner.require("a test host")  # and then its decisions run over plain per-group summaries
    ctx = context()
    ctx.prompt_stats = None
    planner.begin_step(ctx)
    chosen = planner.select(list(ctx.pool), 6, ctx)
    assert len(chosen) <= 6 and all(p in ctx.pool for p in chosen)
    ns = planner.allocate(chosen, ctx)
    assert len(ns) == len(chosen) and all(k >= 0 for k in ns)


def test_options_are_checked_against_the_component():
    with pytest.raises(ValueError, match="'gresso' is not a component of planner 'greso"):
        build_planner("greso+dapo", N, np.random.default_rng(0), {"gresso": {}})
    with pytest.raises(ValueError, match="planner_options.dapo: unknown option 'max_round' for dapo"):
        build_planner("greso+dapo", N, np.random.default_rng(0), {"dapo": {"max_round": 3}})
    with pytest.raises(ValueError, match="no planner named 'nope'"):
        build_planner("nope", N, np.random.default_rng(0))


def test_components_load_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "myplanners.py").write_text(
        "from rollwise.control.base import Component\n"
        "class EvenOnly(Component):\n"
        "    def select(self, candidates, need, ctx):\n"
        "        return [p for p in candidates if p.id % 2 == 0]\n")
    monkeypatch.chdir(tmp_path)
    planner = build_planner("myplanners:EvenOnly+dapo", N, np.random.default_rng(0))
    assert planner.name == "EvenOnly+dapo"
    ctx, engine = context(), Engine(RATES)
    batch, _, _ = run_step(planner, ctx, engine)
    assert batch.groups and all(g.prompt.id % 2 == 0 for g in batch.groups)
    with pytest.raises(ValueError, match="cannot import"):
        build_planner("myplanners:Missing", N, np.random.default_rng(0))


# ---- engines ----------------------------------------------------------------------------------
PROMPTS = [Prompt(0, "12+3=", "15"), Prompt(1, "100+250=", "350"), Prompt(2, "7=", "7")]


def torch_engine(**kw):
    from rollwise.generate.torch_engine import TorchEngine

    return TorchEngine(tiny_policy(), **{"max_new_tokens": 8, "seed": 0, **kw})


def requests(ns, **kw):
    return [Request(PROMPTS[i % 3], n, id=i, **kw) for i, n in enumerate(ns)]


# every registered engine runs the conformance kit in test_engine_conformance.py


def test_torch_engine_logprob_contract_per_request_temperature():
    """logprobs_T = log softmax(logits / T) of the sampled token, T the request's own temperature."""
    eng = torch_engine(temperature=1.0)
    reqs = requests([3, 2]) + [Request(PROMPTS[2], 4, id=2, sampling=SamplingParams(temperature=0.7))]
    out = run_sync(eng, reqs)
    pol = eng.policy
    for e in out:
        rows = e.group.rollouts
        t = e.request.sampling.temperature or 1.0
        assert all(r.temperature == t for r in rows)
        lp, ent, mask = pol.response_logprobs([r.prompt_ids for r in rows], [r.token_ids_T.tolist() for r in rows], t)
        mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in rows], batch_first=True)
        assert torch.allclose(lp * mask, mu, atol=1e-4)
        ents = torch.nn.utils.rnn.pad_sequence([r.entropy_T for r in rows], batch_first=True)
        assert torch.allclose(ent * mask, ents, atol=1e-4)  # per-token entropy of the same distribution
        assert all(abs(r.entropy - float(r.entropy_T.mean())) < 1e-5 for r in rows)


def test_torch_engine_max_tokens_per_request():
    eng = torch_engine(max_new_tokens=8)
    out = run_sync(eng, [Request(PROMPTS[0], 4, id=0, sampling=SamplingParams(max_tokens=2)),
                         Request(PROMPTS[1], 4, id=1)])
    assert all(r.num_tokens <= 2 for r in out[0].group.rollouts)
    assert any(r.finish_reason == "length" and r.num_tokens == 2 for r in out[0].group.rollouts) or \
        all(r.finish_reason == "eos" for r in out[0].group.rollouts)
    assert all(r.num_tokens <= 8 for r in out[1].group.rollouts)


def test_torch_engine_abort_returns_partials_and_prefix_resumes_them():
    pol = tiny_policy()
    no_eos(pol)  # rows run to their limit
    from rollwise.generate.torch_engine import TorchEngine

    eng = TorchEngine(pol, max_new_tokens=8, seed=3)
    eng.update_weights(1)
    eng.submit([Request(PROMPTS[0], 2, id=0), Request(PROMPTS[1], 1, id=1)])
    assert eng.poll(max_steps=3) == []  # nothing finished
    running = eng.peek([0, 1])
    assert {i: [len(t) for t in ts] for i, ts in running.items()} == {0: [3, 3], 1: [3]}  # three tokens so far
    partial = eng.abort([0])
    assert [e.request.id for e in partial] == [0] and eng.pending == 1
    rows = partial[0].group.rollouts
    assert all(r.status == "aborted" and r.finish_reason == "aborted" and r.num_tokens == 3 for r in rows)
    lp, _, mask = pol.response_logprobs([r.prompt_ids for r in rows], [r.token_ids_T.tolist() for r in rows])
    assert torch.allclose(lp * mask, torch.stack([r.logprobs_T for r in rows]), atol=1e-4)
    done = [e for e in eng.poll() if isinstance(e, Finished)]  # the other request runs on to its end
    assert [e.request.id for e in done] == [1] and done[0].group.rollouts[0].num_tokens == 8
    # resume one partial under a newer policy: the prefix comes first, the budget shrinks by its length
    eng.update_weights(2)
    p = rows[0]
    out = run_sync(eng, [Request(PROMPTS[0], 1, id=5, prefix=p)])
    r = out[0].group.rollouts[0]
    assert r.token_ids_T[:3].tolist() == p.token_ids_T.tolist() and r.num_tokens == 8  # 3 + the remaining 5
    assert torch.equal(r.logprobs_T[:3], p.logprobs_T)
    assert r.versions_T.tolist() == [1, 1, 1] + [2] * 5 and r.oldest_version == 1 and r.policy_version == 1
    assert out[0].prompt_tokens == len(p.prompt_ids) + 3  # prompt and prefix prefilled
    lp, _, mask = pol.response_logprobs([r.prompt_ids], [r.token_ids_T.tolist()])
    assert torch.allclose(lp[0], r.logprobs_T, atol=1e-4)  # the same weights here: one log-prob contract


# ---- one driver for the trainer and the simulator --------------------------------------------------
@pytest.mark.parametrize("spec", ["uniform", "dapo", "greso+ar3po", "pilot-commit", "aero"])
def test_trainer_and_simulator_run_the_same_step(tmp_path, small_policy, spec):
    """The Trainer's and the Simulator's steps over the same scripted engine and planner stream give the
    same batches and the same ledger: there is one step, whoever samples and learns."""
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer
    from rollwise.sim.runner import SimConfig, Simulator

    pool_n = SMALL["task_options"]["pool_size"]
    rates = {i: RATES[i % N] for i in range(pool_n)}
    trainer = Trainer(load_config(None, {**SMALL, "out": str(tmp_path / "t"), "planner": spec}))
    sim = Simulator(SimConfig(prompts=pool_n, batch=SMALL["batch_size"], n=SMALL["n"], planner=spec))
    seen = {}
    for runner in (trainer, sim):
        runner.planner = build_planner(spec, pool_n, np.random.default_rng(5))
        runner.rng = runner.planner.rng
        runner.engine = runner.driver.engine = Engine(rates)
        runner.learner = Learner(bump=True)
        runner.driver.scorer = None  # the scripted engine scores its own rollouts
        rows = [runner.train_step() for _ in range(3)]
        seen[runner] = ([(r["tokens"], r["prompts"], r["zero_var_frac_gen"]) for r in rows],
                        runner.ledger.tokens, runner.ledger.rollouts, runner.history.log())
    (a_rows, a_tok, a_roll, a_log), (b_rows, b_tok, b_roll, b_log) = seen.values()
    assert a_rows == b_rows and a_tok == b_tok and a_roll == b_roll
    for k in a_log:
        np.testing.assert_array_equal(a_log[k], b_log[k])


def test_a_planner_that_trims_a_group_in_place_is_stopped_clearly():
    """Dropped rollouts must leave through a new Group (the driver then settles them as discarded);
    trimming a generated group in place would hide their tokens, so the step stops with the reason."""
    from rollwise.control.base import Component
    from rollwise.core.types import Group

    class TrimCopy(Component):
        name = "trim-copy"

        def finish(self, groups, ctx):
            return [Group(g.prompt, g.rollouts[:1]) for g in groups]

    class TrimInPlace(Component):
        name = "trim-in-place"

        def finish(self, groups, ctx):
            for g in groups:
                g.rollouts = g.rollouts[:1]
            return groups

    ctx, engine = context(), Engine(RATES)
    run_step(Planner([TrimCopy()], N, ctx.rng), ctx, engine)
    assert ctx.ledger.count_rollouts("train", "discarded") == 6 * 3 and ctx.ledger.count_rollouts(fate="trained") == 6
    with pytest.raises(RuntimeError, match="dropped rollouts from a group in place"):
        run_step(Planner([TrimInPlace()], N, ctx.rng), ctx, engine)


def test_refill_counts_every_group_as_its_last_stage_left_it():
    """A refill planner draws B - accepted fresh prompts, where `accepted` counts every group of the
    step as it stands; the planner asks a group again only when a stage grew it, so a group accepted in
    an earlier round must still count once a later round grew only the others."""
    from rollwise.control.base import Component
    from rollwise.control.dapo import DAPO

    from rollwise.control.capabilities import Staged

    class SecondStageIfZeroVariance(Component):
        name = "second-stage"
        declares = (Staged(),)

        def more(self, groups, ctx):
            return [Request(g.prompt, 4) for g in groups if g.n == 4 and g.zero_variance]

    rates = {i: 0.5 if i % 2 == 0 else 0.125 for i in range(8)}  # 0.125: 4 wrong, then the 8th is right
    ctx, engine = context(seed=3, pool_n=8), Engine(rates)
    ctx.batch_size, ctx.n = 4, 4
    planner = Planner([SecondStageIfZeroVariance(), DAPO()], 8, ctx.rng)
    batch, _, rounds = run_step(planner, ctx, engine)
    first = rounds[0]
    assert {i % 2 for i in first} == {0, 1}  # the draw mixes both kinds (this seed), so round 2 grows some
    assert rounds[1] == {i: 4 for i in first if i % 2 == 1}
    assert len(rounds) == 2 and len(batch.groups) == 4  # all four accepted: no refill round
    assert sorted((g.prompt.id, g.n) for g in batch.groups) == sorted((i, 4 + 4 * (i % 2)) for i in first)
