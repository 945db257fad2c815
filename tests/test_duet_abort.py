"""DUET's marker-gated abort (control/duet.py `duet-abort`): the rule on hand-computed cases through the
real driver with the scripted token engine, the weights 1/q in the loss, the ledger's pruned tokens, seeded
draws, the torch engine's in-flight control, and a short Trainer run on the embedded default."""
import copy

import numpy as np
import pytest
import torch

from rollwise.run.records import TIMING
from rollwise.control.base import Wave, build_planner
from rollwise.control.duet import AbortGate, DUETAbort
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Request
from rollwise.generate.engine import Finished, run_sync
from rollwise.run.driver import StepDriver

from fakes import TokenEngine, make_ctx, run_step

MARK = [90, 91]
P0, P1 = Prompt(0, "q0", "0"), Prompt(1, "q1", "1")


def scripted():
    """Prompt 0: sample 0 writes the marker at positions 2-3 and would run to 10 tokens; sample 1 ends
    (EOS) at 3 tokens. Prompt 1: two samples with no marker that would run to 12 tokens."""
    lengths = {(0, 0): 10, (0, 1): 3, (1, 0): 12, (1, 1): 12}
    script = {(0, 0): [0, 1, *MARK]}
    return TokenEngine(lambda pid, j: lengths[pid, j], rates={0: 1.0, 1: 1.0}, max_tokens=20,
                       script=lambda pid, j: script.get((pid, j)))


def test_rule_on_hand_computed_samples():
    """h_abort = 4, grace = 1, q = 0.5. The draws u = Uniform(rng([7, 0, 1, i, j])) for prompt 1 (request
    index 1) are 0.79 (sample 0: pruned) and 0.10 (sample 1: kept with weight 1/q = 2)."""
    assert [round(np.random.default_rng([7, 0, 1, 1, j]).random(), 2) for j in (0, 1)] == [0.79, 0.10]
    eng, led = scripted(), Ledger()
    rule = DUETAbort(h_abort=4, grace=1, q=0.5)
    requests = [Request(P0, 2), Request(P1, 2)]
    metrics = {}
    gate = AbortGate(rule, requests, MARK, (7, 0, 1), metrics)
    g0, g1 = StepDriver(eng, led, None).generate(Wave(requests, watch=gate))
    # the marker ends at 4 tokens: the sample stops at 4 + grace = 5, kept as done; the other ended at 3
    assert [(r.num_tokens, r.finish_reason, r.status) for r in g0.rollouts] == [(5, "stop", "done"), (3, "eos", "done")]
    assert g0.rollouts[0].token_ids_T.tolist() == [0, 1, 90, 91, 4]
    assert all("is_weight" not in r.meta for r in g0.rollouts)  # never gated
    # prompt 1: gated at 6 tokens (> h_abort + grace = 5): sample 0 pruned there and out of its group,
    # sample 1 runs on to its end with weight 2
    assert [(r.num_tokens, r.finish_reason, r.meta["is_weight"]) for r in g1.rollouts] == [(12, "eos", 2.0)]
    assert metrics == {"duet/stopped": 1.0, "duet/pruned": 1.0, "duet/kept": 1.0}
    # the ledger: every decoded token charged once; the pruned sample's 6 under fate "pruned", the rest open
    assert eng.decoded == 5 + 3 + 6 + 12 == led.count() == led.budget_tokens()
    assert led.count(fate="pruned") == 6 and led.count_rollouts(fate="pruned") == 1
    assert led.count(fate="open") == 5 + 3 + 12


def test_without_a_marker_only_the_length_gate_applies():
    eng, led = scripted(), Ledger()
    requests = [Request(P0, 2), Request(P1, 2)]
    gate = AbortGate(DUETAbort(h_abort=4, grace=1, q=0.5), requests, [], (7, 0, 1), {})
    g0, g1 = StepDriver(eng, led, None).generate(Wave(requests, watch=gate))
    # prompt 0 sample 0 is gated like any other (u = rng([7, 0, 1, 0, 0]))
    u = np.random.default_rng([7, 0, 1, 0, 0]).random()
    assert [r.num_tokens for r in g0.rollouts] == ([10, 3] if u < 0.5 else [3])
    assert [r.num_tokens for r in g1.rollouts] == [12]


