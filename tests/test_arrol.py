"""ARRoL's in-flight pruning (control/arrol.py `arrol`): the survivor rule and the head's online update on
hand-computed cases, the rule through the real driver with the scripted token engine (pruned rows charged,
survivors carry what the head read), state round trips and resumes, the torch engine's hidden-state output,
and short Trainer runs on the embedded default (`arrol`, `ar3po+arrol`)."""
import copy

import numpy as np
import pytest
import torch

from rollwise.run.records import TIMING
from rollwise.control.arrol import ARRoL, PruneGate, QualityHead, head_figures, survivors
from rollwise.control.base import Decision, Watchers, Wave, build_planner
from rollwise.generate.capabilities import Drafts, InFlight
from rollwise.control.capabilities import WaveWatch
from rollwise.control.duet import AbortGate, DUETAbort
from rollwise.core.ledger import Ledger
from rollwise.core.types import Group, Prompt, Request
from rollwise.generate.engine import run_sync
from rollwise.run.driver import StepDriver

from fakes import R, TokenEngine, make_ctx, run_step

P0 = Prompt(0, "q0", "0")


def test_survivors_keep_the_top_and_bottom_of_the_ranking():
    p = [0.9, 0.1, 0.5, 0.7, 0.3, 0.6]  # ranking, highest first: 0, 3, 5, 2, 4, 1
    assert survivors(p, 3, 0.5) == [0, 1, 3]  # ceil(1.5) = 2 highest (0, 3), floor(1.5) = 1 lowest (1)
    assert survivors(p, 4, 0.5) == [0, 1, 3, 4]  # 2 highest, 2 lowest (1, 4): the middle (5, 2) pruned
    assert survivors(p, 4, 0.25) == [0, 1, 2, 4]  # 1 highest, 3 lowest (1, 4, 2)
    assert survivors(p, 3, 1.0) == [0, 3, 5] and survivors(p, 3, 0.0) == [1, 2, 4]
    assert survivors(p, 0, 0.5) == [] and survivors(p, 6, 0.5) == survivors(p, 9, 0.5) == list(range(6))
    assert survivors([0.5] * 6, 2, 0.5) == [0, 5]  # a cold head: ties by index, first and last


