"""Registries by name: every swappable part (planner component, advantage, loss, correction,
recomposition, engine, task) registers itself under a kind and a name.

Each entry carries a provenance tag, shown by `rollwise list`:
  CODE = rule read from the official code, ABS = from the paper's abstract, SEC = from a secondary
  summary, INF = inferred by rollwise (not paper-verified). Mixed methods give e.g. "CODE+INF".
The tables are filled at import time and never mutated afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

KINDS = ("planner", "advantage", "loss", "aggregation", "correction", "recompose", "engine", "task")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    obj: Any
    provenance: str
    summary: str


_TABLES: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}


def register(kind: str, name: str, provenance: str = "INF", summary: str = "") -> Callable:
    if kind not in _TABLES:
        raise ValueError(f"unknown registry kind {kind!r}; expected one of {KINDS}")

    def deco(obj):
        if name in _TABLES[kind]:
            raise ValueError(f"{kind} {name!r} registered twice")
        doc = summary or (obj.__doc__ or "").strip().splitlines()[0] if (summary or obj.__doc__) else ""
        _TABLES[kind][name] = Entry(kind, name, obj, provenance, doc)
        return obj

    return deco


def _load_all() -> None:
    # Importing the packages runs their @register decorators.
    from rollwise import control, learn, tasks, generate  # noqa: F401


def get(kind: str, name: str) -> Entry:
    _load_all()
    table = _TABLES[kind]
    if name not in table:
        raise KeyError(f"no {kind} named {name!r}; available: {', '.join(sorted(table)) or '(none)'}")
    return table[name]


def entries(kind: str) -> list[Entry]:
    _load_all()
    return [_TABLES[kind][k] for k in sorted(_TABLES[kind])]