def test_q_one_keeps_every_sample_with_weight_one_and_the_same_tokens():
    plain = run_sync(scripted(), [Request(P0, 2, id=0), Request(P1, 2, id=1)])
    requests = [Request(P0, 2), Request(P1, 2)]
    gate = AbortGate(DUETAbort(h_abort=0, grace=0, q=1.0), requests, [], (7, 0, 1), {})
    groups = StepDriver(scripted(), Ledger(), None).generate(Wave(requests, watch=gate))
    assert [[r.token_ids_T.tolist() for r in g.rollouts] for g in groups] == \
        [[r.token_ids_T.tolist() for r in e.group.rollouts] for e in plain]
    assert all(r.meta["is_weight"] == 1.0 for g in groups for r in g.rollouts)


def test_options_are_checked_with_one_line_errors():
    for kw, msg in [({"h_abort": -1}, "h_abort >= 0"), ({"grace": 1.5}, "grace >= 0"),
                    ({"q": 0}, "0 < q <= 1"), ({"q": 1.5}, "0 < q <= 1"), ({"marker": []}, "marker must be"),
                    ({"marker": [1, -2]}, "marker must be"), ({"self_normalize": "yes"}, "self_normalize")]:
        with pytest.raises(ValueError, match=msg) as e:
            DUETAbort(**kw)
        assert "\n" not in str(e.value) and str(e.value).startswith("duet-abort:")
    with pytest.raises(ValueError, match=r"april \(Partial\) does not compose with duet-abort \(Watcher\)"):
        build_planner("april+duet-abort", 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="duet-abort needs in-flight control"):
        build_planner("duet+duet-abort", 4, np.random.default_rng(0)).require("a host", sampling=True, policy=True)


GATE = {"h_abort": 3, "grace": 2, "q": 0.25}


def planner_steps(planner, ctx, eng, steps):
    """Run steps through the real driver: per step, the batch as (prompt id, [(tokens, weight)]) and the metrics."""
    out = []
    for _ in range(steps):
        batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
        rows = [(g.prompt.id, [(r.num_tokens, r.meta.get("is_weight")) for r in g.rollouts]) for g in batch.groups]
        out.append((rows, dict(ctx.metrics)))
        ctx.step += 1
    return out


def planner_run(seed, steps=2, **opts):
    """`duet+duet-abort` over 6 prompts whose samples want 3..14 tokens (no marker: the length gate)."""
    ctx = make_ctx(pool_size=6, B=3, n=4, seed=seed)
    eng = TokenEngine(lambda pid, j: 3 + (2 * pid + 3 * j) % 12, rates={i: 0.5 for i in range(6)})
    planner = build_planner("duet+duet-abort", 6, ctx.rng, {"duet-abort": {**GATE, **opts}})
    return planner_steps(planner, ctx, eng, steps), ctx, eng, planner


def test_planner_steps_prune_reweight_and_balance_the_ledger():
    out, ctx, eng, _ = planner_run(seed=0)
    led = ctx.ledger
    rows = [r for batch, _ in out for _, rs in batch for r in rs]
    pruned = sum(m.get("duet/pruned", 0) for _, m in out)
    kept = sum(m.get("duet/kept", 0) for _, m in out)
    assert pruned > 0 and kept > 0
    # the gate acts on the 6th token (> h_abort + grace = 5): its survivors run on with 1/q = 4; a row whose
    # 6th token was its EOS was done before the gate could act, and carries nothing, like shorter rows
    assert all((w == 4.0) == (n > 6) and (w is None) == (n <= 6) for n, w in rows)
    assert sum(w is not None for _, w in rows) == kept
    assert led.count_rollouts(fate="pruned") == pruned and led.count(fate="pruned") == 6 * pruned
    assert led.count() == eng.decoded == led.budget_tokens() and led.count(fate="open") == 0
    assert led.count(fate="trained") + led.count(fate="discarded") + led.count(fate="pruned") == eng.decoded