def test_head_update_by_hand():
    """lr 1, l2 0, one step from zero on h = [[1, 0], [0, 1]], y = [1, 0]. Standardised by the replay's
    mean [.5, .5] and std [.5, .5]: z = [[1, -1], [-1, 1]]; p = 0.5 for both, d logit = p - y = [-.5, .5],
    so w = -Z^T (p - y) / 2 = [0.5, -0.5] and b = -mean(p - y) = 0."""
    head = QualityHead(lr=1.0, l2=0.0, steps=1, buffer=2)
    assert head.prob(torch.ones(3, 2)).tolist() == [0.5] * 3  # untrained: no preference
    head.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), [1.0, 0.0])
    assert head.w_D.tolist() == [0.5, -0.5] and head.b == 0.0
    assert head.mu_D.tolist() == [0.5, 0.5] and head.sd_D.tolist() == [0.5, 0.5]
    assert abs(float(head.prob(torch.tensor([[1.0, 0.0]]))[0]) - 1 / (1 + np.exp(-1.0))) < 1e-12
    # the replay keeps the last `buffer` labels and is standardised anew; l2 shrinks w: w -= lr (grad + l2 w)
    head.l2 = 0.5
    head.update(torch.tensor([[2.0, 0.0]]), [1.0])
    assert head.X_ND.tolist() == [[0.0, 1.0], [2.0, 0.0]] and head.y_N.tolist() == [0.0, 1.0]
    Z = torch.tensor([[-1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)  # mean [1, .5], std [1, .5]
    w = torch.tensor([0.5, -0.5], dtype=torch.float64)
    err = torch.sigmoid(Z @ w) - torch.tensor([0.0, 1.0], dtype=torch.float64)
    w = w - (Z.T @ err / 2 + 0.5 * w)
    assert torch.allclose(head.w_D, w, atol=1e-15) and abs(head.b + float(err.mean())) < 1e-15
    # trained longer it separates the classes; a constant feature (sd 0) standardises to 0
    head = QualityHead(lr=1.0, l2=0.0, steps=200, buffer=8)
    head.update(torch.tensor([[1.0, 0.0, 3.0], [0.0, 1.0, 3.0]]), [1.0, 0.0])
    p = head.prob(torch.tensor([[1.0, 0.0, 3.0], [0.0, 1.0, 3.0]]))
    assert p[0] > 0.9 and p[1] < 0.1 and head.w_D[2] == 0.0


def gate_run(lengths, correct=None, G=2, prune_at=3, rho=0.5, explore=0.0, key=()):
    """One request of 4 samples (target G) through the real driver; hidden state of sample j = [j, 1], head
    w = [1, 0], b = -1.5, so p_j = sigmoid(j - 1.5) = 0.18, 0.38, 0.62, 0.82."""
    eng = TokenEngine(lambda pid, j: lengths[j], max_tokens=20, hidden=lambda x, j, k: torch.tensor([j, 1.0]),
                      correct=correct)
    rule = ARRoL(prune_at=prune_at, rho=rho, explore=explore)
    rule.head.w_D, rule.head.b = torch.tensor([1.0, 0.0], dtype=torch.float64), -1.5
    rule.head.mu_D, rule.head.sd_D = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    requests, metrics, led = [Request(P0, 4)], {}, Ledger()
    gate = PruneGate(rule, requests, [G], metrics, key)
    (g,) = StepDriver(eng, led, None).generate(Wave(requests, watch=gate, hidden=True))
    return g, metrics, led, eng


def test_rule_through_the_driver_on_hand_computed_rows():
    # all four reach the checkpoint (3 tokens): m = G = 2 -> keep the highest (3) and the lowest (0)
    g, metrics, led, eng = gate_run([10, 10, 10, 10])
    assert [(r.num_tokens, r.status) for r in g.rollouts] == [(10, "done"), (10, "done")]
    assert [r.meta["arrol_h"].tolist() for r in g.rollouts] == [[0.0, 1.0], [3.0, 1.0]]
    assert [round(r.meta["arrol_p"], 2) for r in g.rollouts] == [0.18, 0.82]
    assert [r.meta["arrol_high"] for r in g.rollouts] == [False, True]  # kept for a low and a high score
    assert metrics == {"arrol/rows": 4.0, "arrol/decided": 1.0, "arrol/pruned": 2.0}
    assert eng.decoded == 10 + 10 + 3 + 3 == led.count() == led.budget_tokens()
    assert led.count(fate="pruned") == 6 and led.count_rollouts(fate="pruned") == 2
    # sample 1 ends (EOS) at 2 tokens, before the checkpoint: kept, so m = 2 - 1 = 1 slot, the highest (3)
    g, metrics, led, _ = gate_run([10, 2, 10, 10])
    assert [(r.num_tokens, "arrol_h" in r.meta) for r in g.rollouts] == [(2, False), (10, True)]
    assert metrics["arrol/pruned"] == 2.0 and led.count(fate="pruned") == 6
    # rho = 0: the two lowest; rows that all end before prune_at are never decided (the group keeps all 4)
    g, *_ = gate_run([10, 10, 10, 10], rho=0.0)
    assert [r.meta["arrol_h"][0].item() for r in g.rollouts] == [0.0, 1.0]
    g, metrics, *_ = gate_run([3, 2, 2, 3], prune_at=4)
    assert g.n == 4 and "arrol/decided" not in metrics


def test_explored_rows_run_on_as_labels():
    """explore = 0.5 with the key (5, 0, 1): the rows the rule prunes (1, 2) draw u = Uniform(rng([5, 0, 1,
    0, j])) = 0.56 (pruned) and 0.07 (runs on, labelled, on neither side)."""
    assert [round(np.random.default_rng([5, 0, 1, 0, j]).random(), 2) for j in (1, 2)] == [0.56, 0.07]
    g, metrics, led, _ = gate_run([10, 10, 10, 10], explore=0.5, key=(5, 0, 1))
    assert [(r.num_tokens, r.meta["arrol_h"][0].item(), r.meta["arrol_high"]) for r in g.rollouts] == \
        [(10, 0.0, False), (10, 2.0, None), (10, 3.0, True)]
    assert metrics == {"arrol/rows": 4.0, "arrol/decided": 1.0, "arrol/pruned": 1.0, "arrol/explored": 1.0}
    assert led.count(fate="pruned") == 3


def test_finish_scores_and_trains_the_head():
    """Scores 0.8, 0.6, 0.5, 0.4 with correctness 1, 0, 1, 0, rows 0 and 1 kept on the high side: one of them
    correct -> precision 1/2; of the two correct rows one is high -> recall 1/2; correct scores 0.8, 0.5 vs
    wrong 0.6, 0.4: 3 of 4 pairs ordered -> auc 3/4."""
    rule = ARRoL(lr=1.0, l2=0.0, head_steps=1)
    ctx = make_ctx(pool_size=2, B=1, n=4)
    rows = [R(0, c) for c in (1, 0, 1, 0)]
    for k, (r, p) in enumerate(zip(rows, (0.8, 0.6, 0.5, 0.4))):
        r.meta.update(arrol_h=torch.tensor([1.0, float(k)]), arrol_p=p, arrol_high=k < 2)
    g = Group(P0, rows + [R(0, 1)])  # a row that was never scored (it ended before the checkpoint)
    ctx.groups = {0: g}
    ctx.metrics = {"arrol/rows": 8.0, "arrol/pruned": 3.0}
    assert rule.finish([g], ctx) == [g]
    assert ctx.metrics["arrol/precision"] == 0.5 and ctx.metrics["arrol/recall"] == 0.5
    assert ctx.metrics["arrol/auc"] == 0.75
    assert ctx.metrics["arrol/labels"] == 4.0 and ctx.metrics["arrol/pruned_frac"] == 3 / 8
    assert all(not any(k.startswith("arrol") for k in r.meta) for r in g.rollouts)  # used once
    # one step from zero on z = standardised [1, k]: the constant feature is 0, z_k = (k - 1.5) / sqrt(1.25);
    # w = -Z^T (0.5 - y) / 4 with y = 1, 0, 1, 0: -(0.75 - 0.25 - 0.25 + 0.75) / 4 / sqrt(1.25)
    w = rule.head.w_D.tolist()
    assert w[0] == 0.0 and abs(w[1] + 0.25 / 1.25 ** 0.5) < 1e-12


def test_head_figures_only_when_defined():
    p, high = np.array([0.5, 0.5, 0.2, 0.9, 0.1]), np.array([True, False, False, True, False])
    correct = np.array([True, False, False, False, True])
    # the AUC pairs rows of one group only: group 0 has (0.5 vs 0.5: 1/2) and (0.5 vs 0.2: 1); the
    # correct 0.1 of group 1 loses to its wrong 0.9 (0); across groups nothing is compared
    f = head_figures(p, high, correct, np.array([0, 0, 0, 1, 1]))
    assert f == {"arrol/precision": 0.5, "arrol/recall": 0.5, "arrol/auc": 0.5}
    # rows the rule did not choose (explored) count in the AUC only: precision and recall are over rows 0, 1
    ruled = np.array([True, True, False, False, False])
    assert head_figures(p, high, correct, np.array([0, 0, 0, 1, 1]), ruled) == \
        {"arrol/precision": 1.0, "arrol/recall": 1.0, "arrol/auc": 0.5}
    assert head_figures(np.array([0.3]), np.array([False]), np.array([False]), np.array([0])) == {}
    assert head_figures(np.array([0.3, 0.1]), np.array([True, False]), np.array([True, False]),
                        np.array([0, 1])) == {"arrol/precision": 1.0, "arrol/recall": 1.0}


def test_options_are_checked_with_one_line_errors():
    for kw, msg in [({"ratio": 0.5}, "ratio >= 1"), ({"ratio": True}, "ratio >= 1"), ({"prune_at": 0}, "prune_at"),
                    ({"prune_at": 2.5}, "prune_at"), ({"rho": 1.5}, "0 <= rho <= 1"), ({"lr": 0}, "lr > 0"),
                    ({"l2": -1}, "l2 >= 0"), ({"head_steps": -1}, "head_steps"), ({"buffer": 0}, "buffer >= 1"),
                    ({"explore": 1.0}, "0 <= explore < 1")]:
        with pytest.raises(ValueError, match=msg) as e:
            ARRoL(**kw)
        assert "\n" not in str(e.value) and str(e.value).startswith("arrol:")
    with pytest.raises(ValueError, match=r"april \(Partial\) does not compose with arrol \(Watcher\): a resumed row would lose its in-flight state"):
        build_planner("april+arrol", 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"spec-rl \(Speculator\) does not compose with arrol \(Watcher\): the rows it runs its own way never"):
        build_planner("arrol+spec-rl", 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="arrol needs in-flight control"):
        build_planner("ar3po+arrol", 4, np.random.default_rng(0)).require("a host", sampling=True, policy=True)


OPTS = {"prune_at": 3, "ratio": 2.0, "head_steps": 5}


def planner_steps(planner, ctx, eng, steps):
    """Per step: the batch as (prompt id, [tokens]) and the metrics."""
    out = []
    for _ in range(steps):
        batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
        out.append(([(g.prompt.id, [r.num_tokens for r in g.rollouts]) for g in batch.groups], dict(ctx.metrics)))
        ctx.step += 1
    return out


def planner_run(spec="arrol", seed=0, steps=2, **opts):
    """Over 6 prompts whose samples want 2..13 tokens; the hidden state knows the sample's index and the
    prompt, and correctness follows the sample index, so the head has something to learn."""
    ctx = make_ctx(pool_size=6, B=3, n=4, seed=seed)
    eng = TokenEngine(lambda pid, j: 2 + (2 * pid + 3 * j) % 12, correct=lambda x, j: j % 2 == 1,
                      hidden=lambda x, j, k: torch.tensor([j % 2, x / 6, 1.0]))
    planner = build_planner(spec, 6, ctx.rng, {"arrol": {**OPTS, **opts}})
    return planner_steps(planner, ctx, eng, steps), ctx, eng, planner


@pytest.mark.parametrize("spec", ["arrol", "ar3po+arrol", "greso+arrol"])
def test_planner_steps_prune_toward_g_and_balance_the_ledger(spec):
    out, ctx, eng, planner = planner_run(spec, steps=3)
    led = ctx.ledger
    pruned = sum(m.get("arrol/pruned", 0) for _, m in out)
    assert pruned > 0 and all(0 <= m.get("arrol/pruned_frac", 0) <= 0.5 for _, m in out)
    assert led.count_rollouts(fate="pruned") == pruned and led.count(fate="pruned") == 3 * pruned
    assert led.count() == eng.decoded == led.budget_tokens() and led.count(fate="open") == 0
    assert led.count(fate="trained") + led.count(fate="discarded") + led.count(fate="pruned") == eng.decoded
    if spec == "arrol":  # n = 4 started 8; a request keeps G = 4 rows (plus any that ended before 3 tokens)
        assert all(len(rows) == 4 or min(rows) < 3 for batch, _ in out for _, rows in batch)
        assert planner.components[0].head.w_D is not None  # trained on the survivors
        assert all(m["arrol/labels"] > 0 and "arrol/recall" in m and "arrol/auc" in m for _, m in out)


@pytest.mark.parametrize("spec,explore", [("arrol", 0.0), ("ar3po+arrol", 0.0), ("arrol", 0.4)])
def test_runs_are_reproducible_and_resume_exactly(spec, explore):
    a, *_ = planner_run(spec, seed=0, steps=3, explore=explore)
    b, *_ = planner_run(spec, seed=0, steps=3, explore=explore)
    assert a == b
    if explore:  # the draws follow the seed, and some rows were explored
        c, *_ = planner_run(spec, seed=1, steps=3, explore=explore)
        assert a != c and sum(m.get("arrol/explored", 0) for _, m in a) > 0
    first, ctx, eng, planner = planner_run(spec, seed=0, steps=1, explore=explore)
    state, ctx2, eng2 = copy.deepcopy(planner.state_dict()), copy.deepcopy(ctx), copy.deepcopy(eng)
    rng_state = copy.deepcopy(ctx.rng.bit_generator.state)
    resumed = build_planner(spec, 6, ctx2.rng, {"arrol": {**OPTS, "explore": explore}})
    resumed.load_state_dict(state)
    ctx2.rng.bit_generator.state = rng_state  # as a checkpoint restores it (building drew a permutation)
    head = resumed.components[-1].head
    assert head.w_D is not None and torch.equal(head.w_D, planner.components[-1].head.w_D)
    assert first + planner_steps(resumed, ctx2, eng2, 2) == a


@pytest.mark.parametrize("kind", ["tiny", "hf"])
def test_torch_engine_hidden_states_match_a_full_forward_and_change_nothing(kind, tmp_path):
    """submit(hidden=True): the same tokens and log-probs as a plain run; each running row's hidden state
    is the last layer's at its last token, as the learner's full forward computes it, also after another
    row has left the batch. For the tiny model and a transformers Llama (its cache, its hidden_states)."""
    from rollwise.generate.torch_engine import TorchEngine
    from rollwise.policy.policy import Policy
    from test_engine_policy import hf_checkpoint, no_eos, tiny_policy

    pol = no_eos(tiny_policy() if kind == "tiny" else Policy.load(hf_checkpoint(tmp_path)))
    ps = [Prompt(0, "12+3=", "15"), Prompt(1, "100+250=", "350")]

    def requests():
        return [Request(ps[0], 3, id=0), Request(ps[1], 2, id=1)]

    def check(seen, k):
        for rid, p in enumerate(ps):
            for toks, h_D in [s for s in seen[rid] if s is not None]:
                ids = pol.encode(p.text) + toks.tolist()
                _, h_BTD = pol.full_logits(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), True)
                assert len(toks) == k and torch.allclose(h_BTD[0, -1], h_D, atol=1e-5)

    plain = run_sync(TorchEngine(pol, max_new_tokens=6, seed=3), requests())
    eng = TorchEngine(pol, max_new_tokens=6, seed=3)
    eng.submit(requests(), hidden=True)
    for k in (1, 2, 3):
        eng.poll(max_steps=1)
        check(eng.peek([0, 1], hidden=True), k)
    done = {e.request.id: e.group.rollouts for e in eng.poll() if hasattr(e, "group")}
    assert all(torch.equal(a.token_ids_T, b.token_ids_T) and torch.equal(a.logprobs_T, b.logprobs_T)
               for e in plain for a, b in zip(done[e.request.id], e.group.rollouts))
    eng = TorchEngine(pol, max_new_tokens=6, seed=3)
    eng.submit(requests(), hidden=True)
    eng.poll(max_steps=2)
    eng.stop(0, [1], "pruned")  # a row leaves: the others' hidden states stay aligned
    eng.poll(max_steps=1)
    seen = eng.peek([0, 1], hidden=True)
    assert seen[0][1] is None and sum(s is not None for s in seen[0] + seen[1]) == 4
    check(seen, 3)
    other = TorchEngine(pol, max_new_tokens=6, seed=3)  # submitted without hidden: it kept none to show
    other.submit(requests())
    other.poll(max_steps=1)
    with pytest.raises(ValueError, match="submit them with hidden=True"):
        other.peek([0], hidden=True)


def test_engines_without_hidden_states_are_refused_by_name():
    from fakes import Engine

    class NoHidden(Engine):
        capabilities = (InFlight(), Drafts())  # no HiddenStates

    gate = PruneGate(ARRoL(), [Request(P0, 2)], [1], {})
    with pytest.raises(ValueError, match="does not expose hidden states in flight"):
        StepDriver(NoHidden({0: 0.5}), Ledger(), None).generate(Wave([Request(P0, 2)], watch=gate, hidden=True))
    from rollwise.generate.vllm_engine import VLLMEngine

    # vLLM has neither peek/stop nor hidden states: refused by name before any submit
    with pytest.raises(ValueError, match="engine VLLMEngine does not offer in-flight control"):
        StepDriver(object.__new__(VLLMEngine), Ledger(), None).generate(Wave([Request(P0, 2)], watch=gate, hidden=True))


def trainer(tmp_path, out, planner, steps, **opts):
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(tmp_path / out), "steps": steps, "eval_every": 0,
                             "planner": planner, "planner_options": {"arrol": {"prune_at": 2, **opts}}})
    return Trainer(cfg)


def strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.mark.parametrize("spec", ["arrol", "ar3po+arrol"])
def test_trainer_runs_arrol_on_the_embedded_default(tmp_path, small_policy, spec):
    """Two steps through the Trainer on the arithmetic task (answers of a few tokens: the checkpoint at 2,
    which every row of n = 4 -> 8 reaches, so half are pruned): pruned tokens and the head's figures are in
    the metrics, the ledger balances, and a run resumed from
    its step-1 checkpoint (the head's weights and replay in it) continues exactly."""
    tr = trainer(tmp_path, "a", spec, 2)
    rows = strip(tr.run())
    led = tr.ledger
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["arrol/pruned"] > 0 and 0 < r["arrol/pruned_frac"] < 1 for r in rows)
    # the survivors label the head (the briefly warm-started base rarely answers right: recall, which needs
    # a correct label, may be missing; precision is 0 when every predicted positive was wrong)
    assert all(r["arrol/labels"] > 0 and 0 <= r.get("arrol/precision", 0) <= 1 for r in rows)
    assert rows[-1]["tok/train/pruned/decoded"] == led.count("train", "pruned") > 0
    assert led.count(fate="open") == 0 and led.count("train") == led.budget_tokens() == rows[-1]["tokens"]
    trainer(tmp_path, "b", spec, 1).run()
    assert strip(trainer(tmp_path, "b", spec, 2).run()) == rows


