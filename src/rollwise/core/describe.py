"""What a registered component takes: its options (name, type, default), where they are set in a config,
and the paper it comes from. `rollwise list --options NAME` prints it; the docs' methods page is built
from it, so neither is a hand-kept list.
"""
from __future__ import annotations

import difflib
import inspect
import re
import textwrap
from typing import NamedTuple

from . import registry

# Leading parameters of each kind's calling contract, which a config does not set (e.g. an advantage
# estimator's AdvInput, an engine's policy); a recomposer class is called as (self, batch, gen, adv).
CONTRACT_ARGS = {"advantage": 1, "loss": 1, "aggregation": 3, "correction": 1, "recompose": 3, "engine": 1}

# Where a config sets each kind's options.
OPTIONS_KEY = {"planner": "planner_options.{name}", "advantage": "learner.advantage_options",
               "loss": "learner.loss_options", "aggregation": "learner.loss_agg_options",
               "correction": "learner.correction_options", "recompose": "learner.recompose_options",
               "engine": "engine_options", "task": "task_options", "shaping": "reward_shaping_options"}


class Option(NamedTuple):
    name: str
    type: str  # the annotation as written, "" if none
    default: str  # repr of the default, "required" if none


def options(entry: registry.Entry) -> list[Option]:
    """The keyword options a config may set for `entry`, in signature order."""
    obj, skip = entry.obj, CONTRACT_ARGS.get(entry.kind, 0)
    if entry.kind == "recompose" and isinstance(obj, type):
        obj, skip = obj.__call__, skip + 1  # a stateful recomposer: the options are its call's
    try:
        params = list(inspect.signature(obj).parameters.values())[skip:]
    except (TypeError, ValueError):  # a builtin without a signature
        return []
    out = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) or p.name.startswith("_"):
            continue
        kind = "" if p.annotation is p.empty else (p.annotation if isinstance(p.annotation, str)
                                                   else inspect.formatannotation(p.annotation))
        out.append(Option(p.name, kind, "required" if p.default is p.empty else repr(p.default)))
    return out


def paper(entry: registry.Entry) -> str:
    """Where a component comes from: the entry's `paper`, else the first paragraph of its own docstring or
    its module's (where rollwise's components cite their paper) that cites one, else the first paragraph."""
    if entry.paper:
        return entry.paper
    own = entry.obj.__dict__.get("__doc__") if isinstance(entry.obj, type) else entry.obj.__doc__
    if own and isinstance(entry.obj, type) and own.startswith(entry.obj.__name__ + "("):
        own = None  # a dataclass's generated signature, not a description
    paragraphs = [" ".join(par.split()) for doc in (own, getattr(inspect.getmodule(entry.obj), "__doc__", None))
                  for par in inspect.cleandoc(doc or "").split("\n\n") if par.strip()]
    return next((par for par in paragraphs if cites(par)), paragraphs[0] if paragraphs else "")


def cites(text: str) -> bool:
    """Whether a description names a paper (an arXiv id, or a year in a citation)."""
    return "arXiv" in text or bool(re.search(r"\b20[12]\d\b", text))


def find(name: str, kind: str | None = None) -> list[registry.Entry]:
    """Every registered component called `name` (of `kind` if given); none is an error that lists the
    close matches."""
    if kind is not None and kind not in registry.KINDS:
        raise ValueError(f"--kind {kind!r}: expected one of {', '.join(registry.KINDS)}")
    if ":" in name:  # a user's component by import path
        return [registry.get(kind or "planner", name)]
    kinds = [kind] if kind else list(registry.KINDS)
    found = [e for k in kinds for e in registry.entries(k) if e.name == name]
    if not found:
        names = sorted({e.name for k in kinds for e in registry.entries(k)})
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        where = f" of kind {kind}" if kind else ""
        raise ValueError(f"no component named {name!r}{where}; close matches: "
                         f"{', '.join(close) if close else '(none)'} (rollwise list shows them all)")
    return found


def describe(entry: registry.Entry) -> str:
    """A component as `rollwise list --options` prints it."""
    lines = [f"{entry.name} ({entry.kind}) [{entry.provenance}]"]
    if entry.summary:
        lines.append(f"  {entry.summary}")
    ref = paper(entry)
    if ref:
        label = "paper: " if cites(ref) else "about: "
        lines += textwrap.wrap(label + ref, 100, initial_indent="  ", subsequent_indent="    ")
    for fact, value in sorted(entry.facts.items()):
        lines.append(f"  {fact}: {value}")
    opts = options(entry)
    key = OPTIONS_KEY[entry.kind].format(name=entry.name)
    lines.append(f"  options (--set {key}.NAME=VALUE):" if opts else "  options: none")
    width = max((len(o.name) for o in opts), default=0)
    lines += [f"    {o.name:<{width}}  {o.type or '(untyped)'} = {o.default}" for o in opts]
    return "\n".join(lines)
