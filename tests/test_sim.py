"""Population simulator: model invariants, exact ledger accounting, timing, planners, CLI."""
import copy
import dataclasses
import json

import numpy as np
import pytest

from rollwise.core import registry
from rollwise.core.ledger import Ledger, move_group
from rollwise.core.types import Prompt, Request
from rollwise.sim.dynamics import Dynamics, DynamicsConfig
from rollwise.core.types import LightRollout
from rollwise.generate.engine import run_sync
from rollwise.sim.engine import SimEngine, SimPool
from rollwise.sim.population import Population, PopulationConfig
from rollwise.sim.runner import SimConfig, Simulator
from rollwise.sim.timing import TimingConfig, TimingModel, makespan

VOLATILE = ("elapsed_s", "cpu_s", "steps_per_s", "peak_mem_mb")


def _sim(planner="uniform", prompts=3000, steps=0, batch=16, n=8, seed=0, **kw):
    return Simulator(SimConfig(prompts=prompts, steps=steps, batch=batch, n=n, planner=planner, seed=seed, **kw))


def _stable(summary):
    return {k: v for k, v in summary.items() if k not in VOLATILE}


# ---- dynamics ---------------------------------------------------------------------------------
def _state(pop):
    return pop.G, pop.s.copy(), pop.theta.copy(), pop.theta_step.copy()


def test_zero_variance_groups_never_move_the_policy():
    pop = Population(1000, seed=1)
    dyn = Dynamics(pop)
    ref = copy.deepcopy(pop)
    ref_dyn = Dynamics(ref)
    ids = np.arange(200)
    n = np.full(200, 16)
    c = np.where(ids % 2 == 0, 0, 16)  # all wrong / all right: zero variance
    out = dyn.update(5, ids, n, c, batch_size=200)
    ref_dyn.update(5, [], [], [], batch_size=200)  # the same step with nothing trained
    assert out["informative_groups"] == 0 and out["signal"] == 0.0
    for a, b in zip(_state(pop), _state(ref)):
        np.testing.assert_array_equal(a, b)
    # and with forgetting off, the skills are exactly where they started
    pop2 = Population(1000, seed=1)
    before = _state(pop2)
    Dynamics(pop2, DynamicsConfig(forget=0.0)).update(0, ids, n, c, batch_size=200)
    for a, b in zip(_state(pop2), before):
        np.testing.assert_array_equal(a, b)


def test_informative_groups_move_the_prompt_most_then_its_cluster():
    pop = Population(5000, PopulationConfig(clusters=4), seed=2)
    dyn = Dynamics(pop, DynamicsConfig(forget=0.0))
    k0 = np.flatnonzero(pop.cluster == 0)
    trained, untouched_same = k0[:100], k0[100:]
    other = np.flatnonzero(pop.cluster != 0)
    z0 = pop.logits(np.arange(5000), 0)
    dyn.update(0, trained, np.full(100, 16), np.full(100, 8), batch_size=100)
    dz = pop.logits(np.arange(5000), 1) - z0
    assert (dz[trained] > dz[untouched_same[0]]).all()  # memorised: the prompt itself gains most
    np.testing.assert_allclose(dz[untouched_same], dz[untouched_same[0]])  # transfer within the cluster
    assert dz[untouched_same[0]] > dz[other[0]] > 0  # the cluster more than the rest; all a little
    # u_g = (n/n_ref) 2 q (1 - q): zero at q in {0, 1}, max at q = 1/2
    u = Dynamics.signal([16, 16, 16, 8, 0], [0, 8, 16, 4, 0], 16)
    np.testing.assert_allclose(u, [0.0, 0.5, 0.0, 0.25, 0.0])
    # GRPO's std-normalised mass: (n/n_ref) 2 sqrt(q (1 - q)); one success in 8 gets 3x the mean-centred
    u = Dynamics.signal([16, 8, 8, 8], [8, 1, 0, 8], 16, "std")
    np.testing.assert_allclose(u, [1.0, 0.5 * 2 * np.sqrt(7 / 64), 0.0, 0.0])
    assert u[1] / Dynamics.signal([8], [1], 16)[0] == pytest.approx(np.sqrt(7 / 64) / (7 / 64))
    with pytest.raises(ValueError, match="signal must be"):
        Dynamics.signal([8], [1], 16, "rloo")