def test_draws_are_reproducible_by_seed_and_across_a_resume():
    a, *_ = planner_run(seed=0, steps=3)
    b, *_ = planner_run(seed=0, steps=3)
    c, *_ = planner_run(seed=1, steps=3)
    assert a == b and a != c
    # resume after step 1 (planner state, planner stream, ledger, history, engine): the same next steps
    first, ctx, eng, planner = planner_run(seed=0, steps=1)
    state, ctx2, eng2 = copy.deepcopy(planner.state_dict()), copy.deepcopy(ctx), copy.deepcopy(eng)
    rng_state = copy.deepcopy(ctx.rng.bit_generator.state)
    resumed = build_planner("duet+duet-abort", 6, ctx2.rng, {"duet-abort": GATE})
    resumed.load_state_dict(state)
    ctx2.rng.bit_generator.state = rng_state  # as a checkpoint restores it (building drew a permutation)
    assert first + planner_steps(resumed, ctx2, eng2, 2) == a


def test_self_normalized_weights_average_one_per_group():
    out, *_ = planner_run(seed=0, self_normalize=True)
    weighted = [[w for _, w in rs] for batch, _ in out for _, rs in batch if any(w is not None for _, w in rs)]
    assert weighted  # a group with a survivor: every row gets w / mean(w), the unweighted ones w = 1
    assert all(None not in ws and abs(sum(ws) / len(ws) - 1.0) < 1e-12 for ws in weighted)
    assert any(len(set(ws)) > 1 for ws in weighted)


def test_the_weight_multiplies_the_rows_loss():
    """GRPO on rewards [1, 0] with equal lengths: the two rows' losses cancel; weight 2 on the correct row
    leaves -A * (2 - 1) * 3 / 6 = -A / 2 (token-mean, ratio 1)."""
    from rollwise.learn.learner import Learner, LearnerConfig

    from fakes import ConstPolicy
    from test_learn_learner import group

    def loss(weight):
        g = group([1.0, 0.0])
        g.rollouts[0].meta["is_weight"] = weight
        learner = Learner(ConstPolicy(), LearnerConfig(minibatches=1, lr=0.0))
        a = float(learner.advantages(Batch([group([1.0, 0.0])]))[0])
        return learner.update(Batch([g]))["loss"], a

    (l1, _), (l2, a) = loss(1.0), loss(2.0)
    assert abs(l1) < 1e-6 and abs(l2 - (-a / 2)) < 1e-6


def test_torch_engine_peek_and_stop_single_samples():
    from rollwise.generate.torch_engine import TorchEngine
    from test_engine_policy import no_eos, tiny_policy

    pol = tiny_policy()
    no_eos(pol)
    p = Prompt(0, "12+3=", "15")
    (plain,) = run_sync(TorchEngine(pol, max_new_tokens=6, seed=0), [Request(p, 3, id=0)])
    eng = TorchEngine(pol, max_new_tokens=6, seed=0)
    eng.submit([Request(p, 3, id=0)])
    eng.poll(max_steps=2)
    seen = eng.peek([0])[0]
    assert [t.tolist() for t in seen] == [r.token_ids_T[:2].tolist() for r in plain.group.rollouts]
    eng.stop(0, [1], "pruned")
    eng.poll(max_steps=1)
    eng.stop(0, [2], "stop")
    assert eng.peek([0])[0][1] is None and eng.peek([0])[0][2] is None
    with pytest.raises(ValueError, match="reason must be"):
        eng.stop(0, [0], "aborted")
    (done,) = [e for e in eng.poll() if isinstance(e, Finished)]
    rows = done.group.rollouts
    assert [(r.num_tokens, r.finish_reason, r.status) for r in rows] == \
        [(6, "length", "done"), (2, "pruned", "pruned"), (3, "stop", "done")]
    assert rows[1].token_ids_T.tolist() == plain.group.rollouts[1].token_ids_T[:2].tolist()
    lp, _, mask = pol.response_logprobs([rows[2].prompt_ids], [rows[2].token_ids_T.tolist()])
    assert torch.allclose(lp[0], rows[2].logprobs_T, atol=1e-4)  # a stopped row keeps its behaviour log-probs
    with pytest.raises(ValueError, match="not running"):
        eng.stop(0, [0], "stop")


