"""Device placement (config.device, --device): the learner and the torch engine run on the policy's device.

There was no GPU where this was written. Two checks stand in for one:
- device="cpu" (and --device cpu) is the CPU path exactly: the metrics of a run equal the default's.
- The meta-device check: with `torch.device("meta")` as the default device, every tensor created without an
  explicit device lands on "meta" (no data), so any computation that mixes it with the policy's tensors, or
  reads a value from it, fails loudly. The engine, the learner and a Trainer run with the policy on "cpu"
  under it: every tensor they create names its device (the policy's, or the CPU for rollout data).
GPU-only tests are skipped without CUDA.
"""
import json

import pytest
import torch
import yaml

from rollwise.core.types import Batch, Group, Prompt, Request, SamplingParams
from rollwise.generate.torch_engine import TorchEngine
from rollwise.learn.learner import Learner, LearnerConfig
from rollwise.policy.policy import Policy
from rollwise.run.config import load_config, resolve_device
from rollwise.run.loop import Trainer

from conftest import SMALL
from test_engine_policy import generate

CUDA = torch.cuda.is_available()


def strip(rows):
    """A metrics row without its wall-time fields (wall_s, gen_s and any other *_s)."""
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]


def read(path):
    return [json.loads(x) for x in open(path).read().splitlines()]


# ---- the config field ----------------------------------------------------------------------------

def test_device_field_validation(tmp_path):
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if CUDA else "cpu")
    for bad in ("gpu", "cuda:x", "CPU", "", "tpu"):
        with pytest.raises(ValueError, match=r"^device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got"):
            load_config(None, {**SMALL, "out": str(tmp_path), "device": bad})
    cfg = load_config(None, {**SMALL, "out": str(tmp_path), "device": "auto"})
    assert cfg.device == "auto"  # kept as written (a resume may move it); resolved when the run starts


@pytest.mark.skipif(CUDA, reason="checks the error without CUDA")
def test_cuda_without_cuda_is_one_line_error(tmp_path):
    for dev in ("cuda", "cuda:1"):
        with pytest.raises(ValueError) as e:
            load_config(None, {**SMALL, "out": str(tmp_path), "device": dev})
        msg = str(e.value)
        assert msg == (f"device: {dev!r} asked for, but torch.cuda.is_available() is False "
                       f"(this torch is {torch.__version__})")
        assert "\n" not in msg


def test_device_may_change_on_resume():
    from rollwise.run.config import RESUME_MAY_CHANGE
    assert "device" in RESUME_MAY_CHANGE


# ---- device="cpu" is today's CPU path --------------------------------------------------------------

def test_cli_device_cpu_equals_the_default(tmp_path, small_policy):
    from rollwise.cli import main

    cfg = tmp_path / "small.yaml"
    cfg.write_text(yaml.safe_dump({**SMALL, "steps": 3}))
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "default")]) == 0
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "cpu"), "--device", "cpu"]) == 0
    a, b = read(tmp_path / "default" / "metrics.jsonl"), read(tmp_path / "cpu" / "metrics.jsonl")
    assert len(a) == 4 and strip(a) == strip(b)  # the step-0 evaluation and 3 steps
    assert json.loads((tmp_path / "cpu" / "config.json").read_text())["device"] == "cpu"


# ---- the meta-device check: no tensor is created without its device ---------------------------------

def fresh_policy(small_policy):
    path, _, task = small_policy
    return Policy.load(path, device="cpu"), task


PROMPTS = [Prompt(0, "12+3=", "15"), Prompt(1, "100+25=", "125"), Prompt(2, "7+7=", "14")]


def test_meta_default_device_catches_a_tensor_without_device(small_policy):
    pol, _ = fresh_policy(small_policy)
    with torch.device("meta"):
        assert torch.zeros(1).device.type == "meta"
        x = torch.arange(3)  # made without its device: no data
        assert x.device.type == "meta"
        with pytest.raises((RuntimeError, NotImplementedError)):
            (x + 1).tolist()  # fails the first time a value is read
    # (mixed with CPU tensors, ops fail with "Tensor on device meta is not on the expected device cpu" or
    # spread meta; which one depends on the op. Against main's torch_engine.py and learner.py the engine
    # and learner tests below fail.)


