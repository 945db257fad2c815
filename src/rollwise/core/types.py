"""The plain data that flows through a step: Prompt -> Request -> Rollout -> Group -> Batch.

Variable group sizes are normal: a Group is just the rollouts of one prompt in one step,
however many the planner asked for (in however many stages).

Every generated token carries three labels (the one counting scheme of the project, see Ledger):
  purpose  why it was asked for: train, pilot, profile, oracle, eval   (Request.purpose)
  fate     what became of its rollout: new (not charged: made by hand, or restored), open (charged,
           until the step settles it), then trained, discarded (filtered or trimmed), scored (a
           measurement: pilot/profile/oracle/eval not trained in its step); or aborted, pruned,
           carried (a partial resumed later)
  kind     how it was produced: decoded; draft (accepted from a draft, verified by a prefill);
           shared (a tree prefix decoded once, used by several leaves)
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from .history import GroupStats

PURPOSES: tuple[str, ...] = ("train", "pilot", "profile", "oracle", "eval")
FATES: tuple[str, ...] = ("new", "open", "trained", "discarded", "scored", "aborted", "pruned", "carried")
KINDS: tuple[str, ...] = ("decoded", "draft", "shared")
Status = Literal["done", "partial", "aborted", "pruned"]
FinishReason = Literal["eos", "length", "stop", "budget", "aborted", "pruned"]  # "stop": ended by a caller, kept


@dataclass(frozen=True)
class Prompt:
    """One task instance. `id` is its stable index in the pool (PromptHistory is keyed by it)."""

    id: int
    text: str
    answer: str
    level: int = -1  # difficulty knob of a procedural task; -1 when unknown


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling overrides; None = the engine's default. temperature 0 = greedy.
    `max_tokens` bounds the whole response (a resumed prefix included); `segment_tokens` stops a row
    after that many new tokens this time, as a partial rollout (status "partial") to resume later.
    `keep_kv`: such a row will be continued at once, under the same weights (TreePO's branches), so an
    engine that can keeps its KV cache for the continuation (the torch engine; vLLM's prefix cache does
    it by itself)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    segment_tokens: int | None = None
    keep_kv: bool = False


DEFAULT_SAMPLING = SamplingParams()  # frozen: one shared instance for every request without overrides


@dataclass
class Request:
    """Ask the engine for `n` samples of `prompt`, charged to `purpose`.

    `prefix` continues a partial rollout (n must then be 1): the engine prefills prompt + prefix and
    generates at most max_tokens - len(prefix) more. `id` is set by the driver when it submits."""

    prompt: Prompt
    n: int
    purpose: str = "train"
    sampling: SamplingParams = DEFAULT_SAMPLING
    prefix: "Rollout | None" = None
    id: int = -1


_ROLLOUT_TAG = "__rollout__"  # marks a Rollout inside a rollout's meta in its plain state
KIND_TAG = "__rollout_kind__"  # in a plain state: a rollout of another class (a host's), by its kind
# Rollout classes other than Rollout that a planner's state may hold (a host's own rollouts: verl's keep
# their TransferQueue fields), by kind; each registers itself where it is defined (`rollout_kind`), so
# Rollout.from_state, which components call, rebuilds it as what it was. Filled at import, never mutated after.
_ROLLOUT_KINDS: dict[str, type] = {}


def rollout_kind(name: str):
    """Register a rollout class whose `to_state` writes {KIND_TAG: name}; it provides `from_state`."""
    def deco(cls):
        if name in _ROLLOUT_KINDS:
            raise ValueError(f"rollout kind {name!r} registered twice")
        _ROLLOUT_KINDS[name] = cls
        return cls
    return deco


LINEAGE_KEYS = ("prefix", "tokens_by_kind", "tree_path", "share", "branched", "new_rollout")


@dataclass(eq=False)
class Lineage:
    """Where a rollout's tokens came from (typed since 0.4; before, free-form `meta` keys).

    `prefix`: the rollout this one continues (a resumed partial row, a TreePO branch's parent, an accepted
    SPEC-RL draft): its tokens are this rollout's first ones, charged when it was generated.
    `tokens_by_kind`: this rollout's own tokens by how they were produced ({"decoded": k}, {"draft": k},
    {"shared": k}); None: all of them decoded. `tree_path`: a TreePO node's path (root sample, branch, ...);
    None outside a tree. `share`: several leaves continue this node (its tokens count as shared).
    `branched`: a branch already continues this node; `new_rollout`: 1 when this branch counts as a rollout
    of its own (every branch after a node's first does)."""

    prefix: "Rollout | None" = None
    tokens_by_kind: dict | None = None
    tree_path: tuple | None = None
    share: bool = False
    branched: bool = False
    new_rollout: int = 0


@dataclass
class Rollout:
    """One sampled response.

    token_ids_T / logprobs_T are the response tokens (prompt excluded) and the behaviour policy's
    log-probabilities of them (mu, log softmax(logits / temperature) of the sampled token).
    `versions_T` is the policy version that produced each token (None: all `policy_version`, the
    version at the start of generation); a resumed partial mixes versions. `entropy_T` is the
    per-token entropy of the sampling distribution and `entropy` its mean (kept as the engine
    accumulated it, so that it is the same float in every run). `reward_parts` holds the reward's
    components when the reward function returns several; None for a scalar reward.
    """

    prompt_id: int
    prompt_ids: list[int]
    token_ids_T: torch.Tensor
    logprobs_T: torch.Tensor
    text: str
    finish_reason: str
    policy_version: int
    purpose: str = "train"
    entropy: float = 0.0
    reward: float = 0.0
    correct: bool = False
    reward_parts: tuple[float, ...] | None = None
    status: str = "done"
    fate: str = "new"
    temperature: float = 1.0  # the sampling temperature (the learner scores at the same one)
    entropy_T: torch.Tensor | None = None
    versions_T: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)  # what planners attach (is_weight, a head's readings)
    lineage: Lineage = field(default_factory=lambda: Lineage())  # where its tokens came from

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids_T.numel())

    @property
    def oldest_version(self) -> int:
        return int(self.versions_T.min()) if self.versions_T is not None and self.versions_T.numel() else self.policy_version

    def tokens_by_kind(self) -> dict[str, int]:
        """Its own tokens by how they were produced (all decoded unless its lineage says otherwise)."""
        kinds = self.lineage.tokens_by_kind
        return dict(kinds) if kinds else {"decoded": self.num_tokens}

    def to_state(self) -> dict:
        """Plain python/numpy values, for planners that keep rollouts in their state_dict."""
        d = {f.name: (v.detach().cpu().numpy().copy() if isinstance(v, torch.Tensor)
                      else list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
             for f in fields(self) if f.name != "lineage" for v in [getattr(self, f.name)]}
        # a resumed row's carried prefix (a Rollout) is kept as its own state: settling the row later moves
        # the prefix's tokens with it, so a checkpoint must not lose the chain
        lin = self.lineage
        d["lineage"] = {"prefix": None if lin.prefix is None else {_ROLLOUT_TAG: lin.prefix.to_state()},
                        "tokens_by_kind": None if lin.tokens_by_kind is None else dict(lin.tokens_by_kind),
                        "tree_path": None if lin.tree_path is None else list(lin.tree_path),
                        "share": lin.share, "branched": lin.branched, "new_rollout": lin.new_rollout}
        return d

    @classmethod
    def from_state(cls, d: dict) -> "Rollout":
        kind = d.get(KIND_TAG)
        if kind is not None:  # another class's rollout (a host's), as it was saved
            if kind not in _ROLLOUT_KINDS:
                raise ValueError(f"a planner's state holds a rollout of kind {kind!r}, which no loaded module "
                                 "defines (load the state through the integration that saved it)")
            return _ROLLOUT_KINDS[kind].from_state(d)
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["token_ids_T"] = torch.as_tensor(kw["token_ids_T"], dtype=torch.long).clone()
        kw["logprobs_T"] = torch.as_tensor(kw["logprobs_T"], dtype=torch.float32).clone()
        for k, dt in (("entropy_T", torch.float32), ("versions_T", torch.long)):
            if kw.get(k) is not None:
                kw[k] = torch.as_tensor(kw[k], dtype=dt).clone()
        kw["prompt_ids"] = [int(t) for t in kw["prompt_ids"]]
        if kw.get("reward_parts") is not None:
            kw["reward_parts"] = tuple(float(x) for x in kw["reward_parts"])
        if kw.get("purpose") == "discarded":  # checkpoints from before fates: a filtered train rollout
            kw["purpose"], kw["fate"] = "train", "discarded"
        if kw.get("fate") in (None, "open"):  # restored outside its step: never charged again
            kw["fate"] = "new"
        meta = dict(kw.get("meta") or {})
        lin = dict(kw.get("lineage") or {})
        for k in LINEAGE_KEYS:  # checkpoints from before 0.4 kept the lineage in meta
            if k in meta:
                lin[k] = meta.pop(k)
        if meta.pop("tree", False) and lin.get("tree_path") is None:
            lin["tree_path"] = ()
        pre = lin.get("prefix")
        if isinstance(pre, dict) and _ROLLOUT_TAG in pre:
            lin["prefix"] = cls.from_state(pre[_ROLLOUT_TAG])
        if lin.get("tree_path") is not None:
            lin["tree_path"] = tuple(int(x) for x in lin["tree_path"])
        kw["meta"], kw["lineage"] = meta, Lineage(**lin)
        return cls(**kw)


_NO_TOKENS = torch.empty(0, dtype=torch.long)
_NO_LOGPROBS = torch.empty(0, dtype=torch.float32)


@dataclass(slots=True, eq=False)
class LightRollout:
    """A rollout known only by its outcome and length: what a host trainer (TRL, verl) or the
    simulator hands to the planners. Same field names as Rollout where planners and the ledger read
    them; no tokens (`token_ids_T` is empty and `num_tokens` is a field)."""

    prompt_id: int
    num_tokens: int
    correct: bool
    reward: float
    entropy: float = 0.0
    purpose: str = "train"
    finish_reason: str = "eos"
    policy_version: int = 0
    fate: str = "new"
    status: str = "done"
    prompt_ids: tuple = ()
    text: str = ""
    reward_parts: tuple | None = None
    token_ids_T: torch.Tensor = field(default=_NO_TOKENS)
    logprobs_T: torch.Tensor = field(default=_NO_LOGPROBS)

    def tokens_by_kind(self) -> dict[str, int]:
        return {"decoded": self.num_tokens}


@dataclass
class Group:
    """All rollouts of one prompt in one step (any size, possibly grown over several stages).
    `meta` carries what a planner attaches for the learner (e.g. PVPO's reference pass rate)."""

    prompt: Prompt
    rollouts: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_outcomes(cls, prompt: Prompt, rewards, lengths=None, correct=None) -> "Group":
        """A light group from per-sample rewards (and lengths, correctness): the per-group summary a
        host trainer has. Correct defaults to reward >= 1, as for scalar rewards in the Scorer."""
        rewards = [float(r) for r in rewards]
        lengths = [0] * len(rewards) if lengths is None else [int(x) for x in lengths]
        correct = [r >= 1.0 for r in rewards] if correct is None else [bool(c) for c in correct]
        if not len(rewards) == len(lengths) == len(correct):
            raise ValueError("Group.from_outcomes: rewards, lengths and correct differ in length")
        return cls(prompt, [LightRollout(prompt.id, L, c, r) for r, L, c in zip(rewards, lengths, correct)])

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

    def extend(self, other: "Group") -> None:
        """Add a later stage's rollouts of the same prompt (the simulator's groups merge by counts)."""
        self.rollouts.extend(other.rollouts)

    def counts(self) -> tuple[int, int, int, float, bool]:
        """(n, num_correct, tokens, mean_entropy, zero_variance) in one call: what the history and the
        simulator read of every group every step (a count-level group answers from its counts)."""
        return self.n, self.num_correct, self.tokens, self.mean_entropy, self.zero_variance

    def statuses(self) -> set[str]:
        """The statuses of its rollouts ("done", "partial", "pruned", ...): what the driver checks every
        group for, answered by a count-level group (the simulator's) without building its rollouts."""
        return {getattr(r, "status", "done") for r in self.rollouts}

    def prefixes(self) -> list:
        """The prefixes its rollouts continue (`lineage.prefix`: a resumed row's carried part, a tree
        branch's parent, an accepted draft); empty for rows generated from the prompt alone."""
        return [r.lineage.prefix for r in self.rollouts if isinstance(r, Rollout) and r.lineage.prefix is not None]

    def versions(self) -> dict[int, int]:
        """{oldest policy version among a rollout's tokens: number of rollouts} (staleness)."""
        out: dict[int, int] = {}
        for r in self.rollouts:
            v = r.oldest_version if hasattr(r, "oldest_version") else r.policy_version
            out[v] = out.get(v, 0) + 1
        return out

    def segments(self) -> "list[Segment] | None":
        """Its rollouts as count-level Segments, or None when it holds them one by one (every group but
        the simulator's, until something reads its rollouts). The ledger moves fates through either."""
        return None


@dataclass(slots=True, eq=False)
class Segment:
    """Rollouts known by their totals only (a count-level group's, the simulator's): `n` rollouts of one
    purpose, all decoded, with `tokens` tokens between them and one fate, which the ledger moves."""

    purpose: str
    n: int
    tokens: int
    fate: str = "new"


@dataclass
class Batch:
    """The groups the learner trains on in one step. `stats`: the same groups as columns
    (core/history.py GroupStats), when the step driver already counted them (every group of the step
    trains); a learner that reads counts only (the simulator's) takes them instead of counting again."""

    groups: list[Group]
    step: int = 0
    stats: GroupStats | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def rollouts(self) -> list:
        return [r for g in self.groups for r in g.rollouts]

    def __len__(self) -> int:
        return len(self.groups)