def test_async_mode_refuses_arrol_by_name(tmp_path, small_policy):
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "a"), "steps": 1, "eval_every": 0, "mode": "async",
                             "planner": "arrol"})
    with pytest.raises(ValueError, match="--mode async .* cannot run planner 'arrol': arrol needs in-flight"):
        Trainer(cfg).run()


def composed_run(order):
    """ARRoL (G = 2, prune_at 5, p_j = sigmoid(j - 1.5) as in gate_run) with DUET's abort (h_abort 0,
    grace 3, q ~ 0) over one request of 4 samples of 10 tokens. Samples 0, 2, 3 write the marker 99 at
    position 2 (its end at 3: DUET stops them at 3 + 3 = 6 tokens); sample 1 never does, so DUET's gate
    prunes it at 4 tokens (its draw u >= q). At 5 tokens ARRoL sees 3 rows running and none finished:
    m = G = 2 slots, the highest (3) and the lowest (0) are kept, 2 is pruned. Counting DUET's pruned row
    as finished would leave one slot."""
    eng = TokenEngine(lambda pid, j: 10, max_tokens=20, hidden=lambda x, j, k: torch.tensor([j, 1.0]),
                      script=lambda pid, j: None if j == 1 else [0, 1, 99])
    rule = ARRoL(prune_at=5)
    rule.head.w_D, rule.head.b = torch.tensor([1.0, 0.0], dtype=torch.float64), -1.5
    rule.head.mu_D, rule.head.sd_D = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    duet = DUETAbort(h_abort=0, grace=3, q=1e-9)
    requests, metrics, led = [Request(P0, 4)], {}, Ledger()
    gates = {"arrol": PruneGate(rule, requests, [2], metrics), "duet": AbortGate(duet, requests, [99], (3, 0, 1), metrics)}
    watch = Watchers([(gates[k], k == "arrol") for k in order])  # ARRoL's Watcher reads hidden states
    assert watch.hidden
    (g,) = StepDriver(eng, led, None).generate(Wave(requests, watch=watch, hidden=True))
    return g, metrics, led, eng


