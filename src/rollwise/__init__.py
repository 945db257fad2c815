"""rollwise: RLVR that spends rollouts only where they teach.

The public API is what `from rollwise import ...` gives (`__all__`); docs/api.md documents each name where
it is defined. Names load on first use, so `import rollwise` stays light (no torch until one is asked for).

    from rollwise import load_config, build_run, Request, Group, Batch, run_sync, evaluate

Anything else is internal and may move between versions.
"""
__version__ = "0.6.0"

# name -> "module:attribute" (or "module" for a module); docs/api.md has one `::: module.attribute` per entry
_API = {
    # a run: its configuration, its parts, the trainer that runs them
    "Config": "rollwise.run.config:Config",
    "load_config": "rollwise.run.config:load_config",
    "build_run": "rollwise.run.build:build_run",
    "Parts": "rollwise.run.build:Parts",
    "Trainer": "rollwise.run.loop:Trainer",
    "evaluate": "rollwise.run.evaluate:evaluate",
    # planners and what their components declare
    "Component": "rollwise.control.base:Component",
    "StepContext": "rollwise.control.base:StepContext",
    "Planner": "rollwise.control.base:Planner",
    "build_planner": "rollwise.control.base:build_planner",
    "capabilities": "rollwise.control.capabilities",
    # engines
    "Engine": "rollwise.generate.engine:Engine",
    "Finished": "rollwise.generate.engine:Finished",
    "run_sync": "rollwise.generate.engine:run_sync",
    "check_engine": "rollwise.testing:check_engine",
    # the data that flows between them
    "Prompt": "rollwise.core.types:Prompt",
    "SamplingParams": "rollwise.core.types:SamplingParams",
    "Request": "rollwise.core.types:Request",
    "Rollout": "rollwise.core.types:Rollout",
    "Group": "rollwise.core.types:Group",
    "Batch": "rollwise.core.types:Batch",
    # tasks: the protocol and its declared optional attributes
    "Task": "rollwise.core.task:Task",
    # the registry: components, engines, tasks by name
    "register": "rollwise.core.registry:register",
    "get": "rollwise.core.registry:get",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'rollwise' has no attribute {name!r}")
    import importlib

    module, _, attr = _API[name].partition(":")
    value = importlib.import_module(module)
    if attr:
        value = getattr(value, attr)
    globals()[name] = value  # loaded once
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
