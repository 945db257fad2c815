"""TreePO: segment-wise tree sampling (control/treepo.py), its tree-based advantage (learn/advantages.py)
and its cost in the ledger (kind "shared": decoded once, counted once)."""
import copy
import math

import numpy as np
import pytest
import torch

from rollwise.control.base import build_planner
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.learn.advantages import AdvInput, batch_input, masked_whiten, reinforce_pp_baseline, treepo

from fakes import TokenEngine, make_ctx, run_step


def tree_step(lengths, n=4, B=2, pool=4, options=None, max_tokens=12, step=0, seed=0):
    """One treepo step on a TokenEngine whose root row j of every prompt wants lengths[j] tokens (a
    branch wants what its root wanted): (batch, ctx, engine)."""
    ctx = make_ctx(pool_size=pool, B=B, n=n, step=step, seed=seed)
    engine = TokenEngine(lambda pid, j: lengths[j % len(lengths)], max_tokens=max_tokens)
    planner = build_planner("treepo", pool, ctx.rng, {"treepo": {"segment_tokens": 4, **(options or {})}})
    batch, _, _ = run_step(planner, ctx, engine)
    return batch, ctx, engine


def nodes(group):
    """Every distinct node of a group's tree: its leaves and their ancestors."""
    out = {}
    for r in group.rollouts:
        while r is not None:
            out[id(r)] = r
            r = r.lineage.prefix
    return list(out.values())


def own_tokens(node):
    pre = node.lineage.prefix
    return node.num_tokens - (pre.num_tokens if pre is not None else 0)


def leaves_under(group, node):
    def holds(r):
        while r is not None:
            if r is node:
                return True
            r = r.lineage.prefix
        return False
    return sum(holds(r) for r in group.rollouts)


def shape(group):
    return sorted((r.lineage.tree_path, r.num_tokens, r.finish_reason) for r in group.rollouts)


def test_tree_shape_and_shared_tokens_by_hand():
    """n = 4, segments of 4, two roots wanting 6 and 10 tokens. Step 1: both roots are partial (4 tokens
    each): min(4 - 0, 2 * 2) = 4 children, two each. Step 2: root 0's children end at 6 (EOS, 2 tokens
    each); root 1's reach 8 and go deeper: min(4 - 2, 2 * (2 + 2)) = 2 children, one each. Step 3: they
    end at 10. Both roots have two leaves under them: their 4 tokens are shared; nodes (1, 0) and
    (1, 1) have one leaf each: decoded. Per prompt: 8 shared + 8 (nodes) + 4 * 2 (leaves) decoded."""
    batch, ctx, engine = tree_step([6, 10])
    assert len(batch.groups) == 2
    for g in batch.groups:
        assert shape(g) == [((0, 0), 6, "eos"), ((0, 1), 6, "eos"), ((1, 0, 0), 10, "eos"), ((1, 1, 0), 10, "eos")]
    led = ctx.ledger
    assert led.count(kind="shared") == 2 * 8 and led.count(kind="decoded") == 2 * 16
    assert led.count(kind="shared") + led.count(kind="decoded") == engine.decoded == 48  # each token once
    assert led.count_rollouts() == 8 == led.count_rollouts(fate="trained")  # one rollout per leaf
    assert led.count(fate="trained") == 48 and led.count(fate="open") == 0
    assert led.budget_tokens() == 48 and led.reused_tokens == 0  # shared prefixes are not reuse across steps
    assert ctx.metrics["treepo/waves"] == 3 and ctx.metrics["treepo/nodes"] == 2 * (2 + 4 + 2)
    assert ctx.metrics["treepo/trees"] == 2 and ctx.metrics["treepo/nodes_per_tree"] == 8


def test_leaves_train_as_full_sequences_with_their_own_logprobs_and_versions():
    batch, _, _ = tree_step([6, 10])
    leaf = next(r for r in batch.groups[0].rollouts if r.lineage.tree_path == (1, 0, 0))
    mid = leaf.lineage.prefix
    root = mid.lineage.prefix
    assert (mid.lineage.tree_path, root.lineage.tree_path) == ((1, 0), (1,))
    assert torch.equal(leaf.token_ids_T[:8], mid.token_ids_T) and torch.equal(mid.token_ids_T[:4], root.token_ids_T)
    assert torch.equal(leaf.logprobs_T[:8], mid.logprobs_T) and leaf.logprobs_T.numel() == 10
    assert leaf.versions_T.tolist() == [0] * 10 and leaf.status == "done"
    assert root.lineage.share and not mid.lineage.share  # root 1 has two leaves under it, (1, 0) one
    for g in batch.groups:  # shared = used by several leaves, exactly
        assert all(bool(x.lineage.share) == (leaves_under(g, x) >= 2) for x in nodes(g))


