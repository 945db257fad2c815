"""Which code a data file may name: the one rule every `module:Attr` that rollwise imports by name goes
through (a config's or a plan's `reward`, `planner`, `engine`, `task`, `learner.advantage`, ... and the
same names given with `--set` or a flag).

A config or a plan is data that people share, so the code it names must be the user's own: a module found
on the import path OUTSIDE the standard library, site-packages (and dist-packages, the user site) and
rollwise's own package (rollwise's components are named by their registry names; a component class named
by import path from rollwise is allowed, it carries the registry marker). `shutil:rmtree`, `os:remove`,
`subprocess:run` or `builtins:exec` are refused before their module is imported, so nothing of theirs
runs. A user reward is also checked for where the callable itself is defined (the worker reports it once
imported, before any call): `mymod:rmtree` after `from shutil import rmtree` in mymod.py is refused too.

Code from an installed package (site-packages, the standard library) is allowed only when the user says
so where a data file cannot: `--trust-code MODULE` on the command line (repeatable; a dotted prefix
trusts the package below it), or the environment variable ROLLWISE_TRUST_CODE (comma-separated), which
the flag sets for the processes the command starts (a bench's runs). The threat model is
docs/robustness.md ("Code named in a config").
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
from pathlib import Path

TRUST_ENV = "ROLLWISE_TRUST_CODE"


def trusted_modules() -> list[str]:
    """The modules the user trusts by `--trust-code` / ROLLWISE_TRUST_CODE."""
    return [m.strip() for m in os.environ.get(TRUST_ENV, "").split(",") if m.strip()]


def _is_trusted(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in trusted_modules())


def _installed_dirs() -> list[Path]:
    """Where the standard library and installed packages live."""
    dirs = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site.py
        pass
    return [Path(d).resolve() for d in dirs if d]


def _where(module: str, extra_path: list[str], path_before: list[str]) -> tuple[str, str]:
    """(what the top-level module of `module` is, its location): "stdlib", "installed", "rollwise",
    "missing" or "own", found as the importer will find it (`path_before`, the import path, `extra_path`).
    Only finders are asked (no module code runs); a module already imported answers with its own spec."""
    top = module.split(".")[0]
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return "stdlib", top
    spec = importlib.machinery.PathFinder.find_spec(top, list(path_before)) if path_before else None
    found = sys.modules.get(top)
    if spec is None and found is not None:
        spec = getattr(found, "__spec__", None)
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
    if spec is None and extra_path:
        spec = importlib.machinery.PathFinder.find_spec(top, list(extra_path))
    if spec is None:
        return "missing", top
    places = list(spec.submodule_search_locations or []) + ([spec.origin] if spec.has_location and spec.origin else [])
    if not places:  # built-in or frozen
        return "stdlib", spec.origin or top
    rollwise_dir = Path(__file__).resolve().parents[1]
    installed = _installed_dirs()
    for place in places:
        p = Path(place).resolve()
        if p == rollwise_dir or rollwise_dir in p.parents:
            return "rollwise", str(p)
        if any(part in ("site-packages", "dist-packages") for part in p.parts) or \
                any(p == d or d in p.parents for d in installed):
            return "installed", str(p)
    return "own", str(Path(places[0]).resolve())


def _refusal(module: str, extra_path: list[str], allow_rollwise: bool, path_before: list[str] = ()) -> str | None:
    """Why `module` may not be named by data, or None."""
    if not module or _is_trusted(module):
        return None
    what, place = _where(module, extra_path, list(path_before))
    if what == "own" or what == "rollwise" and allow_rollwise:
        return None
    if what == "missing":
        return f"no module {module.split('.')[0]!r} on the import path or in the current directory"
    why = {"stdlib": "the standard library", "installed": f"an installed package ({place})",
           "rollwise": "rollwise itself (name its components by their registry names)"}[what]
    return (f"refused: {module!r} is {why}, not your own code; a config or plan is data and may name code from "
            f"your own modules only. If you mean it, pass --trust-code {module.split('.')[0]} on the command line")


def check_code(field: str, spec: str, *, extra_path: list[str] = (), allow_rollwise: bool = False,
               path_before: list[str] = ()) -> None:
    """Refuse, in one line naming `field`, a `module:Attr` named by data whose module is not the user's own
    (see the module's docstring), before anything of it is imported. `extra_path`: directories searched
    after the import path (the reward worker's current directory), `path_before` before it (the worker's
    own path, given by code). `allow_rollwise`: a registry kind, whose marker the caller checks."""
    why = _refusal(spec.partition(":")[0], list(extra_path), allow_rollwise, path_before)
    if why:
        raise ValueError(f"{field} {spec!r}: {why}")


def check_defined_in(field: str, spec: str, defined_in: str | None, extra_path: list[str] = (),
                     path_before: list[str] = ()) -> None:
    """The callable a user reward names must be defined in the user's own code too (a module's
    `from shutil import rmtree` makes `mymod:rmtree` the standard library's). `defined_in`: its
    `__module__`, as the worker reports it after the import and before any call."""
    module = spec.partition(":")[0]
    if defined_in == module or _is_trusted(module):
        return
    if not defined_in:
        raise ValueError(f"{field} {spec!r}: refused: it is not defined in a module (e.g. a functools.partial); "
                         "wrap it in a def in your module")
    why = _refusal(defined_in, list(extra_path), False, path_before)
    if why:
        raise ValueError(f"{field} {spec!r}: it is defined in {defined_in!r}: {why}")


# Config keys whose value may be a `module:Attr` that rollwise imports: the reward, and the registry kind of each other
CODE_KEYS = {"reward": None, "planner": "planner", "task": "task", "engine": "engine", "reward_shaping": "shaping",
             "learner.advantage": "advantage", "learner.loss": "loss", "learner.loss_agg": "aggregation",
             "learner.correction": "correction", "learner.recompose": "recompose",
             "learner.recompose_options.advantage": "advantage"}


def check_settings(settings: dict, where: str) -> None:
    """The rule on config settings given as data before they become a config (a plan arm's `set`, dotted
    or nested keys): what a run would import is refused here, before the plan is recorded (a registry
    kind's import path must also carry its marker: `registry.get`)."""
    from . import registry

    def walk(node, prefix=""):
        for k, v in node.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                yield from walk(v, key + ".")
            else:
                yield key, v

    for key, value in walk(settings):
        if key not in CODE_KEYS or not isinstance(value, str) or ":" not in value:
            continue
        if CODE_KEYS[key] is None:
            check_code(f"{where}: {key}", value, extra_path=[os.getcwd()])
            continue
        for comp in value.split("+") if key == "planner" else [value]:
            try:
                registry.get(CODE_KEYS[key], comp)
            except ValueError as e:
                raise ValueError(f"{where}: {key}: {e}") from None
