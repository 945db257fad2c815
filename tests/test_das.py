"""DAS (replay/das.py) and the torch engine's exact speculative decoding: the suffix-tree drafter on a
repeated prefix by hand, the length-aware budget, drafted rows equal to plain decoding (greedy: token for
token; sampled: a chi-square test against the policy's own sequence probabilities, with a control that
the test rejects a shifted distribution), and the ledger of one step by hand (fewer decode-equivalents
for the same rollouts)."""
import collections
import math
import re

import numpy as np
import pytest
import torch

from rollwise.control.base import build_planner
from rollwise.core.types import Prompt, Request
from rollwise.generate.capabilities import HiddenStates, InFlight
from rollwise.replay.das import DAS, SuffixTree
from rollwise.generate.engine import run_sync
from rollwise.generate.torch_engine import TorchEngine
from rollwise.run.driver import StepDriver

from fakes import Learner, make_ctx
from test_engine_policy import no_eos, tiny_policy

P = Prompt(0, "12+3=", "15")


def test_suffix_tree_drafts_a_repeated_prefix_by_hand():
    """History 5 6 7 8 EOS(1) and 5 6 9 1. From the start both begin 5 6 (counts 2, 2), then split 7 | 9
    (1 each, share 1/2): min_prob 0.3 goes on (the smaller id, 7, then 8, 1), 0.6 stops at the split."""
    tree = SuffixTree(depth=6)
    tree.add([5, 6, 7, 8, 1])
    tree.add([5, 6, 9, 1])
    assert tree.draft([], k=4, match_len=4, min_prob=0.3) == [5, 6, 7, 8]
    assert tree.draft([], k=4, match_len=4, min_prob=0.6) == [5, 6]
    assert tree.draft([5, 6, 9], k=4, match_len=4, min_prob=0.3) == [1]  # the longest match: start 5 6 9
    # (start, 3, 6) and (3, 6) are unknown: the match falls back to "6", whose continuations are 7 and 9
    assert tree.draft([3, 6], k=2, match_len=4, min_prob=0.3) == [7, 8]
    assert tree.draft([2], k=3, match_len=4, min_prob=0.0) == []  # nothing matches "2"
    assert tree.draft([], k=0, match_len=4, min_prob=0.0) == []


def test_length_aware_budget_and_what_gets_no_draft():
    das = DAS(k_short=1, k_long=4, tail=0.5, min_prob=0.0)
    das._remember(0, [[5, 6, 7, 8, 1], [5, 6, 9, 1]])  # lengths 5, 4: the median 4.5 is the tail's start
    assert das.budget(0, 0) == 1 and das.budget(0, 4) == 1 and das.budget(0, 5) == 4
    assert das.budget(1, 10) == 0  # no history, no drafts
    assert das.draft(Request(P, 1), 0, []) == [5]
    assert das.draft(Request(P, 1, purpose="pilot"), 0, []) == []
    # the history keeps the last `window` rollouts and round-trips through its state
    das2 = DAS(window=2)
    das2._remember(0, [[1], [2]])
    das2._remember(0, [[3]])
    assert das2.history[0] == [[2], [3]]
    das3 = DAS(window=2)
    das3.load_state_dict(das2.state_dict())
    assert das3.history == das2.history


def test_refused_compositions_and_bad_options_are_one_line():
    rng = np.random.default_rng(0)
    for spec, other in (("das+duet-abort", "duet-abort"), ("spec-rl+das", "spec-rl"), ("treepo+das", "treepo"),
                        ("april+das", "april")):
        with pytest.raises(ValueError, match=rf"planner '{re.escape(spec)}': .*{other}.*"):
            build_planner(spec, 4, rng)
    with pytest.raises(ValueError, match="das: need"):
        DAS(k_short=3, k_long=2)
    for spec in ("das", "vip+das", "ar3po+das", "greso+das"):
        build_planner(spec, 4, rng)


def peaked_policy(scale=60.0):
    """The random tiny policy with its output layer scaled: a few continuations carry most of the mass,
    so a few thousand samples test the distribution; EOS never comes (rows run to their limit)."""
    pol = tiny_policy(0)
    with torch.no_grad():
        pol.model.head.weight.mul_(scale)
    return no_eos(pol)


