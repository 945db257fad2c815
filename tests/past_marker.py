"""A new in-flight method in one file, as a third party writes it: stop a sample k tokens after it wrote
the answer marker. It declares a Watcher and returns a WaveWatch; no rollwise file is edited to add it.
Run it by import path: `--planner past_marker:StopPastMarker` (composes: `past_marker:StopPastMarker+duet-abort`).
tests/test_capabilities.py runs it through the real planner and driver."""
from rollwise.control.base import Component, Decision
from rollwise.control.capabilities import Watcher, WaveWatch


class PastMarker(WaveWatch):
    """One wave: a running sample that wrote `marker` at least `k` tokens ago is stopped (its answer is in)."""

    def __init__(self, marker: int, k: int):
        self.marker, self.k = marker, k

    def __call__(self, running):
        out = []
        for i, samples in running.items():
            for j, toks in enumerate(samples):
                if toks is None:
                    continue
                hit = (toks == self.marker).nonzero()
                if len(hit) and len(toks) - 1 - int(hit[0]) >= self.k:
                    out.append(Decision(i, j, "stop"))
        return out


class StopPastMarker(Component):
    name = "past-marker"
    provenance = "INF"
    declares = (Watcher(),)

    def __init__(self, marker: int = 99, k: int = 2):
        self.marker, self.k = int(marker), int(k)

    def watch(self, requests, ctx):
        return PastMarker(self.marker, self.k)
