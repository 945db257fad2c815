"""The rollout-worker pool of `--mode async` without Ray: one worker (its own policy copy and engine) in
this process, driven by the async loop's generation thread. `--workers 0` selects it.

It has the same surface as RayEnginePool (the Engine protocol plus update_weights with a state dict,
prompt_stats, state_dict, wait_ready, restarts, shutdown), so the async loop runs unchanged over either.
The worker's engine is seeded like Ray worker 0, so with S = 0 an async run reproduces the synchronous
loop bit for bit, Ray or not. What it does not give: a second core (the learner and generation share
this process; torch releases the GIL in its kernels, so they still overlap) and worker failure recovery.
"""
from __future__ import annotations

from ..core.types import Request
from .ray_pool import EngineWorker


class LocalEnginePool:
    def __init__(self, model_dir: str, engine: str = "torch", engine_kwargs: dict | None = None, seed: int = 0):
        self.worker = EngineWorker(str(model_dir), engine, {**(engine_kwargs or {}), "seed": int(seed)}, threads=None)
        self.version = 0
        self.restarts = 0  # nothing to restart: a failure here is the trainer's own

    def wait_ready(self) -> None:
        pass

    # ---- the Engine protocol ---------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self.worker.engine.pending

    def submit(self, requests: list[Request]) -> None:
        self.worker.submit(requests)

    def poll(self, max_steps: int | None = None) -> list:
        return self.worker.poll(max_steps)

    def abort(self, request_ids) -> list:
        return self.worker.abort(list(request_ids))

    def update_weights(self, version: int, state_dict=None) -> None:
        self.version = int(version)
        self.worker.update_weights(self.version, state_dict)

    def prompt_stats(self, texts):
        return self.worker.prompt_stats(texts)

    def state_dict(self) -> dict:
        return {"workers": [self.worker.state_dict()]}

    def load_state_dict(self, s: dict) -> None:
        states = s.get("workers", [])
        if len(states) == 1:
            self.worker.load_state_dict(states[0])

    def cpu_seconds(self) -> float:
        """0: the worker is a thread of this process, so the run's own CPU clock already counts it."""
        return 0.0

    def shutdown(self) -> None:
        pass