def sample(pol, n, temperature, max_tokens, drafter=None, seed=0):
    eng = TorchEngine(pol, temperature=temperature, max_new_tokens=max_tokens, seed=seed)
    req = Request(P, n)
    req.id = 0
    (e,) = run_sync(eng, [req], **({} if drafter is None else {"drafter": drafter}))
    return e


def test_drafted_greedy_rows_are_the_plain_greedy_rows():
    pol = peaked_policy()
    plain = sample(pol, 2, 0.0, 6).group.rollouts[0]
    g = plain.token_ids_T.tolist()
    assert 7 not in g
    # the right draft: pass 1 samples token 0; pass 2 feeds it with drafts 1-3 (kept) and samples token 4;
    # pass 3 has no room for a draft (6 - 5 - 1 = 0) and samples token 5: 3 kept, 3 scored per row. The
    # wrong one is rejected at once in every pass, whose room shrinks 4, 3, 2, 1: 3 + 3 + 2 + 1 scored.
    for drafter, kept, scored in ((lambda q, j, toks: g[len(toks):len(toks) + 3], 3, 3),
                                  (lambda q, j, toks: [7, 7, 7], 0, 9)):
        e = sample(pol, 2, 0.0, 6, drafter)
        for r in e.group.rollouts:
            assert r.token_ids_T.tolist() == g
            assert torch.allclose(r.logprobs_T, plain.logprobs_T, atol=1e-5)
            assert r.tokens_by_kind().get("draft", 0) == kept
        assert e.verified_tokens == 2 * scored


def test_a_row_at_the_context_end_beside_a_long_draft():
    """One chunk, 16 new tokens: prompt A fills the 64-position context but for 6 tokens (it gets no
    draft), prompt B drafts 8 tokens a pass. A's padding in those passes must stay inside the model's positions; both rows are
    their plain greedy rows."""
    pol = peaked_policy()
    long_prompt = Prompt(1, "1+" * 28 + "1=", "29")  # 58 characters
    reqs = [Request(long_prompt, 1), Request(P, 1)]
    for i, r in enumerate(reqs):
        r.id = i
    plain = run_sync(TorchEngine(pol, temperature=0.0, max_new_tokens=16, seed=0), reqs)
    want = {e.request.id: e.group.rollouts[0].token_ids_T.tolist() for e in plain}
    assert len(pol.encode(long_prompt.text)) + len(want[0]) == pol.max_positions and len(want[1]) == 16
    drafter = lambda q, j, toks: [] if q.id == 0 else (want[1][len(toks):] + [9] * 8)[:8]  # noqa: E731
    again = [Request(long_prompt, 1), Request(P, 1)]
    for i, r in enumerate(again):
        r.id = i
    got = run_sync(TorchEngine(pol, temperature=0.0, max_new_tokens=16, seed=0), again, drafter=drafter)
    assert {e.request.id: e.group.rollouts[0].token_ids_T.tolist() for e in got} == want


def chi_square(rollouts, logp_of):
    """Pearson's test of the sequences' counts against N x their probability (cells with >= 5 expected,
    the rest pooled): the p-value."""
    from scipy.stats import chisquare

    N = len(rollouts)
    count = collections.Counter(tuple(r.token_ids_T.tolist()) for r in rollouts)
    prob = {s: math.exp(logp_of(s)) for s in count}
    cells = [s for s in count if prob[s] * N >= 5]
    obs = [count[s] for s in cells] + [N - sum(count[s] for s in cells)]
    exp = [prob[s] * N for s in cells] + [N - sum(prob[s] * N for s in cells)]
    return chisquare(obs, exp).pvalue


def test_drafted_sampled_rows_have_the_plain_distribution():
    """4,000 three-token rows at temperature 1, drafted from the greedy path for half the rows and a wrong
    path for the others: their sequences fit the policy's own probabilities (exp of the sum of the
    teacher-forced log-probs) as well as plain decoding's do. The control: rows sampled at temperature
    1.3, checked against the temperature-1 probabilities, are rejected (the test can fail)."""
    pol = peaked_policy()
    ids = pol.encode(P.text)
    greedy = sample(pol, 1, 0.0, 3).group.rollouts[0].token_ids_T.tolist()

    def logp_at(temperature):
        def logp(seq):
            with torch.no_grad():
                lp, _, _ = pol.response_logprobs([ids], [list(seq)], [temperature])
            return float(lp[0, :len(seq)].sum())
        return logp

    drafter = lambda q, j, toks: greedy[len(toks):] if j % 2 == 0 else [3, 4]  # noqa: E731
    drafted = sample(pol, 4000, 1.0, 3, drafter, seed=1)
    kept = sum(r.tokens_by_kind().get("draft", 0) for r in drafted.group.rollouts)
    assert kept > 300 and drafted.verified_tokens > kept  # drafts were kept, and some rejected
    assert chi_square(drafted.group.rollouts, logp_at(1.0)) > 0.01
    assert chi_square(sample(pol, 4000, 1.0, 3, seed=1).group.rollouts, logp_at(1.0)) > 0.01
    assert chi_square(sample(pol, 4000, 1.3, 3, seed=1).group.rollouts, logp_at(1.0)) < 1e-4


