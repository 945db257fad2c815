"""The finite guard: an update whose statistics or new logits are not finite is undone, so no checkpoint
ever holds a non-finite weight and a run stops with a reason after `max_skipped_steps` in a row."""
from __future__ import annotations

import copy
import math

import torch

from ..learn.learner import Learner
from ..policy.policy import Policy


class FiniteGuard:
    """Wraps the learner for the driver: an update whose loss, gradient norm or any other statistic, or
    whose new logits (on a few of the batch's sequences) are not finite is undone: trained weights,
    optimizer, learner RNG and estimator state go back to before it, and it counts in `skipped`.

    What is kept to undo a step, and when (the logits can only be probed after the step, so finite
    statistics alone cannot prove a step safe: `learner.lr=1e10` gives finite gradients and overflowing
    logits):
    - before each update: the learner's small state (minibatch RNG, estimator tracker, recomposer buffer)
      and the policy version;
    - just before the update's first optimizer step (an optimizer pre-step hook), so an update that steps
      nothing copies nothing: the parameters the optimizer trains and its state, cloned on their own
      device (no device-to-host copy). Frozen weights (a LoRA run's base model) and buffers are not
      copied, since no step changes them. `snapshot_bytes` is the size of the last such copy: under full
      fine-tuning with AdamW, 3x the trained weights; under LoRA, 3x the adapter's."""

    PROBE_ROWS = 4

    def __init__(self, learner: Learner, policy: Policy):
        self.learner, self.policy = learner, policy
        self.skipped = 0
        self.snapshot_bytes = 0
        self._trained: list[torch.Tensor] = []  # the optimizer's parameters, at the first step of an update
        self._snap: tuple | None = None  # (weights, optimizer state) before that step; None until taken
        self._hook = learner.opt.register_step_pre_hook(self._before_step)

    @property
    def version(self) -> int:
        return self.learner.version

    def update(self, batch) -> dict:
        small = (_clone({k: v for k, v in self.learner.state_dict().items() if k != "opt"}), self.policy.version)
        self._snap = None
        stats = self.learner.update(batch)
        if not stats.get("updated"):  # nothing changed
            return stats
        bad = [k for k, v in stats.items() if isinstance(v, float) and not math.isfinite(v)]
        if not bad and self._finite_logits(batch):
            return stats
        if self._snap is not None:  # an optimizer step was taken: put back what it changed
            weights, opt = self._snap
            with torch.no_grad():
                for p, w in zip(self._trained, weights):
                    p.copy_(w)
        else:
            opt = self.learner.opt.state_dict()
        self.learner.load_state_dict({**small[0], "opt": opt})
        self.policy.version = small[1]
        self._snap = None
        self.skipped += 1
        return {**stats, "updated": 0, "skipped": 1}

    def _before_step(self, opt: torch.optim.Optimizer, args, kwargs) -> None:
        """Optimizer pre-step hook: keep the trained weights and optimizer state once per update."""
        if self._snap is not None:
            return
        self._trained = [p for g in opt.param_groups for p in g["params"]]
        weights = _clone(self._trained)
        state = _clone(opt.state_dict())
        self._snap = (weights, state)
        self.snapshot_bytes = sum(w.numel() * w.element_size() for w in weights) + _tensor_bytes(state)

    @torch.no_grad()
    def _finite_logits(self, batch) -> bool:
        """Finite statistics (the gradient norm among them) from finite weights give finite weights, short of
        an absurd lr; finite weights can still give logits that overflow, which sampling would fail on.
        (Every weight is checked before each checkpoint.)"""
        seqs = [r.prompt_ids + r.token_ids_T.tolist() for r in batch.rollouts[: self.PROBE_ROWS]]
        ids, mask = self.policy._right_padded(seqs)
        return bool(torch.isfinite(self.policy.full_logits(ids, mask)).all())


def _clone(x):
    """A copy of a state dict: tensors cloned, containers rebuilt, other values deep-copied (a fraction of
    deepcopy's cost on an optimizer state)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return copy.deepcopy(x)


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, dict):
        return sum(_tensor_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(v) for v in x)
    return 0