def test_siblings_share_one_parent_object_and_dapo_filtering_still_settles_every_token():
    """A filtered tree (all leaves equally correct) is discarded whole: its shared tokens once too."""
    ctx = make_ctx(pool_size=4, B=2, n=4)
    engine = TokenEngine(lambda pid, j: [6, 10][j % 2], rates={0: 1.0, 1: 1.0, 2: 0.5, 3: 0.5}, max_tokens=12)
    planner = build_planner("treepo+dapo", 4, ctx.rng, {"treepo": {"segment_tokens": 4}})
    run_step(planner, ctx, engine)
    led = ctx.ledger
    assert led.count(fate="open") == 0
    assert led.count(kind="shared") + led.count(kind="decoded") == engine.decoded
    assert led.count(fate="discarded") > 0 and led.count(fate="discarded", kind="shared") > 0


def test_fallback_cuts_finished_leaves_until_the_budget_is_full():
    """branch = 1: one root, one child per deeper path, so leaves run out before n; the fallback cuts a
    leaf at a random segment boundary (0: a fresh sample) and branches there until n leaves are out."""
    batch, ctx, engine = tree_step([6], n=4, options={"branch": 1})
    for g in batch.groups:
        assert g.n == 4 and all(r.status == "done" for r in g.rollouts)
        paths = [r.lineage.tree_path for r in g.rollouts]
        assert len(set(paths)) == 4 and paths[0] == (0, 0)  # the first leaf: root 0, its only branch
    led = ctx.ledger
    assert led.count(kind="shared") + led.count(kind="decoded") == engine.decoded
    assert led.count_rollouts() == 8
    assert led.count(kind="shared") == sum(own_tokens(x) for g in batch.groups for x in nodes(g) if x.lineage.share)


def test_max_depth_runs_the_last_segment_to_the_end():
    batch, ctx, engine = tree_step([11, 11], n=4, options={"max_depth": 2}, max_tokens=12)
    for g in batch.groups:
        assert {len(r.lineage.tree_path) for r in g.rollouts} == {2} and {r.num_tokens for r in g.rollouts} == {11}
    assert ctx.ledger.count(kind="shared") + ctx.ledger.count(kind="decoded") == engine.decoded


def test_seeded_and_reproducible():
    opts = {"branch": 1, "first_div_max": 3, "seed": 5}
    a, _, ea = tree_step([6, 9, 3], n=5, options=opts)
    b, _, eb = tree_step([6, 9, 3], n=5, options=opts)
    assert [shape(g) for g in a.groups] == [shape(g) for g in b.groups] and ea.decoded == eb.decoded


def test_state_round_trips_and_resumes_exactly():
    ctx = make_ctx(pool_size=2, B=2, n=4)
    engine = TokenEngine(lambda pid, j: [6, 10, 3][j % 3], max_tokens=12)
    opts = {"treepo": {"segment_tokens": 4, "branch": 1, "first_div_max": 3}}
    planner = build_planner("treepo", 2, ctx.rng, opts)
    before, _, _ = run_step(planner, ctx, engine)
    first = {g.prompt.id for g in before.groups}  # prompts seen at step 0: their roots go on from there
    ctx.step = 1
    ctx2, engine2 = copy.deepcopy(ctx), copy.deepcopy(engine)
    resumed = build_planner("treepo", 2, ctx2.rng, opts)
    resumed.load_state_dict(copy.deepcopy(planner.state_dict()))
    a, _, _ = run_step(planner, ctx, engine)
    b, _, _ = run_step(resumed, ctx2, engine2)
    assert [shape(g) for g in a.groups] == [shape(g) for g in b.groups]
    assert ctx.ledger.tokens == ctx2.ledger.tokens and ctx.ledger.rollouts == ctx2.ledger.rollouts
    assert min(r.lineage.tree_path[0] for g in a.groups for r in g.rollouts if g.prompt.id in first) >= 1


