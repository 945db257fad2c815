"""Learn: advantage estimators, policy losses, off-policy corrections, batch recomposition, the learner."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
