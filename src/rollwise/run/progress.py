"""The console: the 'rollwise' logger, and a progress line at a steady interval when stdout is not a terminal.

Everything a run says on the console (progress lines, warnings, the learning verdict) goes through Python's
standard `logging`, on the logger named "rollwise". Unless it already has handlers of its own, `console()`
gives it one handler that writes each message as it is, one line, to the current stdout (what the CLI has
always printed); it does not propagate to the root logger, so a program that configures logging sees
no line twice. To send the lines elsewhere, add your own handler to `logging.getLogger("rollwise")`
before the run starts (yours then replace the console's), or raise its level to silence it.


On a terminal, `train` shows tqdm's bar on stderr. Redirected, it printed nothing for minutes (a new user
saw 3.6 minutes of silence from `train`, 2 from `eval`, and could not tell work from a hang). `Heartbeat`
prints `LABEL: STATUS (N s)` every `interval()` seconds from a daemon thread, so a step or an evaluation
longer than the interval still gets its line. The interval is `ROLLWISE_PROGRESS_EVERY` seconds (default
30; 0 turns the lines off).
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Callable

DEFAULT_EVERY_S = 30.0
LOGGER = "rollwise"


class Console(logging.StreamHandler):
    """Each record's message as it is on the stdout of the moment (looked up per line, so a redirected or
    captured stdout gets the lines)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler sets it; the current stdout is read per line instead
        pass


def console() -> logging.Logger:
    """The 'rollwise' logger, given the Console handler (level INFO) unless it has handlers already."""
    log = logging.getLogger(LOGGER)
    if not log.handlers:
        log.addHandler(Console())
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def say(message: str) -> None:
    """What a run says: a line starting "warning:" at WARNING, anything else at INFO, on the 'rollwise' logger."""
    console().log(logging.WARNING if message.startswith("warning") else logging.INFO, message)


def interval() -> float:
    """Seconds between progress lines: ROLLWISE_PROGRESS_EVERY, else 30 (0: none)."""
    text = os.environ.get("ROLLWISE_PROGRESS_EVERY", "")
    try:
        every = float(text) if text.strip() else DEFAULT_EVERY_S
    except ValueError:
        raise ValueError(f"ROLLWISE_PROGRESS_EVERY must be a number of seconds, got {text!r}") from None
    if not every >= 0:  # also NaN
        raise ValueError(f"ROLLWISE_PROGRESS_EVERY must be >= 0 seconds, got {text!r}")
    return every


class Heartbeat:
    """`with Heartbeat("train", lambda: f"step {tr.step}/{n}"):` logs the status line (on the 'rollwise'
    logger) every interval() seconds while the block runs, if `stream` (default stdout) is not a terminal."""

    def __init__(self, label: str, status: Callable[[], str], stream=None, every: float | None = None):
        self.label, self.status = label, status
        self.stream = stream if stream is not None else sys.stdout
        self.every = interval() if every is None else every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Heartbeat":
        isatty = getattr(self.stream, "isatty", lambda: False)
        if self.every > 0 and not isatty():
            self._t0 = time.monotonic()
            self._thread = threading.Thread(target=self._beat, name=f"rollwise-progress-{self.label}", daemon=True)
            self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                line = f"{self.label}: {self.status()} ({time.monotonic() - self._t0:.0f} s)"
            except Exception as e:  # noqa: BLE001 - a status read mid-update: skip this line, never crash
                line = f"{self.label}: running ({type(e).__name__} reading the status)"
            console().info(line)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
