"""How old a trained token may be: one staleness policy, built from `max_staleness`, and the small
thread-safe gate of asynchronous training that applies it.

`StalenessPolicy` is the one rule every part asks: the async loop's admission and its choice of
sampling weights, the check on partial rows resumed across steps (APRIL), and the staleness metric.
It applies in async mode always (S defaults to 1 there) and in the synchronous loop only when the user
sets `max_staleness` (unset, synchronous partial rows are never dropped, as recorded before 0.4).
Replayed and reused rows (AR3PO's stored responses, replay buffers) are not governed by it: each such
component declares its own age limit.

Form chosen: **admission control before rollout** (AReaL, Fu et al. 2025, arXiv 2505.24298; [CODE]
areal/core/staleness_manager.py): the rollouts of training step t may start only once the learner has
published version t - S, so every token of step t is sampled from a policy at most S updates older
than the one that trains on it. AReaL states it in rollouts as capacity = (S + version + 1)·B -
(accepted + running); rollwise plans whole steps, so the same bound reads per step: step t is admitted
iff t <= version + S.

Partial rollouts resumed across steps (APRIL, CoPRIS) can outlive that bound: a row started at step t
and resumed at step t + 1 carries tokens of two versions. Admission alone cannot see it, so
`fresh_enough` checks each carried row again when it is resumed: the version that will train it - the
oldest version among its tokens <= S (prime-rl and verl v1 check at consume time too). A row that
fails is dropped with its group, its tokens charged as aborted, and its prompt asked for again from
scratch. In async mode step t samples from version t - S exactly, so a row carried from step t - 1 is
S + 1 old at step t and is always dropped: partial rows survive a step only with S set above the lag
they need (e.g. S = 2 keeps a row carried once when fresh rows lag 1).

Known bugs this is tested against (tests/test_async.py, tests/test_staleness.py):
  - AReaL #1388: staleness above the bound after recovery from a checkpoint (a restored gate must
    count nothing in flight and restart from the checkpoint's version);
  - prime-rl #1902: an off-by-one where a bound of 0 still mixed two policies (S = 0 must admit step t
    only after version t, i.e. fully synchronous);
  - slime #2092: a requeued sample whose tokens spanned versions [2, 4, 6] (consume-time check on the
    oldest token version);
  - rollwise 0.3: `--mode async` with APRIL never checked resumed rows (the bound was not handed to the
    planner), so a resumed row could be S + 1 versions old.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

ASYNC_DEFAULT = 1  # async mode's bound when the config leaves max_staleness unset
# Deployment modes. one-step-off is async with S = 1 fixed (verl's one_step_off_policy recipe, NeMo-RL's
# async GRPO at max_trajectory_age_steps 1): step t + 1 generates while step t trains, from the weights
# after step t - 1. It is a name for what users ask for, not a second loop.
MODES = ("sync", "one-step-off", "async")
ASYNC_MODES = ("one-step-off", "async")


@dataclass(frozen=True)
class StalenessPolicy:
    """The bound S on a trained token's age (learner version - the version that sampled it); None is no
    bound. Built once per run (`for_run`) and handed to whatever applies it."""

    max_staleness: int | None = None

    def __post_init__(self):
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")

    @classmethod
    def for_run(cls, mode: str, max_staleness: int | None) -> "StalenessPolicy":
        """async: S (1 when unset); one-step-off: 1; sync: S only when the user set it, else unbounded."""
        if mode == "one-step-off":
            if max_staleness not in (None, 1):
                raise ValueError(f"max_staleness: mode one-step-off is async with S = 1, got {max_staleness}; "
                                 "use mode async for another bound")
            return cls(1)
        if mode == "async":
            return cls(ASYNC_DEFAULT if max_staleness is None else int(max_staleness))
        return cls(None if max_staleness is None else int(max_staleness))

    @property
    def bounded(self) -> bool:
        return self.max_staleness is not None

    def admits(self, step: int, version: int) -> bool:
        """Admission: step t may start generating once the learner has published version t - S."""
        return not self.bounded or step <= version + self.max_staleness

    def sampling_version(self, step: int, oldest_kept: int = 0) -> int:
        """The weights that sample step t in async mode: version t - S exactly (the oldest the bound
        allows, so a run is a function of its seed), or the oldest kept at the start of a run."""
        return step if not self.bounded else max(step - self.max_staleness, oldest_kept)

    def fresh_enough(self, oldest_version: int, learner_version: int) -> bool:
        """The consume-time check: a row whose oldest token is more than S versions older than the policy
        that will train it is stale."""
        return not self.bounded or learner_version - oldest_version <= self.max_staleness


class StalenessGate:
    """Admits training steps for generation while the policy allows them (`StalenessPolicy.admits`).
    The generation side calls `admit(step)` (blocking) and `release(step)` once the step's batch is
    handed to the learner; the learner calls `publish(version)` after each update."""

    def __init__(self, max_staleness: int, version: int = 0):
        self.policy = StalenessPolicy(int(max_staleness))
        self.max_staleness = self.policy.max_staleness
        self.version = int(version)  # updates the learner has published
        self.running: set[int] = set()  # steps admitted and not yet consumed
        self._cond = threading.Condition()
        self._closed = False

    def allowed(self, step: int) -> bool:
        return self.policy.admits(step, self.version)

    def admit(self, step: int, timeout: float | None = None) -> bool:
        """Block until `step` is allowed (or the gate closes); True if admitted."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._closed or self.allowed(step), timeout=timeout)
            if not ok or self._closed:
                return False
            self.running.add(step)
            return True

    def release(self, step: int) -> None:
        with self._cond:
            self.running.discard(step)
            self._cond.notify_all()

    def publish(self, version: int) -> None:
        with self._cond:
            if version < self.version:
                raise ValueError(f"policy version went back from {self.version} to {version}")
            self.version = int(version)
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter (shutdown): admit() then returns False."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def fresh_enough(self, oldest_version: int, learner_version: int | None = None) -> bool:
        """The consume-time check against the learner's published version (or the one given)."""
        return self.policy.fresh_enough(oldest_version, self.version if learner_version is None else learner_version)

    # ---- checkpoints: nothing is in flight at a checkpoint, so only the version is state ------------
    def state_dict(self) -> dict:
        return {"max_staleness": self.max_staleness, "version": self.version}

    @classmethod
    def from_state(cls, s: dict, max_staleness: int | None = None) -> "StalenessGate":
        return cls(s["max_staleness"] if max_staleness is None else max_staleness, s["version"])


def lag_metrics(batch, version: int) -> dict:
    """Policy lag of the trained rollouts, measured before the update: the learner's version - the
    oldest version among a rollout's tokens. 0 in synchronous on-policy training; reused and replayed
    rollouts lag (and so will asynchronous ones)."""
    n = sum(g.n for g in batch.groups)
    if not n:
        return {"staleness_max": 0, "staleness_mean": 0.0}
    lag_sum, lag_max = 0, 0
    for g in batch.groups:
        for v, k in g.versions().items():
            lag_sum += (version - v) * k
            lag_max = max(lag_max, version - v)
    return {"staleness_max": int(lag_max), "staleness_mean": lag_sum / n}
