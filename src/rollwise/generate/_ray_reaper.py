"""The reaper of a Ray cluster that a trainer started: it ends the cluster's processes when the trainer ends,
however it ends (SIGKILL included).

Ray ties its head processes (gcs_server, raylet) and workers to the driver, but the raylet's own children,
ray::DashboardAgent and ray::RuntimeEnvAgent, outlived a SIGKILLed async trainer: they notice that the raylet
is gone, then wait on the dead GCS to report it. This script, started by the trainer as a plain process (run
by path: it imports nothing of rollwise or Ray), records the trainer's descendants every `EVERY_S` seconds from
/proc; once the trainer is gone (this process is re-parented), it SIGKILLs each recorded process that is still
the same process (pid and start time), and exits.

    python _ray_reaper.py TRAINER_PID
"""
from __future__ import annotations

import os
import signal
import sys
import time

EVERY_S = 1.0


def processes() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, start time)} of every process /proc shows."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:  # it ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ... starttime (22nd)
        out[int(name)] = (int(fields[1]), fields[19])
    return out


def descendants(root: int, table: dict[int, tuple[int, str]]) -> dict[int, str]:
    """{pid: start time} of every process under `root`."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = table[pid][1]
        todo += children.get(pid, [])
    return out


def main(trainer: int) -> None:
    me = os.getpid()
    seen: dict[int, str] = {}
    while os.getppid() == trainer:
        seen.update(descendants(trainer, processes()))
        seen.pop(me, None)
        time.sleep(EVERY_S)
    now = processes()
    for pid, start in seen.items():
        if pid in now and now[pid][1] == start:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