def test_one_step_ledger_by_hand_fewer_decode_equivalents_for_the_same_rollouts():
    """Greedy, 6 tokens a row, DAS's history = the greedy rollout (the repetitive case), k_short = 2,
    k_long = 8, tail at the history's length (6): every row is below it. Per row: pass 1 samples token 0;
    pass 2 keeps drafts 1, 2 and samples 3; pass 3 has room for one draft (6 - 4 - 1): keeps 4, samples 5.
    So 3 decoded + 3 draft tokens, 3 scored: 3 + 0.5 x 3 = 4.5 decode-equivalents against 6."""
    pol = peaked_policy()
    g = sample(pol, 1, 0.0, 6).group.rollouts[0].token_ids_T.tolist()
    eng = TorchEngine(pol, temperature=0.0, max_new_tokens=6, seed=0)
    ctx = make_ctx(pool_size=1, B=1, n=4)
    ctx.pool = [P]
    planner = build_planner("das", 1, ctx.rng, {"das": {"draft_cost": 0.5, "k_short": 2, "min_prob": 0.0}})
    ctx.ledger.draft_cost = planner.draft_cost
    planner.components[0]._remember(0, [g])
    learner = Learner()
    out = StepDriver(eng, ctx.ledger, ctx.history, policy=pol).run_step(planner, ctx, learner)
    (group,) = out.batch.groups
    assert [r.token_ids_T.tolist() for r in group.rollouts] == [g] * 4
    assert all(r.lineage.tokens_by_kind == {"decoded": 3, "draft": 3} for r in group.rollouts)
    led = ctx.ledger
    assert led.count(kind="decoded") == 12 and led.count(kind="draft") == 12 and led.verified_tokens == 12
    assert led.budget_rollouts() == 4 and led.count("train") == 24  # the same rollouts and tokens as plain
    assert led.budget_tokens() == 12 + 6  # 18 decode-equivalents against plain decoding's 24
    assert led.count("train", "trained", "draft") == 12 and led.count(fate="open") == 0
    assert ctx.metrics["das/kept"] == 12 and ctx.metrics["das/scored"] == 12
    # the step's rollouts joined the prompt's history for its next visit
    assert planner.components[0].history[0] == [g] * 5


def test_an_engine_without_drafts_is_refused_by_name():
    from fakes import Engine

    class Scripted(Engine):
        capabilities = (InFlight(), HiddenStates())  # no Drafts

    ctx = make_ctx(pool_size=2, B=2, n=2)
    planner = build_planner("das", 2, ctx.rng)
    with pytest.raises(ValueError, match="engine Scripted does not verify drafts"):
        StepDriver(Scripted([0.5, 0.5]), ctx.ledger, ctx.history).run_step(planner, ctx, Learner())


def test_trainer_runs_das_and_ar3po_with_das_on_the_tiny_model(tmp_path, small_policy):
    """Two steps of `das` and of `ar3po+das` through the Trainer on a pool of 8 prompts (each comes back
    in step 2): drafts are kept in step 2 and the ledger's budget is decoded + draft_cost x scored."""
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    for spec in ("das", "ar3po+das"):
        cfg = load_config(None, {**SMALL, "out": str(tmp_path / spec), "steps": 2, "eval_every": 0,
                                 "task_options": {**SMALL["task_options"], "pool_size": 8}, "planner": spec})
        tr = Trainer(cfg)
        rows = tr.run()
        led = tr.ledger
        assert rows[-1]["das/kept"] > 0, spec
        assert led.count(fate="open") == 0
        assert led.budget_tokens() == led.count(kind="decoded") + round(led.draft_cost * led.verified_tokens)

