"""The Engine protocol over several rollout workers on Ray: each worker is a Ray actor holding its own
copy of the policy and an engine of any registered kind (torch, vllm). The pool is itself an Engine,
so the step driver runs unchanged over one engine or many.

  submit   each request goes to the worker with the fewest rows outstanding (ties: the lowest index),
           so the assignment, and each worker's random stream, is a function of the requests alone
  poll     every busy worker decodes up to max_steps (in parallel); their events come back together
  abort    forwarded to the workers that hold the requests
  update_weights  one `ray.put` of the state dict, loaded by every worker, with its version

A worker that dies (its process killed, out of memory) is replaced by a fresh actor with the current
weights, and the requests it held are submitted again: their partial tokens never came back, so they
were never charged, and every prompt is still answered. `ray.init` is called with a small logical CPU
count when no cluster is running (Ray resources are logical: placement is tested on 2 cores); that cluster's
processes end with this process, even when it is SIGKILLed (_ray_reaper.py).
"""
from __future__ import annotations

import os
import time

from ..core.types import Request
from .engine import Finished


def _ray():
    try:
        import ray
    except ImportError as e:  # an optional part: `pip install rollwise[ray]` / scripts/setup.sh
        raise ValueError("asynchronous mode needs Ray: pip install 'ray==2.60.0' (the README's set-up has it)") from e
    return ray


