"""SPEC-RL (replay/spec_rl.py): the acceptance rule by hand, resume from the first rejection through the
real driver and torch engine, ledger kinds and budget, the store's state, and real training runs."""
import copy
import math

import numpy as np
import pytest
import torch

from rollwise.control.base import build_planner
from rollwise.core.types import Prompt
from rollwise.generate.torch_engine import TorchEngine
from rollwise.replay.spec_rl import MEASURED_DRAFT_COST, Draft, RolloutStore, first_rejection
from rollwise.run.driver import StepDriver

from fakes import Learner, make_ctx
from test_engine_policy import no_eos, tiny_policy

LOG = math.log


def test_acceptance_rule_by_hand():
    """p_old = 0.5 everywhere, p_new = (0.5, 0.25, 0.5), u = (0.9, 0.6, 0.1). Accept token i iff
    u_i <= min(1, l p_new_i / p_old_i): l = 1 gives alpha = (1, 0.5, 1), so token 1 (u 0.6 > 0.5) is the
    first rejection; l = e^0.5 gives alpha_1 = min(1, 0.824) >= 0.6, so all three are accepted."""
    old = torch.tensor([LOG(0.5)] * 3)
    new = torch.tensor([LOG(0.5), LOG(0.25), LOG(0.5)])
    log_u = torch.tensor([LOG(0.9), LOG(0.6), LOG(0.1)])
    assert first_rejection(new, old, log_u, LOG(1.0)) == 1
    assert first_rejection(new, old, log_u, 0.5) == 3
    # the threshold is l = 1.2 (alpha_1 = 1.2 * 0.25 / 0.5 = 0.6 = u_1); margins above float32 rounding
    assert first_rejection(new, old, log_u, LOG(1.2) - 1e-4) == 1
    assert first_rejection(new, old, log_u, LOG(1.2) + 1e-4) == 3
    # token 0 fails only once l < u_0 = 0.9 (p_new = p_old there): reject at position 0
    assert first_rejection(new, old, log_u, LOG(0.89)) == 0
    assert first_rejection(new, old, log_u, math.inf) == 3  # l = inf accepts everything
    assert first_rejection(new, old, log_u, -math.inf) == 0  # l -> 0 rejects at once


def test_acceptance_is_monotone_in_lenience():
    g = torch.Generator().manual_seed(0)
    old, new = -torch.rand(200, 30, generator=g) * 3, -torch.rand(200, 30, generator=g) * 3
    log_u = torch.rand(200, 30, generator=g).log()
    lens = [sum(first_rejection(new[i], old[i], log_u[i], b) for i in range(200)) for b in (0.0, 0.2, 0.5, 1.0, 2.0)]
    assert lens == sorted(lens) and lens[0] < lens[-1]


def test_the_default_draft_cost_is_the_recorded_measurement():
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).parents[1] / "benchmarks/results/prefill_decode_ratio.json").read_text())
    assert MEASURED_DRAFT_COST == rec["draft_cost"] == rec["results"][0]["ratio"]


def test_bad_options_fail_clearly():
    for opts in ({"lenience": 0.0}, {"draft_cost": -1.0}, {"store_tokens": 0}):
        with pytest.raises(ValueError, match="spec-rl: need lenience > 0"):
            build_planner("spec-rl", 4, np.random.default_rng(0), {"spec-rl": opts})
    with pytest.raises(ValueError, match=r"april \(Partial\) does not compose with spec-rl \(Speculator\): a row it resumes would be resumed twice"):
        build_planner("spec-rl+april", 4, np.random.default_rng(0))


