"""The finite guard (run/guard.py): what it copies to be able to undo a step, and that the undo is exact."""
import pytest
import torch

from rollwise.learn.learner import Learner, LearnerConfig
from rollwise.run import guard as guard_mod
from rollwise.run.guard import FiniteGuard

from test_learner_gpu_options import batch_of, llama_policy

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def tensor_bytes(x):
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    values = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
    return sum(tensor_bytes(v) for v in values)


@pytest.fixture
def copied(monkeypatch):
    """Bytes of tensors the guard clones, per top-level copy (a spy on guard._clone)."""
    log, depth = [], [0]
    real = guard_mod._clone

    def spy(x):
        depth[0] += 1
        try:
            if depth[0] == 1:
                log.append(tensor_bytes(x))
            return real(x)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(guard_mod, "_clone", spy)
    return log


def test_a_finite_lora_step_copies_the_adapter_and_its_optimizer_state_not_the_model(copied):
    pytest.importorskip("peft")
    pol = llama_policy()
    learner = Learner(pol, LearnerConfig(lora=LORA, lr=1e-2, minibatches=2), seed=0)
    guard = FiniteGuard(learner, pol)
    batch = batch_of(pol)
    assert guard.update(batch)["updated"] == 1 and guard.skipped == 0
    adapter = nbytes(p for p in pol.model.parameters() if p.requires_grad)
    model = nbytes(pol.model.state_dict().values())
    steps = 4 * len(list(learner.opt.param_groups[0]["params"]))  # AdamW's float32 step counters
    small = copied[0]  # the learner's RNG state, taken before the update
    assert small < 10_000
    # once per update, just before the first of its 2 optimizer steps: adapter weights, then AdamW's state
    # (before any step: empty), nothing else. The old guard copied the whole peft model (base included).
    assert copied[1:] == [adapter, 0] and guard.snapshot_bytes == adapter
    assert sum(copied) < model / 5
    guard.update(batch)  # the second update's snapshot holds AdamW's two moments and step counters too
    assert copied[3] < 10_000 and copied[4:] == [adapter, 2 * adapter + steps] and guard.snapshot_bytes == 3 * adapter + steps


def test_an_update_that_steps_nothing_copies_no_weights(copied):
    pol = llama_policy()
    guard = FiniteGuard(Learner(pol, LearnerConfig(), seed=0), pol)
    batch = batch_of(pol)
    for r in batch.rollouts:  # equal rewards in every group: zero advantages, no row learns
        r.reward, r.correct = 1.0, True
    assert guard.update(batch)["updated"] == 0
    assert len(copied) == 1 and copied[0] < 10_000 and guard.snapshot_bytes == 0


def test_a_step_with_overflowing_logits_is_undone_exactly_across_minibatches(monkeypatch):
    """Both optimizer steps of the update are undone: weights, AdamW state, RNG and version as before."""
    pol = llama_policy()
    learner = Learner(pol, LearnerConfig(lr=1e-2, minibatches=2), seed=0)
    guard = FiniteGuard(learner, pol)
    batch = batch_of(pol)
    assert guard.update(batch)["updated"] == 1  # AdamW has state now
    weights = {k: v.clone() for k, v in pol.model.state_dict().items()}
    opt = {i: {k: v.clone() for k, v in s.items()} for i, s in learner.opt.state_dict()["state"].items()}
    gen, version = learner.gen.get_state(), pol.version
    monkeypatch.setattr(guard, "_finite_logits", lambda b: False)
    out = guard.update(batch)
    assert out["updated"] == 0 and out["skipped"] == 1 and guard.skipped == 1 and pol.version == version
    assert all(torch.equal(v, pol.model.state_dict()[k]) for k, v in weights.items())
    state = learner.opt.state_dict()["state"]
    assert all(torch.equal(v, state[i][k]) for i, s in opt.items() for k, v in s.items())
    assert torch.equal(learner.gen.get_state(), gen)
    monkeypatch.undo()
    assert guard.update(batch)["updated"] == 1  # and training goes on from there
