"""Registries by name: every swappable part (planner component, advantage, loss, correction,
recomposition, engine, task, reward shaping) registers itself under a kind and a name.

Each entry carries a provenance tag, shown by `rollwise list`:
  CODE = rule read from the official code, ABS = from the paper's abstract, SEC = from a secondary
  summary, INF = inferred by rollwise (not paper-verified). Mixed methods give e.g. "CODE+INF".
The tables are filled at import time and never mutated afterwards.

Facts about a component that the rest of rollwise acts on live on its entry, as keywords of `@register`
(e.g. `needs_groups=True` on an advantage estimator that compares the rollouts of a group), never in a
hand-kept list elsewhere; read them with `get(kind, name).facts`.

A name of the form `module.path:Attr` loads a user's own component by import path (e.g.
`--planner mypkg.sel:MyPlanner`, `--engine mypkg.eng:MyEngine`), so rollwise is extended without
forking it. Module paths are resolved from the current directory first.

A config file names components and the keyword options they are built with, so what an import path names
must declare itself a component of that kind: the registry marker, the attribute `rollwise_kind = KIND`.
`@register(kind, name)` sets it, and so does subclassing a kind's base class that carries it
(`rollwise.control.base.Component` for planners); a class may also state it itself. `os:system` or
`subprocess:Popen` carry no marker and are refused before anything calls them. Before that, the module must
be the user's own (core/trust.py: not the standard library, site-packages or rollwise, unless the command
line trusts it), so nothing of `os` or an installed package is even imported because a config named it.
A user reward (`--reward module:function`) carries no marker; it goes through the same rule
(run/config.py, tasks/reward.py) and is called only in the reward worker process.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from . import trust

KINDS = ("planner", "advantage", "loss", "aggregation", "correction", "recompose", "engine", "task", "shaping")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    obj: Any
    provenance: str
    summary: str
    paper: str = ""  # the paper it comes from (title, authors, arXiv id), where the entry names it
    facts: dict = field(default_factory=dict)  # what a host acts on, e.g. {"needs_groups": True}


_TABLES: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}


def register(kind: str, name: str, provenance: str = "INF", summary: str = "", paper: str = "",
             **facts) -> Callable:
    """Register `obj` as `kind`/`name`. A registered class gets `name` and `provenance` as class
    attributes, so a component states them once, here. `facts` are what other code needs to know about
    the component (`needs_groups=True`), read from the entry."""
    if kind not in _TABLES:
        raise ValueError(f"unknown registry kind {kind!r}; expected one of {KINDS}")

    def deco(obj):
        if name in _TABLES[kind]:
            raise ValueError(f"{kind} {name!r} registered twice")
        doc = summary or (obj.__doc__ or "").strip().splitlines()[0] if (summary or obj.__doc__) else ""
        if isinstance(obj, type):
            obj.name, obj.provenance = name, provenance
        obj.rollwise_kind = kind  # the marker an import path must carry (see the module docstring)
        _TABLES[kind][name] = Entry(kind, name, obj, provenance, doc, paper, dict(facts))
        return obj

    return deco


def _load_all() -> None:
    # Importing the packages runs their @register decorators.
    from rollwise import control, learn, tasks, generate, replay  # noqa: F401
    import rollwise.sim.engine  # noqa: F401  (the simulator's engine)


def get(kind: str, name: str) -> Entry:
    if kind not in _TABLES:
        raise ValueError(f"unknown registry kind {kind!r}; expected one of {KINDS}")
    if ":" in name:
        return _import(kind, name)
    _load_all()
    table = _TABLES[kind]
    if name not in table:
        raise ValueError(f"no {kind} named {name!r}; available: {', '.join(sorted(table)) or '(none)'} "
                       "(or give a 'module:Attr' import path)")
    return table[name]


def _import(kind: str, spec: str) -> Entry:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"{kind} {spec!r}: expected 'module:Attr'")
    if os.getcwd() not in sys.path and "" not in sys.path:  # `python -m` and console scripts omit it
        sys.path.insert(0, os.getcwd())
    trust.check_code(kind, spec, allow_rollwise=True)  # the user's own code only, before anything is imported
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{kind} {spec!r}: cannot import it ({e})") from None
    except Exception as e:  # noqa: BLE001 - the module's own code raised while it was imported
        raise ValueError(f"{kind} {spec!r}: importing module {module!r} raised {type(e).__name__}: "
                         f"{str(e)[:200]}") from None
    if getattr(obj, "rollwise_kind", None) != kind:
        raise ValueError(f"{kind} {spec!r} is not a {kind} component: a component named by import path must carry "
                         f"rollwise's registry marker rollwise_kind = {kind!r} (set by @register({kind!r}, name)"
                         f"{', or by subclassing rollwise.control.base.Component' if kind == 'planner' else ''})")
    if isinstance(obj, type) and kind == "planner" and getattr(obj, "name", "component") == "component":
        obj.name = attr  # a user component that names itself keeps its name
    doc = (obj.__doc__ or "").strip().splitlines()
    return Entry(kind, spec, obj, getattr(obj, "provenance", "USER"), doc[0] if doc else "")


def entries(kind: str) -> list[Entry]:
    _load_all()
    return [_TABLES[kind][k] for k in sorted(_TABLES[kind])]


def check_options(obj, options: dict, where: str, skip: int = 0, label: str | None = None) -> None:
    """Every key of `options` must be a keyword parameter of `obj` (a class's constructor or a
    function, ignoring its first `skip` positional parameters); otherwise an error names the key,
    the component and what it takes."""
    if not isinstance(options, dict):
        raise ValueError(f"{where}: expected a mapping of options, got {type(options).__name__}")
    if not options:
        return
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin without a signature: nothing to check against
    params = params[skip:]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in options:
        if key not in known:
            label = label or getattr(obj, "name", None) or getattr(obj, "__name__", str(obj))
            public = [k for k in known if not k.startswith("_")]
            raise ValueError(f"{where}: unknown option {key!r} for {label}; it takes: "
                             f"{', '.join(public) or '(no options)'}")