def test_rows_normalisation_divides_a_step_by_its_informative_rows_plus_r0():
    def global_gain(n, correct, normalize="slot", r0=0.0):
        pop = Population(100, seed=3)
        cfg = DynamicsConfig(forget=0.0, eta_global=1.0, normalize=normalize, rows_r0=r0)
        Dynamics(pop, cfg).update(0, np.arange(len(n)), np.asarray(n), np.asarray(correct), batch_size=10)
        return pop.G - pop.skill0

    # 10 groups of 16 with q = 1/2: u = 0.5 each; slot: eta / B * sum u = 0.5
    full = ([16] * 10, [8] * 10)
    assert global_gain(*full) == pytest.approx(0.5)
    # rows (r0 = 0): scaled by B n_ref / R = 10 * 16 / 160 = 1, so equal here ...
    assert global_gain(*full, "rows") == pytest.approx(0.5)
    # ... but half the informative groups give the same step under rows (a per-row mean) and half under slot
    half = ([16] * 10, [8] * 5 + [0] * 5)
    assert global_gain(*half) == pytest.approx(0.25)
    assert global_gain(*half, "rows") == pytest.approx(0.5)
    # r0 = R: half the length of the pure per-row mean
    assert global_gain(*half, "rows", r0=80.0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="normalize must be"):
        global_gain(*full, "tokens")


def test_prompt_memory_is_forgotten_lazily():
    pop = Population(100, seed=3)
    dyn = Dynamics(pop, DynamicsConfig(forget=0.0, forget_prompt=0.01))
    dyn.update(0, [7], [16], [8], batch_size=1)
    th0 = pop.theta_at(np.array([7]), 0)[0]
    assert th0 > 0
    np.testing.assert_allclose(pop.theta_at(np.array([7]), 100)[0], th0 * 0.99 ** 100)


# ---- outcomes and lengths ----------------------------------------------------------------------
def test_lengths_long_tailed_wrong_longer_and_correlated_within_a_prompt():
    pop = Population(20000, PopulationConfig(max_len=10 ** 6), seed=4)
    rng = np.random.default_rng(0)
    ids = np.arange(20000)
    ns = np.full(20000, 8)
    gidx, correct, length, ent, truncated, p = pop.draw(ids, ns, 0, rng)
    L = length.astype(np.float64)
    med, mean = np.median(L), L.mean()
    assert mean > 1.15 * med  # right-skewed
    assert np.quantile(L, 0.99) > 4 * med  # a long tail
    skew = ((L - mean) ** 3).mean() / L.std() ** 3
    assert skew > 2
    assert L[~correct].mean() > 1.2 * L[correct].mean()  # wrong answers are longer
    assert ent[~correct].mean() > ent[correct].mean()
    # lengths of one prompt's samples are correlated (same prompt, shared draw)
    logl = np.log(L).reshape(20000, 8)
    a, b = logl[:, 0], logl[:, 1]
    assert np.corrcoef(a, b)[0, 1] > 0.3
    # outcomes follow p
    assert abs(correct.mean() - p.mean()) < 0.01


def test_truncated_rollouts_are_wrong_and_marked():
    pop = Population(200, PopulationConfig(max_len=300, median_len=300), seed=5)
    eng = SimEngine(pop, TimingModel(), np.random.default_rng(0))
    groups = [e.group for e in run_sync(eng, [Request(Prompt(i, "", ""), 8, id=i) for i in range(200)])]
    rs = [r for g in groups for r in g.rollouts]
    cut = [r for r in rs if r.finish_reason == "length"]
    assert cut and all(r.num_tokens == 300 and not r.correct for r in cut)
    assert max(r.num_tokens for r in rs) == 300


# ---- runs --------------------------------------------------------------------------------------
def test_reproducible_by_seed():
    a, b, c = _sim("greso", seed=3), _sim("greso", seed=3), _sim("greso", seed=4)
    sa, sb, sc = (_stable(s.run(25)) for s in (a, b, c))
    assert sa == sb
    for k, v in a.history.log().items():
        np.testing.assert_array_equal(v, b.history.log()[k])
    assert sa != sc


def test_steps_touch_only_the_batch_rows():
    sim = _sim("greso", prompts=100_000, batch=64)
    sim.run(3)
    cols = ("visits", "last_step", "last_n", "total_correct", "easy_streak", "hard_streak", "last_mean_len")
    before = {k: getattr(sim.history, k).copy() for k in cols}
    theta, theta_step = sim.pop.theta.copy(), sim.pop.theta_step.copy()
    step = sim.step
    sim.train_step()
    log = sim.history.log()
    touched = np.zeros(100_000, bool)
    touched[log["prompt"][log["step"] == step]] = True
    assert 64 <= touched.sum() < 64 * 6
    for k in cols:
        np.testing.assert_array_equal(getattr(sim.history, k)[~touched], before[k][~touched])
    np.testing.assert_array_equal(sim.pop.theta[~touched], theta[~touched])
    np.testing.assert_array_equal(sim.pop.theta_step[~touched], theta_step[~touched])
    assert (sim.history.last_step[touched] == step).all()


