"""Scoring rollouts with a reward function that may misbehave.

A reward function is called as fn(response, answer) and returns either
- a float: the reward; the rollout is correct when it is >= 1; or
- a mapping {name: float} of reward components (e.g. {"correct": 1.0, "format": 1.0}). The rollout keeps
  them in `Rollout.reward_parts` (in a fixed name order) for multi-reward estimators such as GD2PO, and
  its scalar `reward` is their weighted sum, so every other part of the pipeline works unchanged.

Component weights [INF, rollwise's choice]: `Scorer(weights=...)` if given, else the weights the
function declares as a `reward_weights` attribute (for a task's bound `verify`, the task's attribute,
e.g. `task_options.reward_weights` of the arithmetic task), else the *mean* of the components. The mean
keeps the reward in [0, 1] when every component is, which binary-reward code relies on (MSSR's Beta
baseline, `reward >= 1` as "correct" for scalar rewards). Declared weights also fix the component
names up front; otherwise the first mapping returned fixes them, and a later mapping with other names
is an error.

Correctness with components: the component named `correct_part` ("correct" by default) >= 1; without
such a component, the weighted sum >= 1 (with the mean: every component at its maximum of 1).

Range: every reward (a scalar, or each component) must lie in the function's declared `reward_range`
(an attribute `(low, high)` of the function or of the task it is bound to, like `reward_weights`;
default (0.0, 1.0)), and "correct" means reaching `high` (1 by default, as above). A value outside the
range, or a non-finite one, is the function's error, counted like any other: correctness never follows
from magnitude (a reward of 1e30 is an error, not a right answer).

A user reward function (`--reward module:function`) runs in a separate worker process
(`RewardWorker`), never in the trainer: it is called on a group's rollouts at once, with a timeout for the
whole call and a memory limit (RLIMIT_AS). If it raises, calls sys.exit, returns a non-finite number or
something that is not a number or a mapping of numbers, that rollout scores 0 and the worker goes on. If
it hangs, spins, exits the process (os._exit) or crashes, the worker is killed (with every process it
started: the worker's process group, see `RewardWorker`) and replaced, and the
rollouts of that call it had not scored yet score 0. Either way every failed rollout counts in `errors`
with all components 0 (when their names are not known yet, `score` fills the zeros once a later rollout
of the same call fixes them), and the run goes on. The task's own verifier is trusted and called inline;
its errors propagate, a non-finite reward from it included. The worker imports the user's module with the
trainer's import path and then the current directory, so `--reward myreward:fn` finds ./myreward.py.

The built-in `--reward math` (math-verify's check, `_math_reward.py`) runs in the same kind of worker.
"""
from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core import trust
from ..core.types import Group

RewardFn = Callable[[str, str], "float | Mapping[str, float]"]


DEFAULT_RANGE = (0.0, 1.0)


def declared_range(fn) -> tuple[float, float]:
    """The `reward_range` a reward function (or the task it is bound to) declares, else DEFAULT_RANGE."""
    for owner in (fn, getattr(fn, "__self__", None)):
        r = getattr(owner, "reward_range", None)
        if r is not None:
            return check_range(r, f"reward_range of {getattr(fn, '__qualname__', fn)!r}")
    return DEFAULT_RANGE


def check_range(r, what: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in r)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected (low, high), got {r!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"{what}: expected finite low < high, got {r!r}")
    return low, high


def declared_weights(fn) -> dict[str, float] | None:
    """Component weights a reward function declares: its own `reward_weights` attribute, or that of
    the object it is bound to (a task's `verify`)."""
    for owner in (fn, getattr(fn, "__self__", None)):
        w = getattr(owner, "reward_weights", None)
        if w:
            return {str(k): float(v) for k, v in dict(w).items()}
    return None


@dataclass(frozen=True)
class Score:
    reward: float
    correct: bool
    parts: tuple[float, ...] | None = None  # components in Scorer.part_names order; None for a scalar reward


class RewardError(Exception):
    """A user reward function failed on one rollout (raised, timed out, exited, returned garbage)."""