def test_root_indices_are_unique_across_steps():
    ctx = make_ctx(pool_size=2, B=2, n=4)
    engine = TokenEngine(lambda pid, j: [6, 10][j % 2], max_tokens=12)
    planner = build_planner("treepo", 2, ctx.rng, {"treepo": {"segment_tokens": 4}})
    a, _, _ = run_step(planner, ctx, engine)
    ctx.step = 1
    b, _, _ = run_step(planner, ctx, engine)
    roots = lambda batch: {r.lineage.tree_path[0] for g in batch.groups for r in g.rollouts}  # noqa: E731
    assert roots(a) == {0, 1} and roots(b) == {2, 3}


# ---- the tree-based advantage, by hand ----------------------------------------------------------------
def test_tree_advantage_by_hand():
    """Leaves (0,0) (0,1) (1,0,0) (1,1,0) with rewards 1 1 1 0. d = 0: mean 0.75 -> .25 .25 .25 -.75;
    d = 1: root 0's leaves {1, 1} -> 0 0, root 1's {1, 0} -> .5 -.5; d = 2: every subgroup has one leaf.
    "average": .125 .125 .375 -.625; "group_size": (4 * .25 + 2 * 0) / 6 = 1/6, 1/6,
    (4 * .25 + 2 * .5) / 6 = 1/3, (4 * -.75 + 2 * -.5) / 6 = -2/3. Then whitened over the tokens."""
    paths = [(0, 0), (0, 1), (1, 0, 0), (1, 1, 0)]
    mask = torch.ones(4, 3)
    inp = AdvInput(torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long), mask_NT=mask,
                   tree_path_N=paths)
    for weight, raw in (("average", [0.125, 0.125, 0.375, -0.625]), ("group_size", [1 / 6, 1 / 6, 1 / 3, -2 / 3])):
        want = masked_whiten(torch.tensor(raw, dtype=torch.float64)[:, None] * mask.double(), mask.double())
        got = treepo(inp, weight=weight)
        assert got.shape == (4, 3) and torch.allclose(got.double(), want, atol=1e-6), weight
    mean = sum([0.125, 0.125, 0.375, -0.625]) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in [0.125, 0.125, 0.375, -0.625]) * 3 / 11)
    assert abs(float(treepo(inp)[3, 0]) - (-0.625 - mean) / math.sqrt(sd ** 2 + 1e-8)) < 1e-5


def test_tree_advantage_skips_flat_subgroups_on_request_and_is_rf_pp_baseline_without_trees():
    paths = [(0, 0), (0, 1), (1, 0), (1, 1)]
    r = torch.tensor([1.0, 1.0, 1.0, 0.0])
    inp = AdvInput(r, torch.zeros(4, dtype=torch.long), mask_NT=torch.ones(4, 1), tree_path_N=paths)
    # skip_flat: root 0's subgroup {1, 1} is left out, so leaves 0 and 1 keep only the d = 0 term .25
    raw = torch.tensor([0.25, 0.25, 0.375, -0.625], dtype=torch.float64)[:, None]
    want = masked_whiten(raw, torch.ones(4, 1).double())
    assert torch.allclose(treepo(inp, skip_flat=True).double(), want, atol=1e-6)
    plain = AdvInput(r, torch.tensor([0, 0, 1, 1]), mask_NT=torch.ones(4, 2), tree_path_N=[()] * 4)
    assert torch.allclose(treepo(plain), reinforce_pp_baseline(plain))
    with pytest.raises(ValueError, match="weight must be"):
        treepo(inp, weight="max")


def test_batch_input_carries_the_tree_paths():
    batch, _, _ = tree_step([6, 10])
    inp = batch_input(batch)
    assert inp.tree_path_N == [r.lineage.tree_path for g in batch.groups for r in g.rollouts]
    row = Rollout(0, [1], torch.tensor([1]), torch.tensor([-1.0]), "x", "eos", 0)
    plain = Batch([Group(Prompt(0, "q", "1"), [row])])
    assert batch_input(plain).tree_path_N == [()]