def test_oracle_wastes_no_more_groups_than_chance():
    """Oracle trains only on prompts measured 0 < p < 1; a train group of such a prompt is still
    zero-variance by chance with probability p^n + (1-p)^n. The observed count must match that."""
    sim = _sim("oracle", prompts=5000, batch=32, n=8)
    expected, var, observed, total = 0.0, 0.0, 0, 0
    orig = sim.engine.poll

    def poll(max_steps=None):
        events = orig(max_steps)
        groups = [e.group for e in events]
        if events and events[0].request.purpose == "train":
            nonlocal expected, var, observed, total
            p = sim.engine.last_p
            n = np.array([g.n for g in groups])
            pz = p ** n + (1 - p) ** n
            expected += pz.sum()
            var += (pz * (1 - pz)).sum()
            observed += sum(g.zero_variance for g in groups)
            total += len(groups)
        return events

    sim.engine.poll = poll
    out = sim.run(40)
    assert total == 40 * 32
    assert observed <= expected + 4 * np.sqrt(var) + 1
    assert abs(observed - expected) <= 4 * np.sqrt(var) + 1
    uni = _sim("uniform", prompts=5000, batch=32, n=8).run(40)
    assert out["zero_var_frac"] < 0.75 * uni["zero_var_frac"]  # the rest is chance, as above
    assert out["tokens_by_purpose"]["oracle"] > 0 and out["tokens"] == out["tokens_by_purpose"]["train"]


def test_counts_ledger_equals_object_ledger():
    """Charging and settling by counts gives exactly the ledger of per-rollout objects."""
    def run(materialise):
        sim = _sim("dapo", batch=16, n=8, seed=7)
        if materialise:  # every group materialised as it comes back: the driver then counts rollout objects
            orig = sim.engine.poll

            def poll(max_steps=None):
                events = orig(max_steps)
                for e in events:
                    e.group.rollouts
                    assert e.group.materialised
                return events

            sim.engine.poll = poll
        return sim, sim.run(15)

    (s1, a), (s2, b) = run(False), run(True)
    assert s1.ledger.state_dict()["rollouts"] == s2.ledger.state_dict()["rollouts"]
    assert s1.ledger.tokens == s2.ledger.tokens and s1.ledger.prompt_tokens == s2.ledger.prompt_tokens
    assert _stable(a) == _stable(b)
    assert a["tokens_by_purpose"]["discarded"] > 0  # DAPO dropped some zero-variance groups
    assert s1.ledger.count(fate="open") == 0  # every rollout's fate is settled at the end of its step
    # every rollout generated is on the books: train + discarded = all visits in the history
    log = s1.history.log()
    assert a["rollouts"] == int(log["n"].sum())
    np.testing.assert_allclose(a["tokens"], (log["mean_len"].astype(np.float64) * log["n"]).sum(), rtol=1e-6)


@pytest.mark.parametrize("planner", ["uniform", "greso", "dapo"])
def test_a_step_never_builds_rollouts_for_count_level_planners(planner):
    """The driver's per-group checks (rows pruned in flight, prefixes shared in a batch) answer from
    counts: a planner that reads only counts leaves every group count-level (building 8k rollout
    objects per step made the simulator 5x slower, issue 26)."""
    sim = _sim(planner, batch=16, n=8, seed=3)
    seen, orig = [], sim.engine.poll

    def poll(max_steps=None):
        events = orig(max_steps)
        seen.extend(e.group for e in events)
        return events

    sim.engine.poll = poll
    sim.run(4)
    assert len(seen) >= 4 * 16 and not any(g.materialised for g in seen)
    g = seen[0]  # the same answers once materialised
    before = (g.statuses(), g.prefixes())
    g.rollouts
    assert g.materialised and (g.statuses(), g.prefixes()) == before == ({"done"}, [])