def test_torch_engine_watched_without_stops_is_bit_identical():
    """Polling one token at a time and peeking changes nothing: same tokens, same log-probs."""
    from rollwise.generate.torch_engine import TorchEngine
    from test_engine_policy import tiny_policy

    pol = tiny_policy()
    ps = [Prompt(0, "12+3=", "15"), Prompt(1, "100+250=", "350")]
    plain = run_sync(TorchEngine(pol, max_new_tokens=8, seed=4), [Request(ps[0], 3, id=0), Request(ps[1], 2, id=1)])
    requests = [Request(ps[0], 3), Request(ps[1], 2)]
    looked = []
    groups = StepDriver(TorchEngine(pol, max_new_tokens=8, seed=4), Ledger(), None).generate(
        Wave(requests, watch=lambda running: looked.append(len(running)) or []))
    assert looked and all(
        torch.equal(a.token_ids_T, b.token_ids_T) and torch.equal(a.logprobs_T, b.logprobs_T)
        for g, e in zip(groups, plain) for a, b in zip(g.rollouts, e.group.rollouts))


def test_engines_without_inflight_control_are_refused_by_name():
    from fakes import Engine

    class NoPeek(Engine):
        capabilities = ()  # no InFlight declared

    requests = [Request(P0, 2)]
    with pytest.raises(ValueError, match="does not offer in-flight control"):
        StepDriver(NoPeek({0: 0.5}), Ledger(), None).generate(Wave(requests, watch=lambda running: []))
    from rollwise.generate.vllm_engine import VLLMEngine

    vllm = object.__new__(VLLMEngine)  # never started: the driver refuses it before calling it
    with pytest.raises(ValueError, match="engine VLLMEngine does not offer in-flight control"):
        StepDriver(vllm, Ledger(), None).generate(Wave([Request(P0, 2)], watch=lambda running: []))


def test_trainer_runs_duet_abort_on_the_embedded_default(tmp_path, small_policy):
    """Two steps of `duet+duet-abort` through the Trainer on the arithmetic task (no marker: the length
    gate at 3 tokens): pruned tokens are in the metrics and the ledger balances; a rerun is identical."""
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    def run(out):
        cfg = load_config(None, {**SMALL, "out": str(tmp_path / out), "steps": 2, "eval_every": 0,
                                 "planner": "duet+duet-abort",
                                 "planner_options": {"duet-abort": {"h_abort": 2, "grace": 1, "q": 0.5}}})
        tr = Trainer(cfg)
        rows = tr.run()
        return [{k: v for k, v in r.items() if k not in TIMING} for r in rows], tr.ledger

    rows, led = run("a")
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r.get("duet/pruned", 0) for r in rows) > 0 and rows[-1]["tok/train/pruned/decoded"] > 0
    assert led.count(fate="open") == 0 and led.count("train") == led.budget_tokens() == rows[-1]["tokens"]
    assert led.count("train", "pruned") == rows[-1]["tok/train/pruned/decoded"]
    again, _ = run("b")
    assert again == rows


def test_async_mode_refuses_duet_abort_by_name(tmp_path, small_policy):
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "a"), "steps": 1, "eval_every": 0, "mode": "async",
                             "planner": "duet-abort"})
    with pytest.raises(ValueError, match="--mode async .* cannot run planner 'duet-abort': duet-abort needs in-flight"):
        Trainer(cfg).run()
