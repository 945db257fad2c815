"""The Task protocol (core/task.py): every registered task satisfies it and gives every optional attribute
it has the declared kind; a user task that subclasses nothing trains; and no framework file reads a task
attribute around the protocol."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollwise.core import registry
from rollwise.core.task import OPTIONAL, Task, declares, missing, option
from rollwise.core.types import Prompt

SRC = Path(__file__).resolve().parent.parent / "src" / "rollwise"


class MinimalTask:
    """A user task as a newcomer writes it: no base class, the three methods and the registry marker."""

    rollwise_kind = "task"  # what @register("task", ...) sets; a task named 'module:Class' must carry it

    def __init__(self, pool_size: int = 16):
        pairs = [(a, b) for a in range(1, 5) for b in range(1, 5)][:pool_size]  # the arithmetic base's format
        self.pool = [Prompt(i, f"{a}00000+{b}00000=", str(a + b)[::-1], level=1) for i, (a, b) in enumerate(pairs)]

    def train_pool(self):
        return self.pool

    def heldout(self):
        return self.pool[:4]

    def verify(self, response: str, answer: str) -> float:
        return float(response.strip() == answer)


class NoVerifyTask:
    rollwise_kind = "task"

    def train_pool(self):
        return []

    def heldout(self):
        return []


class WithOptions(MinimalTask):
    name = "with-options"
    max_new_tokens = 12
    answers_are_responses = True

    def notes(self):
        return ["two rows dropped"]


def test_every_registered_task_satisfies_the_protocol():
    tasks = registry.entries("task")
    assert {"arithmetic", "chain", "file"} <= {e.name for e in tasks}
    for e in tasks:
        assert missing(e.obj) == [], e.name  # a class: its methods are there before any instance
        for attr, spec in OPTIONAL.items():
            if not declares(e.obj, attr):
                continue
            value = getattr(e.obj, attr)
            if spec.method or spec.capability:
                assert callable(value), f"{e.name}.{attr} must be a method"
            elif attr == "max_new_tokens":
                assert isinstance(value, int) and value > 0, e.name
            elif isinstance(spec.default, (bool, dict)):
                assert isinstance(value, type(spec.default)), f"{e.name}.{attr}: {value!r}"
        assert option(e.obj, "name") == e.name  # @register names the class


def test_warm_start_capability_comes_in_pairs():
    # a base needs examples to train on and a fingerprint to cache under: one without the other is a bug
    for e in registry.entries("task"):
        assert declares(e.obj, "sft_examples") == declares(e.obj, "base_fingerprint"), e.name


def test_an_absent_optional_attribute_reads_as_its_declared_default():
    t = MinimalTask()
    assert isinstance(t, Task) and missing(t) == []
    assert option(t, "name") == "MinimalTask"
    assert option(t, "max_new_tokens") is None  # the run's default applies
    assert option(t, "notes")() == [] and option(t, "sft_notes")() == [] and option(t, "alphabet")() == ""
    assert option(t, "warmstart_defaults") == {} and option(t, "answers_are_responses") is False
    assert not declares(t, "use_tokenizer") and not declares(t, "sft_examples")
    option(t, "warmstart_defaults")["steps"] = 1  # a default is a fresh copy, never shared
    assert option(t, "warmstart_defaults") == {}
    w = WithOptions()
    assert (option(w, "name"), option(w, "max_new_tokens"), option(w, "notes")()) == ("with-options", 12,
                                                                                       ["two rows dropped"])
    assert option(w, "answers_are_responses") is True


def test_an_undeclared_attribute_is_refused_and_a_missing_method_named():
    with pytest.raises(ValueError, match="task attribute 'colour' is not declared in rollwise/core/task.py"):
        option(MinimalTask(), "colour")
    with pytest.raises(ValueError, match="task attribute 'colour'"):
        declares(MinimalTask(), "colour")

    class NoVerify:
        def train_pool(self):
            return []

        def heldout(self):
            return []

    assert not isinstance(NoVerify(), Task) and missing(NoVerify()) == ["verify"]


def test_a_task_missing_a_method_is_refused_when_the_config_loads():
    from rollwise.run.config import load_config

    with pytest.raises(ValueError, match=r"^task 'test_task_protocol:NoVerifyTask' is not a task \(a class with"):
        load_config(None, {"task": "test_task_protocol:NoVerifyTask", "model": "no/such/dir"})
    assert missing(NoVerifyTask) == ["verify"]  # what run/config.py's check could say by name


def test_a_user_task_without_a_base_class_trains(tmp_path, small_policy):
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    from conftest import SMALL

    spec = "test_task_protocol:MinimalTask"
    assert registry.get("task", spec).obj.__name__ == "MinimalTask"
    cfg = load_config(None, {**SMALL, "task": spec, "task_options": {"pool_size": 12}, "model": str(small_policy[0]),
                             "out": str(tmp_path / "r"), "steps": 2, "eval_every": 2})
    rows = Trainer(cfg, log=lambda m: None).run()
    steps = [r for r in rows if "rollouts_train" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["batch_rollouts"] == 8 * 4 for r in steps)
    assert [r["step"] for r in rows if "eval_acc" in r] == [0, 2]  # its held-out prompts were evaluated


# where a framework file may still read a task attribute directly: run/config.py is the owner's (two
# lookups: `task_declares` and the warm-start check), to be moved onto core/task.py with its next change
ALLOWED = {"run/config.py", "core/task.py"}
DIRECT = re.compile(r"(hasattr|getattr)\(\s*[\w.]*task\w*(\.obj)?\s*,\s*['\"]")


def test_no_framework_file_reads_a_task_attribute_around_the_protocol():
    found = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if str(p.relative_to(SRC)) not in ALLOWED
             and not p.relative_to(SRC).parts[0] == "tasks"
             for i, line in enumerate(p.read_text().splitlines(), 1) if DIRECT.search(line)]
    assert not found, f"read through rollwise.core.task.option/declares instead: {found}"
    assert DIRECT.search('getattr(ctx.task, "answer_marker", None)')  # the pattern catches what it is for