def test_simgroup_behaves_like_a_group():
    pop = Population(50, seed=8)
    led = Ledger()
    eng = SimEngine(pop, TimingModel(), np.random.default_rng(1))
    g, h = [e.group for e in run_sync(eng, [Request(Prompt(3, "", ""), 6, id=0), Request(Prompt(3, "", ""), 4, id=1)])]
    led.charge([g, h])
    n, c, t, e = g.n + h.n, g.num_correct + h.num_correct, g.tokens + h.tokens, g.mean_entropy * 6 + h.mean_entropy * 4
    g.extend(h)
    assert (g.n, g.num_correct, g.tokens) == (n, c, t) and not g.materialised
    acc = {}
    move_group(h, "open", "open", acc)
    assert h.n == 0 and acc == {}  # the stage's samples moved: nothing is counted twice
    zv = g.zero_variance
    led.settle([g, h], "open", {"train": "discarded"})
    assert led.count_rollouts("train", "discarded") == 10 and led.count("train", "discarded") == t
    assert led.count(fate="open") == 0
    rs = g.rollouts  # materialise: the same numbers, per rollout
    assert g.materialised and len(rs) == n and sum(r.correct for r in rs) == c
    assert sum(r.num_tokens for r in rs) == t and all(r.fate == "discarded" and r.purpose == "train" for r in rs)
    assert g.zero_variance == zv and g.mean_entropy == pytest.approx(e / n)
    assert sorted(g.rewards) == sorted([1.0] * c + [0.0] * (n - c))
    r2 = dataclasses.replace(rs[0], token_ids_T=rs[0].token_ids_T.clone())  # AR3PO's reuse path
    assert isinstance(r2, LightRollout) and r2.num_tokens == rs[0].num_tokens
    g.rollouts = rs[:2]
    assert g.n == 2 and g.tokens == rs[0].num_tokens + rs[1].num_tokens
    pool = SimPool(10)
    assert len(pool) == 10 and pool[-1].id == 9 and [p.id for p in pool[2:4]] == [2, 3]
    with pytest.raises(IndexError):
        pool[10]


def test_every_planner_runs_or_is_refused_clearly():
    refused = set()
    for e in registry.entries("planner"):
        for need, why in (("needs_policy", "needs the policy"), ("needs_inflight", "needs in-flight control"),
                          ("needs_resume", "needs an engine that continues rows")):
            if getattr(e.obj(), need):
                with pytest.raises(ValueError, match=f"the simulator cannot run planner '{e.name}'.*{why}"):
                    _sim(e.name, prompts=300)
                refused.add(e.name)
        if e.name in refused:
            continue
        out = _sim(e.name, prompts=300, batch=8, n=4).run(3)
        assert out["steps"] == 3 and out["tokens"] + out["tokens_by_purpose"]["oracle"] > 0, e.name
    assert refused == {"hive", "dots", "duet-abort", "arrol", "spec-rl", "treepo", "das", "pcl"}  # statistics, tokens, a policy
    out = _sim("greso+ar3po", prompts=300, batch=8, n=4).run(3)
    assert out["steps"] == 3


def test_learning_moves_heldout_accuracy():
    sim = _sim("uniform", prompts=2000, batch=64, n=8)
    out = sim.run(60)
    assert out["final_acc"] > out["init_acc"] + 0.01


# ---- timing ------------------------------------------------------------------------------------
def _brute_force_decode(lengths, prompt_len, slots, cfg):
    """Per-iteration simulation of continuous batching (the closed form must equal it)."""
    queue = list(range(len(lengths)))
    active = {}  # index -> tokens decoded so far
    t, iters = 0.0, 0
    while queue or active:
        while queue and len(active) < slots:
            active[queue.pop(0)] = 0
        ctx = sum(prompt_len[j] + k for j, k in active.items())
        t += cfg.iter_s + cfg.token_s * len(active) + cfg.kv_s * ctx
        iters += 1
        for j in list(active):
            active[j] += 1
            if active[j] == lengths[j]:
                del active[j]
    return t, iters


@pytest.mark.parametrize("slots", [3, 50])
def test_timing_closed_form_matches_per_iteration_simulation(slots):
    rng = np.random.default_rng(slots)
    L = rng.integers(1, 60, 20)
    P = rng.integers(5, 30, 20).astype(np.float64)
    cfg = TimingConfig(engines=1, concurrency=slots, iter_s=1e-3, token_s=1e-4, kv_s=1e-6, prefill_s_per_token=0.0)
    t = TimingModel(cfg).round(L, P, np.zeros(20))
    want, iters = _brute_force_decode(L.tolist(), P.tolist(), slots, cfg)
    assert t.makespan == iters == makespan(L, slots)
    assert t.seconds == pytest.approx(want)