@pytest.mark.parametrize("order", [("arrol", "duet"), ("duet", "arrol")])
def test_arrol_with_duet_abort_by_hand(order):
    assert np.random.default_rng([3, 0, 1, 0, 1]).random() >= 1e-9  # sample 1's draw: pruned
    g, metrics, led, eng = composed_run(order)
    assert [(r.num_tokens, r.status, r.finish_reason) for r in g.rollouts] == [(6, "done", "stop")] * 2
    assert [r.meta["arrol_h"][0].item() for r in g.rollouts] == [0.0, 3.0]  # ARRoL's survivors, then DUET's stop
    assert metrics == {"arrol/rows": 4.0, "arrol/decided": 1.0, "arrol/pruned": 1.0, "duet/pruned": 1.0,
                       "duet/stopped": 2.0}
    assert eng.decoded == 6 + 4 + 5 + 6 == led.count() and led.count(fate="pruned") == 4 + 5
    assert led.count_rollouts(fate="pruned") == 2


def test_watchers_show_a_watcher_without_hidden_the_tokens_only_and_end_a_sample_once():
    seen = []

    class Tokens:
        def __call__(self, running):
            seen.append(running)
            return [Decision(0, 0, "pruned")]

    class Pairs(WaveWatch):
        def __init__(self):
            self.told = []

        def __call__(self, running):
            assert running[0][0] is None and isinstance(running[0][1], tuple)  # ended by Tokens in this call
            return [Decision(0, 0, "pruned"), Decision(0, 1, "keep", weight=2.0)]

        def ended_elsewhere(self, i, j, action):
            self.told.append((i, j, action))

    pairs = Pairs()
    t = torch.tensor([1, 2])
    out = Watchers([(Tokens(), False), (pairs, True)])({0: [(t, torch.zeros(2)), (t, torch.ones(2))]})
    assert [torch.equal(x, t) for x in seen[0][0]] == [True, True]  # tokens, not (tokens, h) pairs
    assert out == [Decision(0, 0, "pruned"), Decision(0, 1, "keep", weight=2.0)]  # sample 0 ended once
    assert pairs.told == [(0, 0, "pruned")]