def start_reaper() -> None:
    """Start _ray_reaper.py, which ends the Ray cluster this process starts when this process ends, even by
    SIGKILL (Ray's agent processes outlived a killed trainer). Linux only (it reads /proc); its own session,
    so a Ctrl-C to the terminal's process group reaches the trainer, whose Ray shuts down, before it."""
    import subprocess
    import sys
    from pathlib import Path

    if not sys.platform.startswith("linux"):
        return
    subprocess.Popen([sys.executable, str(Path(__file__).with_name("_ray_reaper.py")), str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


class EngineWorker:
    """One rollout worker (a Ray actor): a policy copy and its engine. Built from a checkpoint directory
    so that nothing but a path crosses the process boundary at start."""

    def __init__(self, model_dir: str, engine: str, engine_kwargs: dict, threads: int | None = 1):
        import torch

        from ..core import registry
        from ..policy.policy import Policy

        if threads is not None:  # a worker process of its own; in-process (LocalEnginePool) the caller's setting
            torch.set_num_threads(threads)
        self.policy = Policy.load(model_dir)
        self.policy.model.eval()
        self.engine = registry.get("engine", engine).obj.for_policy(self.policy, **engine_kwargs)

    def submit(self, requests):
        self.engine.submit(requests)

    def poll(self, max_steps=None):
        return self.engine.poll(max_steps)

    def abort(self, ids):
        return self.engine.abort(ids)

    def update_weights(self, version, state_dict):
        if state_dict is not None:
            self.policy.model.load_state_dict(state_dict)
        self.policy.version = version
        self.engine.update_weights(version)

    def prompt_stats(self, texts):
        return self.policy.prompt_stats(texts)

    def state_dict(self) -> dict:
        return self.engine.state_dict()

    def load_state_dict(self, s: dict) -> None:
        self.engine.load_state_dict(s)

    def pid(self) -> int:
        return os.getpid()

    def cpu_seconds(self) -> float:
        """This worker process's CPU seconds so far (every thread): the run's own clock cannot see them."""
        return time.process_time()


class RayEnginePool:
    """An Engine over `workers` EngineWorker actors (see the module docstring)."""

    def __init__(self, model_dir: str, workers: int, engine: str = "torch", engine_kwargs: dict | None = None,
                 seed: int = 0, num_cpus: int | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        ray = _ray()
        if not ray.is_initialized():  # a cluster of this process's own: its processes end with it
            start_reaper()
            ray.init(num_cpus=num_cpus or max(workers + 1, 2), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        self.model_dir, self.engine_name = str(model_dir), engine
        self.engine_kwargs, self.seed = dict(engine_kwargs or {}), int(seed)
        self.version, self._weights_ref = 0, None
        self.outstanding: list[list[Request]] = [[] for _ in range(workers)]
        self.workers = [self._start(i) for i in range(workers)]
        self.restarts = 0

    def _start(self, i: int):
        ray = _ray()
        actor = ray.remote(num_cpus=1)(EngineWorker)
        # worker i's random stream: the run's seed for worker 0 (one worker reproduces the sync engine)
        kw = {**self.engine_kwargs, "seed": self.seed + 1000 * i}
        return actor.remote(self.model_dir, self.engine_name, kw)

    def wait_ready(self) -> None:
        """Block until every worker has built its engine (the actors start in the background); one that dies
        meanwhile is replaced."""
        ray = _ray()
        for i in range(len(self.workers)):
            for attempt in range(self.REPLACE_ATTEMPTS + 1):
                try:
                    ray.get(self.workers[i].pid.remote())
                    break
                except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError):
                    if attempt == self.REPLACE_ATTEMPTS:
                        raise ValueError(self._keeps_dying(i)) from None
                    self._replace(i)

    # ---- the Engine protocol ---------------------------------------------------------------
    @property
    def pending(self) -> int:
        return sum(len(x) for x in self.outstanding)

    def submit(self, requests: list[Request]) -> None:
        batches: list[list[Request]] = [[] for _ in self.workers]
        rows = [sum(r.n for r in out) for out in self.outstanding]
        for r in requests:
            i = min(range(len(self.workers)), key=lambda k: (rows[k], k))
            batches[i].append(r)
            rows[i] += r.n
        for i, batch in enumerate(batches):
            if batch:
                self.outstanding[i] += batch
                self.workers[i].submit.remote(batch)

    def poll(self, max_steps: int | None = None) -> list:
        busy = [i for i, out in enumerate(self.outstanding) if out]
        results = self._call(busy, "poll", lambda i: (max_steps,))
        events = []
        for i in busy:
            for e in results.get(i, []):
                if isinstance(e, Finished):
                    self._done(i, e.request.id)
                events.append(e)
        return events

    def abort(self, request_ids) -> list[Finished]:
        ids = set(request_ids)
        holders = [i for i, out in enumerate(self.outstanding) if any(r.id in ids for r in out)]
        results = self._call(holders, "abort", lambda i: ([r.id for r in self.outstanding[i] if r.id in ids],))
        out = []
        for i in holders:
            for e in results.get(i, []):
                self._done(i, e.request.id)
                out.append(e)
        return out

    def update_weights(self, version: int, state_dict=None) -> None:
        ray = _ray()
        self._weights_ref = ray.put(state_dict) if state_dict is not None else self._weights_ref
        self.version = int(version)
        self._call(range(len(self.workers)), "update_weights", lambda i: (self.version, self._weights_ref))

    def prompt_stats(self, texts):
        return self._call([0], "prompt_stats", lambda i: (texts,))[0]

    def state_dict(self) -> dict:
        """Every worker's engine state (its random stream): taken at a quiescent checkpoint."""
        return {"workers": self._call(range(len(self.workers)), "state_dict", lambda i: ())}

    def load_state_dict(self, s: dict) -> None:
        states = s.get("workers", {})
        if len(states) == len(self.workers):
            self._call(range(len(self.workers)), "load_state_dict", lambda i: (states[i],))

    def shutdown(self) -> None:
        ray = _ray()
        for w in self.workers:
            ray.kill(w)

    # ---- worker failure -----------------------------------------------------------------------
    def cpu_seconds(self) -> float:
        """The workers' CPU seconds so far, summed. A replaced worker's count starts again at its replacement's
        (what the dead process spent is not recoverable), so after a restart this undercounts."""
        return float(sum(self._call(range(len(self.workers)), "cpu_seconds", lambda i: ()).values()))

    def kill_worker(self, i: int) -> None:
        """Kill worker i's process (tests and chaos drills); the pool notices at its next call."""
        _ray().kill(self.workers[i], no_restart=True)

    def _call(self, indices, method: str, args) -> dict:
        """Call `method` on the given workers in parallel; a dead worker is replaced, its outstanding
        requests resubmitted to the new one, and its result is empty this time."""
        ray = _ray()
        futures = {i: getattr(self.workers[i], method).remote(*args(i)) for i in indices}
        out = {}
        for i, f in futures.items():
            try:
                out[i] = ray.get(f)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError):
                self._replace(i)
                # poll, abort: the dead worker's events never came (its requests were resubmitted); any other
                # call (the weights, the engine state, prompt statistics) is made again on its replacement
                out[i] = [] if method in ("poll", "abort") else ray.get(getattr(self.workers[i], method).remote(*args(i)))
        return out

    REPLACE_ATTEMPTS = 5  # a worker that dies this many times in a row while being replaced stops the run

    def _replace(self, i: int) -> None:
        ray = _ray()
        for _ in range(self.REPLACE_ATTEMPTS):
            self.restarts += 1
            self.workers[i] = self._start(i)
            try:  # the new worker can die too before it has the weights (the chaos test kills at random)
                if self._weights_ref is not None:
                    ray.get(self.workers[i].update_weights.remote(self.version, self._weights_ref))
                break
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError):
                continue
        else:
            raise ValueError(self._keeps_dying(i))
        if self.outstanding[i]:  # requeued: nothing of theirs came back, so nothing was charged
            self.workers[i].submit.remote(list(self.outstanding[i]))

    def _keeps_dying(self, i: int) -> str:
        return (f"rollout worker {i} died {self.REPLACE_ATTEMPTS} times in a row as it started; check the machine's "
                "memory and the worker logs under /tmp/ray/session_latest/logs")

    def _done(self, i: int, request_id: int) -> None:
        self.outstanding[i] = [r for r in self.outstanding[i] if r.id != request_id]
