"""Replay: components that reuse earlier rollouts (SPEC-RL's drafts); importing this package registers them."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
