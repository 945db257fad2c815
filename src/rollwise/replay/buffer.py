"""What the replay components share (POPO, experience replay): the buffered group, the replayed copy of a
row, and which of a step's groups may be stored.

A buffered group is a dict {"pid", "version", "var", "rollouts", "uses"}: its prompt, the policy version
that generated it, its reward variance, its trained rows and how often it was replayed. A replayed row is
a copy: same tokens, behaviour log-probs mu and policy_version (so the driver's staleness figures show
its age and a correction that reads mu sees it), with `meta["replay_age"]` (policy versions since it was
generated) and `meta["replay_correction"]` (the learner's off-policy correction it is trained with, by
name, or "unknown" where the host does not say). It was charged when generated and keeps its fate, so
the driver counts it as reused tokens (not decoded again) and the learner's compute for it is charged
like any trained row's.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.types import Group, Rollout


def replay_copy(r: Rollout, age: int, correction: str | None = None) -> Rollout:
    """A copy of a stored rollout for the batch: same tokens, mu and version; its age (and the correction
    it is trained with) in meta. A light row (the simulator's, a host's: outcome and length only) is
    copied as it is."""
    if not isinstance(r, Rollout):
        return replace(r)
    meta = {**r.meta, "replay_age": int(age), "replay_correction": correction or "unknown"}
    return replace(r, token_ids_T=r.token_ids_T.clone(), logprobs_T=r.logprobs_T.clone(),
                   prompt_ids=list(r.prompt_ids), meta=meta, lineage=replace(r.lineage))


def fresh_version(groups: list[Group]) -> int | None:
    """The policy version of this step's fresh rows (the newest among those still open); None if none."""
    versions = [r.policy_version for g in groups for r in g.rollouts if r.fate == "open"]
    return max(versions) if versions else None


def effective_entry(g: Group, skip: set[int]) -> dict | None:
    """A buffer entry for a fresh group that trained with a non-zero reward variance (rows whose id() is
    in `skip`, replayed copies, are left out); None for any other group."""
    rows = [r for r in g.rollouts if id(r) not in skip and r.fate == "trained"]
    if len(rows) < 2 or len({r.reward for r in rows}) < 2:
        return None
    return {"pid": g.prompt.id, "version": max(r.policy_version for r in rows),
            "var": float(np.var([r.reward for r in rows])), "rollouts": rows, "uses": 0}


def replayed_group(e: dict, pool, version: int, correction: str | None) -> Group:
    """The buffered group `e` as a batch group of copies (see replay_copy); its age in Group.meta too."""
    age = version - e["version"]
    return Group(pool[e["pid"]], [replay_copy(r, age, correction) for r in e["rollouts"]], {"replay_age": age})


def entries_state(buffer: list[dict]) -> list[dict]:
    return [{**e, "rollouts": [r.to_state() for r in e["rollouts"]]} for e in buffer]


def entries_from_state(states: list[dict]) -> list[dict]:
    return [{"pid": int(e["pid"]), "version": int(e["version"]), "var": float(e["var"]), "uses": int(e.get("uses", 0)),
             "rollouts": [Rollout.from_state(d) for d in e["rollouts"]]} for e in states]
