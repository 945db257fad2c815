"""The staleness bound of asynchronous training, as a small thread-safe class.

Form chosen: **admission control before rollout** (AReaL, Fu et al. 2025, arXiv 2505.24298; [CODE]
areal/core/staleness_manager.py): the rollouts of training step t may start only once the learner has
published version t - S, so every token of step t is sampled from a policy at most S updates older
than the one that trains on it. AReaL states it in rollouts as capacity = (S + version + 1)·B -
(accepted + running); rollwise plans whole steps, so the same bound reads per step: step t is admitted
iff t <= version + S.

Partial rollouts resumed across steps (APRIL, CoPRIS) can outlive that bound: a row started at step t
and resumed at step t + 2 carries tokens of two versions. Admission alone cannot see it, so
`fresh_enough` checks each rollout again when it is consumed: learner version - the oldest version
among its tokens <= S (prime-rl and verl v1 check at consume time too). A row that fails is dropped, its
tokens charged as aborted, and its prompt requeued from scratch.

Known bugs this is tested against (tests/test_async.py):
  - AReaL #1388: staleness above the bound after recovery from a checkpoint (a restored gate must
    count nothing in flight and restart from the checkpoint's version);
  - prime-rl #1902: an off-by-one where a bound of 0 still mixed two policies (S = 0 must admit step t
    only after version t, i.e. fully synchronous);
  - slime #2092: a requeued sample whose tokens spanned versions [2, 4, 6] (consume-time check on the
    oldest token version).
"""
from __future__ import annotations

import threading


class StalenessGate:
    """Admits training steps for generation while they stay within `max_staleness` updates of the
    learner. The generation side calls `admit(step)` (blocking) and `release(step)` once the step's
    batch is handed to the learner; the learner calls `publish(version)` after each update."""

    def __init__(self, max_staleness: int, version: int = 0):
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.max_staleness = int(max_staleness)
        self.version = int(version)  # updates the learner has published
        self.running: set[int] = set()  # steps admitted and not yet consumed
        self._cond = threading.Condition()
        self._closed = False

    def allowed(self, step: int) -> bool:
        """Step t may start generating once the learner has published version t - S."""
        return step <= self.version + self.max_staleness

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
        """The consume-time check: a rollout whose oldest token is more than S versions old is stale."""
        v = self.version if learner_version is None else learner_version
        return v - oldest_version <= self.max_staleness

    # ---- checkpoints: nothing is in flight at a checkpoint, so only the version is state ------------
    def state_dict(self) -> dict:
        return {"max_staleness": self.max_staleness, "version": self.version}

    @classmethod
    def from_state(cls, s: dict, max_staleness: int | None = None) -> "StalenessGate":
        return cls(s["max_staleness"] if max_staleness is None else max_staleness, s["version"])