def test_engine_under_meta_default_device(small_policy):
    pol, _ = fresh_policy(small_policy)
    assert pol.device == torch.device("cpu")
    reqs = lambda: [Request(PROMPTS[0], 3), Request(PROMPTS[1], 2, sampling=SamplingParams(temperature=0.0)),  # noqa: E731
                    Request(PROMPTS[2], 2, sampling=SamplingParams(temperature=0.7, top_p=0.9))]
    want, _ = generate(TorchEngine(pol, temperature=1.0, max_new_tokens=8, seed=1), reqs())
    with torch.device("meta"):
        engine = TorchEngine(pol, temperature=1.0, max_new_tokens=8, seed=1)
        got, _ = generate(engine, reqs())
        greedy, _ = generate(TorchEngine(pol, temperature=0.0, max_new_tokens=8), [Request(PROMPTS[0], 2)])
        # a segment budget stops rows as partials; a prefix resumes them
        part, _ = generate(engine, [Request(PROMPTS[0], 2, sampling=SamplingParams(segment_tokens=3))])
        resumed, _ = generate(engine, [Request(PROMPTS[0], 1, prefix=r) for r in part[0] if r.status == "partial"])
        engine.load_state_dict(engine.state_dict())
    for ws, gs in zip(want, got):  # the same draws as outside the meta device
        for w, g in zip(ws, gs):
            assert g.token_ids_T.device.type == "cpu" and g.logprobs_T.device.type == "cpu"
            assert torch.equal(w.token_ids_T, g.token_ids_T) and torch.equal(w.logprobs_T, g.logprobs_T)
    assert greedy[0][0].token_ids_T.tolist() == greedy[0][1].token_ids_T.tolist()
    for r in (x for rs in resumed for x in rs):
        assert r.token_ids_T.device.type == "cpu" and r.versions_T.device.type == "cpu"


def test_peek_hidden_under_meta_default_device(small_policy):
    pol, _ = fresh_policy(small_policy)
    engine = TorchEngine(pol, temperature=1.0, max_new_tokens=8, seed=0)
    with torch.device("meta"):
        engine.submit([Request(PROMPTS[0], 2, id=0)], hidden=True)
        engine.poll(2)
        seen = engine.peek([0], hidden=True)[0]
        while engine.pending:
            engine.poll()
    toks, h = next(s for s in seen if s is not None)
    assert toks.device.type == "cpu" and h.device.type == "cpu" and torch.isfinite(h).all()


def batch_of(pol, task, n=4, correction="none"):
    engine = TorchEngine(pol, temperature=1.0, max_new_tokens=8, seed=2)
    groups = []
    for g in generate(engine, [Request(p, n) for p in task.train_pool()[:4]])[0]:
        for i, r in enumerate(g):
            r.reward = float(i % 2)  # variance in every group: every row learns
            r.correct = bool(i % 2)
        groups.append(Group(Prompt(g[0].prompt_id, "", ""), g))
    return Batch(groups, step=0)


@pytest.mark.parametrize("correction", ["none", "tis-token"])
def test_learner_update_under_meta_default_device(small_policy, correction):
    pol, task = fresh_policy(small_policy)
    batch = batch_of(pol, task)
    ref, _ = fresh_policy(small_policy)
    cfg = LearnerConfig(correction=correction, recompute_old=True, kl_coef=0.0)
    want = Learner(ref, cfg, seed=0).update(batch)
    with torch.device("meta"):
        got = Learner(pol, cfg, seed=0).update(batch)
    assert got["updated"] == 1 and got == want  # the same update as outside the meta device
    for (k, a), b in zip(ref.model.state_dict().items(), pol.model.state_dict().values()):
        assert b.device.type == "cpu" and torch.equal(a, b), k


def test_trainer_run_under_meta_default_device(tmp_path, small_policy):
    want = Trainer(load_config(None, {**SMALL, "out": str(tmp_path / "a"), "steps": 2})).run()
    with torch.device("meta"):
        got = Trainer(load_config(None, {**SMALL, "out": str(tmp_path / "b"), "steps": 2, "device": "cpu"})).run()
    assert len(got) == 3 and strip(got) == strip(want)  # the step-0 evaluation and 2 steps


# ---- on a GPU (skipped here: no GPU was available when this was written) -----------------------------

@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_two_step_train_on_cuda_and_resume_on_cpu(tmp_path, small_policy):
    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "g"), "steps": 2, "device": "cuda"})
    tr = Trainer(cfg)
    assert tr.policy.device.type == "cuda"
    rows = tr.run()
    assert len(rows) == 2 and all(r.get("updated") == 1 for r in rows if "updated" in r)
    ck = torch.load(tmp_path / "g" / "checkpoint.pt", weights_only=True)
    assert all(t.device.type == "cpu" for t in ck["model"].values())
    # the checkpoint resumes on the CPU
    rows = Trainer(load_config(None, {**SMALL, "out": str(tmp_path / "g"), "steps": 3, "device": "cpu"})).run()
    assert len(rows) == 3


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_engine_and_learner_on_cuda(small_policy):
    pol, task = fresh_policy(small_policy)
    pol.to("cuda")
    batch = batch_of(pol, task)
    for r in batch.rollouts:
        assert r.token_ids_T.device.type == "cpu"
    stats = Learner(pol, LearnerConfig(correction="tis-token"), seed=0).update(batch)
    assert stats["updated"] == 1 and pol.device.type == "cuda"
