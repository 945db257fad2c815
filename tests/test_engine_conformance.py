"""The engine conformance kit (rollwise.testing.check_engine) over every registered engine, the kit
failing on engines that break a rule, and the shared continuation rules (generate/continuation.py).

vLLM runs where it imports (CI's vLLM stage, .venv-vllm); elsewhere its case skips."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from rollwise.core import registry
from rollwise.core.types import Prompt, Request, Rollout, SamplingParams
from rollwise.generate import continuation
from rollwise.generate.torch_engine import TorchEngine
from rollwise.testing import check_engine

from test_engine_policy import tiny_policy

EVERY_ENGINE_CHECK = ["requests and groups", "abort of a queued request", "seeded determinism"]
POLICY_CHECKS = ["max_tokens and EOS", "log-probs", "update_weights", "state_dict round trip",
                 "abort of a running request", "segment budgets and continuations"]


def torch_kit():
    pol = tiny_policy()
    return (lambda **kw: TorchEngine.for_policy(pol, **kw)), pol


def sim_kit():
    from rollwise.sim.engine import SimEngine
    from rollwise.sim.population import Population
    from rollwise.sim.timing import TimingModel

    return (lambda: SimEngine(Population(10, seed=0), TimingModel(), np.random.default_rng(0))), None


def vllm_kit():
    pytest.importorskip("vllm")
    from rollwise.generate.vllm_engine import VLLMEngine
    from test_vllm_engine import LLM_OPTIONS, shared_policy

    pol, _ = shared_policy()
    return (lambda **kw: VLLMEngine.for_policy(pol, dtype="float32", llm_options=LLM_OPTIONS, **kw)), pol


KITS = {"torch": torch_kit, "sim": sim_kit, "vllm": vllm_kit}
# what each engine is checked for: the simulator has no tokens; only the torch engine has peek/stop
EXPECTED = {"torch": EVERY_ENGINE_CHECK + POLICY_CHECKS + ["declared capabilities", "peek and stop", "hidden states",
                                                                "drafts"],
            "sim": EVERY_ENGINE_CHECK, "vllm": EVERY_ENGINE_CHECK + POLICY_CHECKS}


def test_every_registered_engine_runs_the_kit():
    assert set(KITS) == {e.name for e in registry.entries("engine")}


@pytest.mark.parametrize("name", sorted(KITS))
def test_registered_engine_passes_the_kit(name):
    make, policy = KITS[name]()
    assert check_engine(make, policy=policy) == EXPECTED[name]


# ---- the kit can fail: engines that break one rule each --------------------------------------------
class DropsARow(TorchEngine):
    def poll(self, max_steps=None):
        events = super().poll(max_steps)
        for e in events:
            e.group.rollouts = e.group.rollouts[:-1]
        return events


class IgnoresPrefix(TorchEngine):
    def submit(self, requests, hidden=False):
        super().submit([dataclasses.replace(r, prefix=None) for r in requests], hidden)


class ForgetsState(TorchEngine):
    def load_state_dict(self, s):
        pass


class StopsLate(TorchEngine):
    def stop(self, request_id, samples, reason):  # accepted, then ignored: the samples run on
        if reason not in ("stop", "pruned"):
            raise ValueError(reason)


class HidesDrafts(TorchEngine):
    def poll(self, max_steps=None):  # keeps draft tokens but reports none scored
        events = super().poll(max_steps)
        for e in events:
            e.verified_tokens = 0
        return events


@pytest.mark.parametrize("engine, extra, rule", [
    (DropsARow, 0, r"\[n rows\]: request \d+ asked for n = 3 samples, its group holds 2"),
    (TorchEngine, 3, r"\[max_tokens\]: request \d+ row \d+: \d+ new tokens where the request allows 8"),
    (IgnoresPrefix, 0, r"\[prefix continuation\]: request \d+ row 0: policy_version 1; a continuation keeps"),
    (ForgetsState, 0, r"\[state_dict round trip\]"),
    (StopsLate, 0, r"\[peek and stop\]: sample 0 stopped with 'pruned' came back as"),
    (HidesDrafts, 0, r"\[drafts\]: request \d+ kept \d+ draft tokens but Finished.verified_tokens says 0"),
])
def test_the_kit_fails_an_engine_that_breaks_a_rule(engine, extra, rule):
    pol = tiny_policy()

    def make(**kw):  # `extra`: the engine generates more than the max_new_tokens it was asked for
        return engine.for_policy(pol, **{**kw, "max_new_tokens": kw["max_new_tokens"] + extra})

    with pytest.raises(AssertionError, match=r"^engine contract " + rule):
        check_engine(make, policy=pol)


def test_capabilities_claimed_are_checked_and_unknown_ones_refused():
    make, pol = torch_kit()
    assert check_engine(make, policy=pol, capabilities=()) == EVERY_ENGINE_CHECK + POLICY_CHECKS
    sim, _ = sim_kit()
    with pytest.raises(AssertionError, match=r"\[capabilities\]: 'inflight' is claimed but the engine does not"):
        check_engine(sim, capabilities=["inflight"])
    with pytest.raises(ValueError, match="unknown capabilities \\['telepathy'\\]"):
        check_engine(sim, capabilities=["telepathy"])


def test_removed_names_say_what_replaced_them():
    with pytest.raises(ImportError, match="Progress was removed: poll returns only Finished events"):
        from rollwise.generate.engine import Progress  # noqa: F401
    with pytest.raises(ImportError, match=r"build_engine was removed: use rollwise.core.registry.get\('engine'"):
        from rollwise.generate.engine import build_engine  # noqa: F401


# ---- the shared continuation rules (hand-computed) --------------------------------------------------
P = Prompt(0, "x", "")


def partial(k: int, version: int = 1) -> Rollout:
    return Rollout(0, [5, 6, 7], torch.arange(k), -0.5 * torch.ones(k), "", "budget", version, status="partial",
                   entropy=0.25)


def test_limits_of_a_fresh_request_and_a_continuation():
    fresh = continuation.limits(Request(P, 4), [5, 6, 7], max_tokens=10, max_context=64)
    assert (fresh.context, fresh.full, fresh.limit) == ([5, 6, 7], 10, 10)
    # prompt 3 + prefix 4 in a context of 12: room 5 < max_tokens 10 - 4 = 6, cut to 2 by the segment
    seg = Request(P, 1, sampling=SamplingParams(segment_tokens=2), prefix=partial(4))
    lim = continuation.limits(seg, [5, 6, 7], max_tokens=10, max_context=12)
    assert (lim.context, lim.full, lim.limit) == ([5, 6, 7, 0, 1, 2, 3], 5, 2)
    zero_seg = Request(P, 1, sampling=SamplingParams(segment_tokens=0))  # a segment of at least one token
    assert continuation.limits(zero_seg, [5], max_tokens=10, max_context=64).limit == 1
    spent = Request(P, 1, prefix=partial(4))  # the prefix used the whole budget: nothing more, no error
    assert continuation.limits(spent, [5, 6, 7], max_tokens=3, max_context=7).full == 0
    with pytest.raises(ValueError, match="prompt of 7 tokens leaves no room to generate \\(model context 7\\)"):
        continuation.limits(spent, [5, 6, 7], max_tokens=10, max_context=7)
    with pytest.raises(ValueError, match="n must be >= 0 \\(and 1 with a prefix\\), got 2"):
        continuation.check_request(Request(P, 2, prefix=partial(4)))


def test_how_a_row_ended_and_how_a_continuation_is_assembled():
    assert [continuation.length_reason(k, 6) for k in (4, 6)] == ["budget", "length"]
    assert [continuation.status_of(r) for r in ("eos", "budget", "aborted", "stop", "pruned")] == \
        ["done", "partial", "aborted", "done", "pruned"]
    pre = partial(2, version=1)
    c = continuation.continued(pre, torch.tensor([8, 9, 10]), torch.tensor([-1.0, -2.0, -3.0]),
                               torch.tensor([0.5, 0.5, 0.5]), torch.full((3,), 2))
    assert c.token_ids_T.tolist() == [0, 1, 8, 9, 10]
    assert c.logprobs_T.tolist() == [-0.5, -0.5, -1.0, -2.0, -3.0]
    assert c.entropy_T.tolist() == [0.25, 0.25, 0.5, 0.5, 0.5]  # the prefix's mean where it kept none
    assert c.versions_T.tolist() == [1, 1, 2, 2, 2]
    assert c.lineage.prefix is pre and c.lineage.tokens_by_kind == {"decoded": 3}
    assert continuation.continued(pre, torch.tensor([8]), torch.tensor([-1.0]), None, torch.tensor([2])).entropy_T is None


def test_the_docs_third_party_engine_passes_the_kit(monkeypatch):
    """docs/engines.md's example: an engine written from the protocol alone, checked as its author would."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    from examples.naive_engine import NaiveEngine

    pol = tiny_policy()
    assert check_engine(lambda **kw: NaiveEngine.for_policy(pol, **kw), policy=pol) == \
        EVERY_ENGINE_CHECK + POLICY_CHECKS