def test_long_tail_stalls_the_round():
    cfg = TimingConfig(engines=2, concurrency=64)
    tm = TimingModel(cfg)
    even = np.full(128, 1000)
    tail = np.full(128, 500)
    tail[0] = even.sum() - tail[1:].sum()  # same tokens, one very long rollout
    P = np.full(128, 100.0)
    te, tt = tm.round(even, P, P / 8), tm.round(tail, P, P / 8)
    assert te.tokens == tt.tokens
    assert tt.seconds > 2 * te.seconds and tt.util < 0.1 < te.util
    assert tm.round(even[:64], P[:64], P[:64] / 8).seconds < te.seconds


# ---- CLI ---------------------------------------------------------------------------------------
def test_cli_prints_one_json_line(capsys, tmp_path):
    from rollwise.sim.cli import main

    rows = tmp_path / "rows.jsonl"
    rc = main(["--prompts", "2000", "--steps", "6", "--batch", "8", "--n", "4", "--planner", "greso",
               "--clusters", "4", "--seed", "2", "--quiet", "--eval-every", "3", "--rows", str(rows),
               "--set", "timing.engines=2"])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    for k in ("elapsed_s", "final_acc", "tokens", "rollouts", "zero_var_frac", "peak_mem_mb", "sim_gen_s"):
        assert k in out
    assert out["clusters"] == 4 and out["steps"] == 6
    assert len(rows.read_text().splitlines()) == 6
    assert main(["--planner", "hive", "--prompts", "100", "--quiet"]) == 2
    assert "the simulator cannot run planner 'hive': hive needs the policy itself" in capsys.readouterr().err


def test_dynamics_merges_a_prompt_trained_twice_in_one_step():
    """Two groups of one prompt in a batch (rare: the duplicate check runs every step) move the prompt
    once, by their summed signal. By hand (n = n_ref = 16, half right: u = 2 * 0.5 * 0.5 = 0.5 each):
    theta = eta_prompt * (0.5 + 0.5) = 0.6, G = eta_global / B * 1.0 = 0.004 / 2."""
    pop = Population(20, PopulationConfig(clusters=1, skill0=0.0), seed=0)
    Dynamics(pop, DynamicsConfig(forget=0.0, forget_prompt=0.0)).update(0, [5, 5], [16, 16], [8, 8], batch_size=2)
    assert pop.theta[5] == pytest.approx(0.6) and pop.G == pytest.approx(0.002)
    assert np.count_nonzero(pop.theta) == 1


def test_batch_carries_the_driver_counts_only_when_every_group_trains():
    """The driver's count of the step's groups (its visits) is handed to the batch when every group of
    the step trains (uniform), so the simulator's learner does not count again; when some are held back
    (DAPO's filter) the batch has none and the learner counts its own groups: the same figures either way."""
    from rollwise.control.base import StepContext
    from rollwise.core.history import GroupStats

    for planner, shared in (("uniform", True), ("dapo", False)):
        sim = _sim(planner, prompts=2000, batch=32, n=4)
        ctx = StepContext(0, 32, 4, sim.pool, sim.history, sim.ledger, sim.rng)
        out = sim.driver.collect(sim.planner, ctx, 0)
        assert (out.batch.stats is out.visits) is shared and (out.batch.stats is None) is not shared
        assert bool(out.assembled.rejected) is not shared  # DAPO did hold some back: the test means something
        recount = GroupStats.of(out.batch.groups, drop_empty=False)
        fresh = copy.deepcopy(sim.learner)
        stats = sim.learner.update(out.batch)
        out.batch.stats = None
        assert fresh.update(out.batch) == stats
        if shared:
            assert all(np.array_equal(getattr(out.visits, f.name), getattr(recount, f.name))
                       for f in dataclasses.fields(GroupStats))


def test_the_loop_sets_the_heap_aside_and_gives_it_back():
    """Simulator.run freezes the objects made before its loop (gc.freeze: the collector's full passes
    skip them) and unfreezes them after, also when a step fails; a caller's own freeze is left alone."""
    import gc

    from rollwise.sim.runner import heap_frozen

    before = gc.get_freeze_count()
    assert before == 0  # nothing froze the test process's heap
    seen = []
    sim = _sim()
    step = sim.train_step
    sim.train_step = lambda: (seen.append(gc.get_freeze_count()), step())[1]
    sim.run(steps=2)
    assert len(seen) == 2 and min(seen) > 0 and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError, match="boom"):
        with heap_frozen():
            raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        with heap_frozen():
            pass
        assert gc.get_freeze_count() == mine  # not unfrozen by the loop
    finally:
        gc.unfreeze()
