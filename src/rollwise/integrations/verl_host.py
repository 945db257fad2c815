"""What rollwise's verl integration serves beyond `PlannerHost`: its own samples and in-flight control.

verl's v1 trainer generates through an agent loop that writes every trajectory to TransferQueue. A
rollwise round becomes a verl generation round (the trainer's `refill_fn`), so a planner may ask for
samples of its own after seeing results: stages (Staged: more samples of prompts already rolled
out, merged per prompt), pilots, profiles and oracle measurements. A Watcher that needs only each
sample's tokens runs between the segments
of rollwise's segmented agent loop (integrations/verl_agent_loop.py).

The round itself runs through rollwise's own `StepDriver.generate`, against `TransferQueueEngine`
(integrations/verl.py), so charges, pruned rows and fates are the driver's code, not a copy of it.

Still refused, by name, at build time: what needs the policy in this process (needs_policy: the model
lives in verl's remote workers), hidden states in flight (Watcher(hidden=True)), rows resumed from their
own tokens (Resumable) or carried across steps (Partial), and per-step or per-request sampling parameters.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from ..control.base import Planner, StepContext, Wave, build_planner
from ..control.capabilities import Partial, Speculator, Watcher, find
from ..core.history import PromptHistory
from ..core.types import DEFAULT_SAMPLING, KIND_TAG, LightRollout, Prompt, rollout_kind
from .host import PlannerHost, _refuse_what_hosts_cannot_set


@rollout_kind("verl")
@dataclass(slots=True, eq=False, weakref_slot=True)
class VerlRollout(LightRollout):
    """One agent-loop session as rollwise sees it: its outcome and length (LightRollout), the
    TransferQueue keys of its outputs (`{uid}_{session}_{index}`), what an in-flight watcher attached
    (`meta`: is_weight), and, once a planner component keeps it beyond its step (stored correct
    responses, committed pilots), `saved`: its fields and tags copied out of TransferQueue before
    verl clears them, so that it can be trained in a later step. A component's state_dict keeps it as
    plain data (`to_state`), its saved fields included, so a checkpoint carries it."""

    keys: tuple = ()
    meta: dict = field(default_factory=dict)
    saved: tuple | None = None  # (TensorDict of its outputs, [their tags])

    def to_state(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("saved", "token_ids_T", "logprobs_T")}  # a light rollout has no tokens here
        d.update(keys=list(self.keys), meta=dict(self.meta), prompt_ids=list(self.prompt_ids))
        d["saved"] = None if self.saved is None else {"fields": _plain_tensordict(self.saved[0]),
                                                      "tags": [dict(t) for t in self.saved[1]]}
        d[KIND_TAG] = "verl"
        return d

    @classmethod
    def from_state(cls, d: dict) -> "VerlRollout":
        names = {f.name for f in fields(cls)} - {"saved", "token_ids_T", "logprobs_T"}
        kw = {k: v for k, v in d.items() if k in names}
        kw.update(keys=tuple(d["keys"]), meta=dict(d.get("meta") or {}), prompt_ids=tuple(d.get("prompt_ids", ())))
        if kw.get("reward_parts") is not None:
            kw["reward_parts"] = tuple(kw["reward_parts"])
        saved = d.get("saved")
        if saved is not None:
            kw["saved"] = (_tensordict(saved["fields"]), [dict(t) for t in saved["tags"]])
        return cls(**kw)


def _plain_tensordict(td) -> dict:
    """A TensorDict read from TransferQueue as plain data (rollwise's checkpoint format): tensors, jagged
    tensors as their rows, non-tensor fields as their values, nested TensorDicts likewise."""
    from tensordict import TensorDictBase
    from tensordict.utils import is_non_tensor

    out = {}
    for k, v in td.items():
        if is_non_tensor(v):
            out[k] = {"values": list(v.tolist())}
        elif isinstance(v, TensorDictBase):
            out[k] = {"tensordict": _plain_tensordict(v)}
        elif isinstance(v, torch.Tensor) and v.is_nested:
            out[k] = {"jagged": [t.clone() for t in v.unbind()]}
        elif isinstance(v, torch.Tensor):
            out[k] = {"tensor": v.clone()}
        else:
            raise TypeError(f"a kept row's TransferQueue field {k!r} is a {type(v).__name__}, which a checkpoint "
                            "cannot hold")
    return {"batch_size": list(td.batch_size), "fields": out}


def _tensordict(plain: dict):
    from tensordict import NonTensorStack, TensorDict

    data = {}
    for k, v in plain["fields"].items():
        if "values" in v:
            data[k] = NonTensorStack.from_list(list(v["values"]))
        elif "tensordict" in v:
            data[k] = _tensordict(v["tensordict"])
        elif "jagged" in v:
            data[k] = torch.nested.as_nested_tensor(list(v["jagged"]), layout=torch.jagged)
        else:
            data[k] = v["tensor"]
    return TensorDict(data, batch_size=plain["batch_size"])


class VerlHost(PlannerHost):
    """PlannerHost for verl's replay buffer: it serves the planner's own samples (stages, pilots,
    profiles, oracle) and token-only in-flight watchers (with `inflight`); `start`/`send` return what
    the planner yielded, a list of Requests or a Wave (requests + watch), for `StepDriver.generate`."""

    def __init__(self, spec: str | list[str], pool: Sequence[Prompt], *, batch_size: int, n: int, host: str,
                 seed: int = 0, options: dict | None = None, inflight: bool = True):
        if batch_size < 1 or n < 1:
            raise ValueError(f"{host}: batch_size and n must be >= 1 (got {batch_size}, {n})")
        self.host, self.pool, self.batch_size, self.n, self.max_n = host, pool, int(batch_size), int(n), None
        self.rng = np.random.default_rng(seed)
        self.planner: Planner = build_planner(spec, len(pool), self.rng, options)
        refuse_what_verl_cannot_serve(self.planner, host, inflight)
        self.history = PromptHistory(len(pool))
        # what PlannerHost's start/send/finish read: verl serves the planner's own samples, no policy view,
        # and hands a round's watcher to the agent loop inside the Wave that _advance returns
        self.sampling, self.inflight = True, bool(inflight)
        self.prompt_stats = self.policy = self.watch = None
        self.step_count = 0
        self._plan = None
        self._ctx: StepContext | None = None
        self._assembled = None
        self._rounds = 0
        self._capped = 0

    @property
    def ctx(self) -> StepContext | None:
        """The open step's context (None between steps)."""
        return self._ctx

    @property
    def assembled(self):
        """The step's Assembled batch once the last round is back (before `finish`)."""
        return self._assembled

    def _advance(self, groups):
        try:
            out = next(self._plan) if groups is None else self._plan.send(groups)
        except StopIteration as stop:
            self._assembled = stop.value
            return []
        self._rounds += 1
        for r in (out.requests if isinstance(out, Wave) else out):
            if r.prefix is not None:
                raise ValueError(f"{self.host}: planner {self.name!r} asked to continue a row from its tokens; "
                                 "verl's agent loop starts every session from the prompt")
            if r.sampling != DEFAULT_SAMPLING:
                raise ValueError(f"{self.host}: planner {self.name!r} set sampling parameters {r.sampling}; "
                                 "verl fixes them in actor_rollout_ref.rollout")
        return out


def refuse_what_verl_cannot_serve(planner: Planner, host: str, inflight: bool) -> None:
    """One line naming every component verl cannot serve, and why; raised when the buffer is built."""
    planner.require(host, sampling=True, policy=False, refill=True, inflight=inflight, resume=False)
    missing = []
    for c, cap in find(planner.components, Watcher):
        if cap.hidden:
            missing.append(f"{c.name} reads hidden states in flight, which verl's rollout servers do not expose")
    for c, _ in find(planner.components, Partial):
        missing.append(f"{c.name} carries unfinished rows to the next step; with rollwise's planner every verl trainer mode trains a step's own rows")
    for c, _ in find(planner.components, Speculator):
        missing.append(f"{c.name} runs rounds its own way (drafts, trees), which verl's agent loop does not")
    if missing:
        raise ValueError(f"{host} cannot run planner {planner.name!r}: " + "; ".join(missing))
    _refuse_what_hosts_cannot_set(planner, host, per_prompt_n=True)