class Scorer:
    """Scores responses with `fn(response, answer)`. Trusted (the task's verifier): `fn` is a callable
    called inline. Untrusted (a user's reward): `fn` is its 'module:function' spec and runs in a
    `RewardWorker` process; `timeout_s` bounds one call (a group's rollouts, or a chunk of evaluation
    prompts) and `memory_mb` the worker's address space (0: no limit). `own`: rollwise's built-in reward
    (not named by a data file, so not subject to core/trust.py's rule)."""

    def __init__(self, fn: RewardFn | str, trusted: bool = True, timeout_s: float = 5.0,
                 weights: Mapping[str, float] | None = None, correct_part: str = "correct", memory_mb: int = 0,
                 path: list[str] = (), own: bool = False):
        self.fn, self.trusted, self.timeout_s = fn, trusted, timeout_s
        self.worker = None
        if not trusted:
            if not isinstance(fn, str):
                raise TypeError("an untrusted reward runs in a worker process, so it is named 'module:function', "
                                f"got {fn!r}")
            self.worker = RewardWorker(fn, timeout_s, memory_mb, path, own=own)
        declared = self.worker.weights if self.worker is not None else declared_weights(fn)
        self.low, self.high = (self.worker.range if self.worker is not None else declared_range(fn))
        self.weights = {str(k): float(v) for k, v in weights.items()} if weights else declared
        self.part_names: tuple[str, ...] | None = tuple(self.weights) if self.weights else None
        self.correct_part = correct_part
        self.errors = 0  # rollouts whose reward function raised, timed out or returned garbage
        self.scored = 0  # rollouts scored, failed ones included
        self.last_error: str | None = None

    def judge(self, response: str, answer: str) -> Score:
        """Reward, correctness and components of one response."""
        return self.judge_many([(response, answer)])[0]

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Score]:
        """Scores of (response, answer) pairs: for a user reward, one call to its worker."""
        if self.trusted:
            self.scored += len(pairs)
            return [self._combine(self._coerce(self.fn(r, a))) for r, a in pairs]
        out = []
        for ok, raw in self.worker.call(pairs) if pairs else []:
            self.scored += 1
            try:
                if not ok:
                    raise RewardError(raw)
                out.append(self._combine(self._coerce(raw)))
            except Exception as e:  # noqa: BLE001 - any failure of user code is a zero reward, not a crash
                self.errors += 1
                self.last_error = str(e)
                out.append(Score(0.0, False, None if self.part_names is None else (0.0,) * len(self.part_names)))
        return out

    def reward(self, response: str, answer: str) -> float:
        return self.judge(response, answer).reward

    def score(self, groups: list[Group]) -> None:
        """Score every rollout: one worker call per group for a user reward."""
        rollouts = [r for g in groups for r in g.rollouts]
        for g in groups:
            for r, s in zip(g.rollouts, self.judge_many([(r.text, g.prompt.answer) for r in g.rollouts])):
                r.reward, r.correct, r.reward_parts = s.reward, s.correct, s.parts
        if self.part_names is not None:  # failures scored before the first mapping fixed the names
            for r in rollouts:
                if r.reward_parts is None:
                    r.reward_parts = (0.0,) * len(self.part_names)

    def close(self) -> None:
        """Stop the worker process (a later call starts a fresh one)."""
        if self.worker is not None:
            self.worker.close()

    # ---- internals --------------------------------------------------------------------------
    def _coerce(self, raw) -> float | tuple[float, ...]:
        """A float, or the components as floats in part_names order (fixing the names on first use).
        A non-finite value is the reward function's error: it would poison every advantage of its group."""
        if not isinstance(raw, Mapping):
            if self.part_names is not None:
                raise ValueError(f"reward function returned {raw!r}, expected components {self.part_names}")
            return self._in_range(float(raw), "reward")
        parts = {str(k): self._in_range(float(v), f"reward component {k!r}") for k, v in raw.items()}
        if not parts:
            raise ValueError("reward function returned no components")
        if self.part_names is None:
            self.part_names = tuple(parts)
        elif set(parts) != set(self.part_names):
            raise ValueError(f"reward components {sorted(parts)} differ from {sorted(self.part_names)}")
        return tuple(parts[n] for n in self.part_names)

    def _combine(self, value: float | tuple[float, ...]) -> Score:
        if not isinstance(value, tuple):
            return Score(value, value >= self.high)
        names = self.part_names
        if self.weights:
            reward = sum(self.weights[n] * p for n, p in zip(names, value))
        else:
            reward = sum(value) / len(value)
        top = self.high
        correct = value[names.index(self.correct_part)] >= top if self.correct_part in names else reward >= top
        return Score(reward, correct, value)

    def _in_range(self, x: float, what: str) -> float:
        """A non-finite value would poison every advantage of its group; one outside the declared range
        would make correctness a matter of magnitude. Both are the reward function's error."""
        if not math.isfinite(x):
            raise ValueError(f"reward function returned a non-finite {what} ({x})")
        if not self.low <= x <= self.high:
            raise ValueError(f"reward function returned {what} {x:g}, outside its reward_range "
                             f"[{self.low:g}, {self.high:g}] (declare reward_range = (low, high) on it to widen it)")
        return x