# ---- where it cannot run ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,match", [
    ("april+treepo", r"april \(Partial\) does not compose with treepo \(Speculator\)"),
    ("treepo+spec-rl", r"treepo \(Speculator\) does not compose with spec-rl \(Speculator\)"),
    ("treepo+duet-abort", r"treepo \(Speculator\) does not compose with duet-abort \(Watcher\)"),
    ("treepo+arrol", r"treepo \(Speculator\) does not compose with arrol \(Watcher\)"),
])
def test_conflicting_compositions_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        build_planner(spec, 8, np.random.default_rng(0))


def test_hosts_and_the_simulator_refuse_it_by_name():
    from rollwise.sim.runner import unsupported_reason

    planner = build_planner("greso+treepo", 8, np.random.default_rng(0))
    with pytest.raises(ValueError, match="a host cannot run planner 'greso\\+treepo'.*treepo needs on-demand"):
        planner.require("a host")
    assert "treepo needs an engine that continues rows from their tokens" in unsupported_reason("treepo")
    with pytest.raises(ValueError, match="Ray workers\\) cannot run planner 'treepo'"):
        build_planner("treepo", 8, np.random.default_rng(0)).require(
            "--mode async (Ray workers)", sampling=True, policy=True, refill=True)
    with pytest.raises(ValueError, match="segment_tokens >= 1"):
        build_planner("treepo", 8, np.random.default_rng(0), {"treepo": {"segment_tokens": 0}})


# ---- real training runs through the Trainer --------------------------------------------------------
def train(out, steps, planner, **extra):
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(out), "steps": steps, "eval_every": 0, "planner": planner,
                             "planner_options": {"treepo": {"segment_tokens": 3}},
                             "task_options": {"pool_size": 16, "heldout_size": 40}, **extra})
    trainer = Trainer(cfg)
    return trainer, trainer.run()


@pytest.mark.parametrize("spec,advantage", [("treepo", None), ("greso+treepo", "treepo")])
def test_train_with_treepo(tmp_path, small_policy, spec, advantage):
    extra = {"learner": {"advantage": advantage}} if advantage else {}
    trainer, rows = train(tmp_path, 2, spec, **extra)
    led = trainer.ledger
    assert rows[-1]["step"] == 2 and led.count(fate="open") == 0
    assert led.count(kind="shared") > 0  # the trees branched
    decoded = led.count(kind="decoded") + led.count(kind="shared") - led.count("eval") - led.count("oracle")
    assert rows[-1]["tokens"] == led.budget_tokens() == decoded
    assert led.count_rollouts("train") % 4 == 0  # one rollout per leaf, n = 4 leaves per tree
    assert rows[-1]["treepo/nodes"] > 8 * 4  # more nodes than leaves: the trees grew past one segment


def test_async_mode_refuses_treepo_before_starting_workers(tmp_path, small_policy):
    from conftest import SMALL
    from rollwise.run.async_loop import AsyncLoop
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(tmp_path), "planner": "treepo", "mode": "async"})
    with pytest.raises(ValueError, match="--mode async \\(Ray workers\\) cannot run planner 'treepo'"):
        (lambda tr: AsyncLoop(tr.parts, tr))(Trainer(cfg))


@pytest.mark.parametrize("spec", ["ar3po+treepo", "greso+treepo", "treepo+dapo", "prompt-replay+treepo"])
def test_composes_and_every_token_is_charged_once(spec):
    """Over four steps with stages (AR3PO), skips (GRESO), filters (DAPO) and replays: every token the
    engine decoded is in the ledger once, as decoded or shared, and every rollout is settled."""
    ctx = make_ctx(pool_size=6, B=3, n=4)
    engine = TokenEngine(lambda pid, j: [6, 10, 3][(j + pid) % 3], rates={i: [0.0, 1.0, 0.5][i % 3] for i in range(6)},
                         max_tokens=12)
    planner = build_planner(spec, 6, ctx.rng, {"treepo": {"segment_tokens": 4}})
    for s in range(4):
        ctx.step = s
        batch, _, _ = run_step(planner, ctx, engine, advance_version=True)
        assert all(len({r.lineage.tree_path for r in g.rollouts}) == g.n for g in batch.groups), spec
    led = ctx.ledger
    assert led.count(kind="shared") + led.count(kind="decoded") == engine.decoded and led.count(fate="open") == 0
    assert led.count(kind="shared") > 0