def test_arrol_with_duet_abort_composes_in_the_planner_and_balances_the_ledger():
    ctx = make_ctx(pool_size=6, B=3, n=4, seed=0)
    eng = TokenEngine(lambda pid, j: 2 + (2 * pid + 3 * j) % 12, correct=lambda x, j: j % 2 == 1,
                      hidden=lambda x, j, k: torch.tensor([j % 2, x / 6, 1.0]))
    opts = {"arrol": OPTS, "duet-abort": {"h_abort": 4, "grace": 1, "q": 0.5}}
    planner = build_planner("arrol+duet-abort", 6, ctx.rng, opts)
    out = planner_steps(planner, ctx, eng, 3)
    led = ctx.ledger
    assert sum(m.get("arrol/pruned", 0) for _, m in out) > 0 and sum(m.get("duet/pruned", 0) for _, m in out) > 0
    assert led.count() == eng.decoded == led.budget_tokens() and led.count(fate="open") == 0
    assert led.count(fate="trained") + led.count(fate="discarded") + led.count(fate="pruned") == eng.decoded
    assert all(len(rows) <= 4 or min(rows) < 3 for batch, _ in out for _, rows in batch)  # at most G survivors
    ctx2 = make_ctx(pool_size=6, B=3, n=4, seed=0)
    again = planner_steps(build_planner("arrol+duet-abort", 6, ctx2.rng, opts), ctx2,
                          TokenEngine(lambda pid, j: 2 + (2 * pid + 3 * j) % 12, correct=lambda x, j: j % 2 == 1,
                                      hidden=lambda x, j, k: torch.tensor([j % 2, x / 6, 1.0])), 3)
    assert again == out