# the built-in rewards: name -> {reward_options.extract: the function in _math_reward.py}
MATH_EXTRACTS = {"auto": "auto", "boxed": "boxed", "####": "hashes", "number": "number"}


def builtin_reward(name: str, options: dict) -> tuple[str, list[str]] | None:
    """(spec, extra import path) of a built-in reward ("math"), or None for a user's 'module:function'.
    The built-in's module is imported in the worker as a top-level module from this directory, so the
    worker never imports rollwise (nor torch)."""
    if name != "math":
        return None
    how = MATH_EXTRACTS[options.get("extract", "auto")]  # config.validate has checked the option
    return f"_math_reward:{how}", [str(Path(__file__).parent)]


WORKER_SCRIPT = Path(__file__).with_name("_reward_worker.py")
_TIMEOUT, _EOF = object(), object()


class RewardWorker:
    """A user reward function in its own process (`_reward_worker.py`), so that nothing it does can stop,
    block or starve the trainer. `call(pairs)` scores pairs in one request with one deadline; a worker
    that misses it, exits or crashes is killed and replaced by a fresh one at the next call.

    Starting it imports the function: a bad spec or a module that fails to import is a ValueError here,
    before any training.

    `sandbox` (`sandbox.worker_settings()`): once the function is imported and has scored the `warm`
    pairs, the worker confines itself (no network, read-only file system but a private /tmp, an
    unprivileged user, no new processes) and must score them the same again; it starts with an environment
    of locale and thread-count variables only, so the trainer's secrets are not in its memory. A
    worker that cannot is a ValueError naming the step (see docs/tasks.md)."""

    START_TIMEOUT_S = 60.0  # importing the user's module (it may import torch) on a busy machine
    SANDBOX_ENV = ("LANG", "LC_ALL", "LC_CTYPE")  # what a sandboxed worker keeps of the trainer's environment

    def __init__(self, spec: str, timeout_s: float, memory_mb: int = 0, path: list[str] = (),
                 sandbox: dict | None = None, warm: list[tuple[str, str]] = (), own: bool = False):
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise ValueError(f"reward {spec!r}: expected 'module:function'")
        self.spec, self.timeout_s, self.memory_mb = spec, float(timeout_s), int(memory_mb)
        self.path = list(path)  # searched before the trainer's own path
        self.own = own  # rollwise's own verifier (`builtin_reward`, reasoning-gym's): named by code, not data
        if not own:  # a user's: their own code only, checked before the worker imports anything
            trust.check_code("reward", spec, extra_path=[os.getcwd()], path_before=self.path)
        self.sandbox, self.warm = sandbox, [list(p) for p in warm]
        self.proc: subprocess.Popen | None = None
        self.replaced = 0  # workers killed or lost after a timeout, an exit or a crash
        self.weights, self.range = self._start()

    def _start(self) -> tuple[dict | None, tuple[float, float]]:
        env = None  # the trainer's
        if self.sandbox:  # one thread for BLAS: a sandboxed worker may start no thread once confined
            env = {k: os.environ[k] for k in self.SANDBOX_ENV if k in os.environ}
            env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
        # a new session: the worker's guard leads a process group that holds everything the reward starts,
        # killed as a whole by `_kill` and, should the trainer die first (SIGKILL too), by the guard
        proc = subprocess.Popen([sys.executable, str(WORKER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                bufsize=0, close_fds=True, env=env, start_new_session=True)
        weakref.finalize(self, _kill, proc)  # never outlives the trainer's objects
        self.proc, self._buf = proc, b""
        # the console script's sys.path lacks the current directory, where a user's reward module usually is
        path = self.path + [os.path.abspath(p) if p else os.getcwd() for p in sys.path] + [os.getcwd()]
        init = {"spec": self.spec, "path": path, "memory_mb": self.memory_mb}
        if self.sandbox:
            init.update(sandbox=self.sandbox, warm=self.warm)
        line = _EOF
        try:
            proc.stdin.write((json.dumps(init) + "\n").encode())
            line = self._readline(time.monotonic() + max(self.START_TIMEOUT_S, self.timeout_s))
        except BrokenPipeError:
            pass
        msg = _message(line, ("ready", "error"))
        if msg is None:
            how = ("did not start in time" if line is _TIMEOUT else f"exited at start (code {_exit_code(proc)})"
                   if line is _EOF else self._garbled(line, proc))
            _kill(proc)
            raise ValueError(f"reward {self.spec!r}: the reward worker {how}")
        if "error" in msg:
            _kill(proc)
            raise ValueError(f"reward {self.spec!r}: {msg['error']}")
        if not self.own:  # imported, never called yet: where the callable itself comes from
            try:
                trust.check_defined_in("reward", self.spec, msg.get("module"), extra_path=[os.getcwd()],
                                       path_before=self.path)
            except ValueError:
                _kill(proc)
                raise
        rng = msg.get("range")
        declared = DEFAULT_RANGE if rng is None else check_range(rng, f"reward {self.spec!r}: reward_range")
        return msg.get("weights"), declared

    def call(self, pairs: list[tuple[str, str]]) -> list[tuple[bool, object]]:
        """[(True, value or {name: value}) | (False, error message)] for each pair, in order."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:  # it exited between calls: its guard has emptied its group; close its pipes
                _kill(self.proc)
            self._start()
        out: list[tuple[bool, object]] = []
        deadline = time.monotonic() + self.timeout_s
        try:
            self.proc.stdin.write((json.dumps({"items": [[r, a] for r, a in pairs]}) + "\n").encode())
        except BrokenPipeError:
            pass  # it died between calls: read the EOF below
        while len(out) < len(pairs):
            line = self._readline(deadline)
            msg = _message(line, ("value", "parts", "error"))
            if msg is None:  # timed out, exited, or garbled: the rest of the call fails, a fresh worker follows
                why = (f"the call timed out after {self.timeout_s:g}s" if line is _TIMEOUT
                       else f"the reward worker exited (code {_exit_code(self.proc)})" if line is _EOF
                       else f"reward {self.spec!r}: the reward worker {self._garbled(line, self.proc)}")
                _kill(self.proc)
                out += [(False, f"{why}; the worker was replaced")] * (len(pairs) - len(out))
                self.proc = None
                self.replaced += 1
                break
            if "error" in msg:
                out.append((False, msg["error"]))
            else:
                out.append((True, msg["parts"] if "parts" in msg else msg["value"]))
        return out

    def _readline(self, deadline: float):
        """The next line from the worker, _TIMEOUT past the deadline, or _EOF if it is gone."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return _TIMEOUT
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return _EOF
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _garbled(self, line: bytes, proc) -> str:
        return (f"(pid {proc.pid}, {WORKER_SCRIPT.name}) sent {line[:40]!r}, which is not its protocol: the reward "
                "may write to file descriptors it does not own (its stdout and stderr are the trainer's stderr)")

    def close(self) -> None:
        if self.proc is not None:
            _kill(self.proc)
            self.proc = None


def _message(line, keys: tuple[str, ...]) -> dict | None:
    """The worker's message on `line`: a JSON object holding one of `keys`; None for _TIMEOUT, _EOF, or
    anything else (bytes the reward wrote to the protocol's descriptor)."""
    if not isinstance(line, bytes):
        return None
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(msg, dict) or not any(k in msg for k in keys):
        return None
    if "parts" in msg and not isinstance(msg["parts"], dict) or "error" in msg and not isinstance(msg["error"], str):
        return None
    return msg


def _exit_code(proc: subprocess.Popen):
    """The worker's exit code, which its guard exits with a moment after the worker has ended."""
    try:
        return proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        return None


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker's process group: its guard, the worker and whatever the reward started. (Once the
    guard has been reaped its group is empty: the guard kills the rest before it exits.)"""
    if proc.returncode is None:  # not reaped yet, so its pid is still this group's
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()