# ---- one step through the real driver and torch engine -------------------------------------------
class Spy(TorchEngine):
    """The torch engine, recording every submission."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.submitted = []

    def submit(self, requests):
        self.submitted.append(list(requests))
        super().submit(requests)


def setup_step(draft_cost=0.5):
    pol = tiny_policy()
    no_eos(pol)  # every row decodes to its limit (6 tokens)
    eng = Spy(pol, max_new_tokens=6, seed=0)
    ctx = make_ctx(pool_size=2, B=2, n=2)
    ctx.pool = [Prompt(0, "12+3=", "15"), Prompt(1, "7+1=", "8")]
    planner = build_planner("spec-rl", 2, ctx.rng, {"spec-rl": {"draft_cost": draft_cost}})
    ctx.ledger.draft_cost = planner.draft_cost
    return pol, eng, ctx, planner


def step(planner, ctx, eng, pol):
    ctx.groups, ctx.metrics = {}, {}
    learner = Learner()
    learner.version = eng.version
    return StepDriver(eng, ctx.ledger, ctx.history, policy=pol).run_step(planner, ctx, learner)


def test_drafts_resume_from_the_first_rejection_and_are_charged_as_drafts():
    """Prompt 0 has two stored 6-token drafts: A's p_old is tiny except at position 2, where it is
    e^100 times the current policy's (alpha ~ 0: rejected whatever u), so A resumes after 2 tokens with
    6 - 2 = 4 to generate; B's p_old is tiny everywhere (alpha = 1), so B is reused whole, with no engine
    call. Prompt 1 has no drafts: one fresh request for its 2 samples."""
    pol, eng, ctx, planner = setup_step(draft_cost=0.5)
    spec = planner.components[0]
    ids = pol.encode("12+3=")
    a, b = torch.tensor([5, 6, 7, 8, 9, 10]), torch.tensor([11, 12, 13, 14, 15, 16])
    lp_a = torch.full((6,), -100.0)
    lp_a[2] = 100.0
    spec.store.put(0, ids, [Draft(a, lp_a, "A", "length", 1.0), Draft(b, torch.full((6,), -100.0), "B", "eos", 1.0)])
    out = step(planner, ctx, eng, pol)

    (sub,) = eng.submitted  # one engine call: A's resumed row and prompt 1's fresh samples
    assert [(q.prompt.id, q.n, q.prefix.num_tokens if q.prefix is not None else None) for q in sub] == \
        [(0, 1, 2), (1, 2, None)]
    assert sub[0].sampling.max_tokens is None  # the engine's 6 bounds prefix + continuation: 4 more
    g0 = next(g for g in out.batch.groups if g.prompt.id == 0)
    resumed, whole = g0.rollouts
    assert resumed.num_tokens == 6 and resumed.token_ids_T[:2].tolist() == [5, 6]
    assert resumed.lineage.tokens_by_kind == {"decoded": 4}
    assert resumed.lineage.prefix.lineage.tokens_by_kind == {"draft": 2}
    assert whole.token_ids_T.tolist() == b.tolist()
    assert (whole.text, whole.finish_reason, whole.status) == ("B", "eos", "done")
    # behaviour log-probs of the accepted tokens are the current policy's (the verification pass)
    with torch.no_grad():
        lp_NT, _, _ = pol.response_logprobs([ids, ids], [a.tolist(), b.tolist()], 1.0)
    assert torch.allclose(resumed.logprobs_T[:2], lp_NT[0, :2], atol=1e-5)
    assert torch.allclose(whole.logprobs_T, lp_NT[1], atol=1e-5)
    assert not torch.allclose(resumed.logprobs_T[:2], lp_a[:2])
    # the ledger: 2 + 6 accepted draft tokens, 4 + 2 * 6 decoded, 12 draft tokens verified
    led = ctx.ledger
    assert led.count(kind="draft") == 8 and led.count(kind="decoded") == 16 and led.verified_tokens == 12
    assert led.count("train", "trained", "draft") == 8 and led.count(fate="open") == 0
    assert led.budget_tokens() == 16 + round(0.5 * 12)
    assert led.count_rollouts() == 4  # a resumed draft is one rollout, not two
    assert ctx.metrics["spec/drafts"] == 2 and ctx.metrics["spec/accept_rate"] == 8 / 12
    # the store now holds this step's trained rollouts, ready for the next visit
    assert [d.token_ids_T.tolist() for d in spec.store.get(0)[1]] == [r.token_ids_T.tolist() for r in g0.rollouts]


def test_acceptance_draws_are_seeded_by_seed_and_step():
    """The same store, seed and step accept the same prefixes; the store is refreshed as trained."""
    runs = []
    for _ in range(2):
        pol, eng, ctx, planner = setup_step()
        ids = pol.encode("12+3=")
        g = torch.Generator().manual_seed(1)
        drafts = [Draft(torch.randint(3, 40, (6,), generator=g), -torch.rand(6, generator=g) * 4, "x", "length", 1.0)
                  for _ in range(2)]
        planner.components[0].store.put(0, ids, drafts)
        out = step(planner, ctx, eng, pol)
        runs.append(([q.prefix.num_tokens if q.prefix is not None else None for q in eng.submitted[0]],
                     [r.token_ids_T.tolist() for g in out.batch.groups for r in g.rollouts]))
    assert runs[0] == runs[1]


def test_store_is_bounded_and_its_state_round_trips():
    store = RolloutStore(max_tokens=10)

    def d(k, v):
        return Draft(torch.full((k,), v), torch.full((k,), -0.5 * v), f"t{v}", "eos", 0.7)

    store.put(0, [1, 2], [d(3, 1), d(2, 2)])
    store.put(1, [3], [d(4, 3)])
    assert store.tokens == 9 and list(store.entries) == [0, 1]
    store.put(2, [4], [d(2, 4)])  # 11 tokens > 10: the least recently stored prompt (0) goes
    assert list(store.entries) == [1, 2] and store.tokens == 6
    store.put(1, [3], [d(1, 5)])  # storing again replaces the drafts and makes 1 the newest
    assert list(store.entries) == [2, 1] and store.tokens == 3
    back = RolloutStore(max_tokens=10)
    back.load_state_dict(copy.deepcopy(store.state_dict()))
    assert list(back.entries) == list(store.entries) and back.tokens == store.tokens
    for pid in store.entries:
        (ia, da), (ib, db) = store.get(pid), back.get(pid)
        assert ia == ib and len(da) == len(db)
        for x, y in zip(da, db):
            assert torch.equal(x.token_ids_T, y.token_ids_T) and torch.equal(x.logprobs_T, y.logprobs_T)
            assert (x.text, x.finish_reason, x.temperature) == (y.text, y.finish_reason, y.temperature)


# ---- real training runs through the Trainer --------------------------------------------------------
def train(out, steps, planner="spec-rl", **extra):
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(out), "steps": steps, "eval_every": 0, "planner": planner,
                             "task_options": {"pool_size": 8, "heldout_size": 40}, **extra})
    trainer = Trainer(cfg)
    return trainer, trainer.run()


def test_train_with_spec_rl_reuses_drafts_and_resumes_exactly(tmp_path, small_policy):
    """A pool of 8 with batches of 8: from step 2 on every prompt is revisited with drafts. Their accepted
    tokens are charged as drafts, the budget is decoded + cost x verified, and 2 + 1 resumed steps equal 3."""
    trainer, rows = train(tmp_path / "full", 3)
    led = trainer.ledger
    assert "spec/accept_rate" not in rows[0] and rows[1]["spec/drafts"] == 8 * 4
    assert led.count(kind="draft") > 0 and led.verified_tokens >= led.count(kind="draft")
    assert led.draft_cost == trainer.planner.draft_cost == MEASURED_DRAFT_COST
    decoded = led.count(kind="decoded") - led.count("eval") - led.count("oracle")
    assert rows[-1]["tokens"] == led.budget_tokens() == decoded + round(MEASURED_DRAFT_COST * led.verified_tokens)
    assert rows[-1]["tok/verified"] == led.verified_tokens
    train(tmp_path / "part", 2)
    resumed, rows_b = train(tmp_path / "part", 3)
    assert rows_b[-1] == {**rows[-1], **{k: rows_b[-1][k] for k in rows_b[-1] if k.endswith("_s")}}
    assert (resumed.ledger.tokens, resumed.ledger.verified_tokens) == (led.tokens, led.verified_tokens)


@pytest.mark.parametrize("spec", ["ar3po+spec-rl", "greso+spec-rl"])
def test_spec_rl_composes_with_planners(tmp_path, small_policy, spec):
    trainer, rows = train(tmp_path, 2, planner=spec)
    assert rows[-1]["step"] == 2 and trainer.ledger.count(fate="open") == 0


def test_async_mode_refuses_spec_rl_before_starting_workers(tmp_path, small_policy):
    from conftest import SMALL
    from rollwise.run.async_loop import AsyncLoop
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(tmp_path), "planner": "spec-rl", "mode": "async"})
    with pytest.raises(ValueError, match="--mode async cannot run spec-rl"):
        (lambda tr: AsyncLoop(tr.parts, tr))(Trainer(cfg))
