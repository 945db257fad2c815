"""The plain data that flows through a step: Prompt -> Rollout -> Group -> Batch.

Variable group sizes are normal: a Group is just the rollouts of one prompt in one step,
however many the planner asked for (in however many stages).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import torch

Purpose = Literal["train", "pilot", "discarded", "eval", "profile", "oracle"]
PURPOSES: tuple[str, ...] = ("train", "pilot", "discarded", "eval", "profile", "oracle")
FinishReason = Literal["eos", "length", "aborted", "pruned"]


@dataclass(frozen=True)
class Prompt:
    """One task instance. `id` is its stable index in the pool (PromptHistory is keyed by it)."""

    id: int
    text: str
    answer: str
    level: int = -1  # difficulty knob of a procedural task; -1 when unknown


@dataclass
class Request:
    """Ask the engine for `n` samples of `prompt`, charged to `purpose`."""

    prompt: Prompt
    n: int
    purpose: str = "train"


@dataclass
class Rollout:
    """One sampled response.

    token_ids_T / logprobs_T are the response tokens (prompt excluded) and the behaviour
    policy's log-probabilities of them (mu, as the engine sampled them). `reward_parts` holds the
    reward's components when the reward function returns several (the Scorer sets `reward` to their
    weighted sum; multi-reward estimators such as GD2PO read the parts); None for a scalar reward.
    """

    prompt_id: int
    prompt_ids: list[int]
    token_ids_T: torch.Tensor
    logprobs_T: torch.Tensor
    text: str
    finish_reason: str
    policy_version: int
    purpose: str = "train"
    entropy: float = 0.0  # mean per-token entropy of the sampling distribution
    reward: float = 0.0
    correct: bool = False
    reward_parts: tuple[float, ...] | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids_T.numel())

    def to_state(self) -> dict:
        """Plain python/numpy values, for planners that keep rollouts in their state_dict."""
        return {f.name: (v.detach().cpu().numpy().copy() if isinstance(v, torch.Tensor)
                         else list(v) if isinstance(v, list) else v)
                for f in fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_state(cls, d: dict) -> "Rollout":
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["token_ids_T"] = torch.as_tensor(kw["token_ids_T"], dtype=torch.long).clone()
        kw["logprobs_T"] = torch.as_tensor(kw["logprobs_T"], dtype=torch.float32).clone()
        kw["prompt_ids"] = [int(t) for t in kw["prompt_ids"]]
        if kw.get("reward_parts") is not None:
            kw["reward_parts"] = tuple(float(x) for x in kw["reward_parts"])
        return cls(**kw)


@dataclass
class Group:
    """All rollouts of one prompt in one step (any size, possibly grown over several stages)."""

    prompt: Prompt
    rollouts: list[Rollout] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.rollouts)

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.rollouts]

    @property
    def num_correct(self) -> int:
        return sum(r.correct for r in self.rollouts)

    @property
    def pass_rate(self) -> float:
        return self.num_correct / self.n if self.n else 0.0

    @property
    def zero_variance(self) -> bool:
        """All rewards equal: GRPO's advantage is identically zero, the group teaches nothing."""
        rs = self.rewards
        return len(rs) < 2 or max(rs) == min(rs)

    @property
    def tokens(self) -> int:
        return sum(r.num_tokens for r in self.rollouts)

    @property
    def mean_length(self) -> float:
        return self.tokens / self.n if self.n else 0.0

    @property
    def mean_entropy(self) -> float:
        return sum(r.entropy for r in self.rollouts) / self.n if self.n else 0.0


@dataclass
class Batch:
    """The groups the learner trains on in one step."""

    groups: list[Group]
    step: int = 0

    @property
    def rollouts(self) -> list[Rollout]:
        return [r for g in self.groups for r in g.rollouts]

    def __len__(self) -> int:
        return len(self.groups)
