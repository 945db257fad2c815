"""The Task protocol: the three methods every task has, and every optional attribute the framework reads,
declared once with its default and meaning.

A task is any object with `train_pool()`, `heldout()` and `verify(response, answer)`; it subclasses
nothing (a user task named 'module:Class' only carries the registry marker `rollwise_kind = "task"`, which
`@register("task", name)` sets). Everything else is optional: the framework reads it only through
`option(task, name)` / `declares(task, name)` here, so a new optional attribute is one row of `OPTIONAL`
rather than one more `getattr(task, "...", default)` with its own default at each call site.

It lives in core (not tasks/) because policy/, control/ and run/ read it: core is below them all, and
importing `rollwise.tasks` would import every task.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .types import Prompt


@runtime_checkable
class Task(Protocol):
    """What every task has. Prompts are `core.types.Prompt(id, text, answer, level)`; ids index
    the pool."""

    def train_pool(self) -> list[Prompt]: ...

    def heldout(self) -> list[Prompt]: ...

    def verify(self, response: str, answer: str) -> float | dict[str, float]: ...


@dataclass(frozen=True)
class OptionalAttr:
    """One optional task attribute. `default` is what an absent attribute reads as; None with
    `capability=True` means "absent": the caller asks `declares` and takes another path. `method`: the
    framework calls it; an absent one reads as a function returning `default`."""

    default: Any
    meaning: str
    method: bool = False
    capability: bool = False


OPTIONAL: dict[str, OptionalAttr] = {
    # what runs on the task see
    "name": OptionalAttr(None, "the task's registry name (set by @register); absent: the class name"),
    "max_new_tokens": OptionalAttr(None, "the response budget its runs default to; absent: the run's default "
                                     "(run/config.py, 10 tokens) or the caller's"),
    "warmstart_defaults": OptionalAttr({}, "WarmStartConfig settings its base is built with (a user's keys win)"),
    "notes": OptionalAttr([], "lines the run logs about the data (e.g. rows dropped, and why)", method=True),
    "use_tokenizer": OptionalAttr(None, "use_tokenizer(tokenizer): prompts change to a chat model's template; absent: "
                                    "prompts are used as they are", method=True),
    "describe_prompt": OptionalAttr(None, "describe_prompt(split, index) -> where a prompt came from (file and row) "
                                      "for errors; absent: its split, index and first characters",
                                capability=True),
    "answers_are_responses": OptionalAttr(False, "the verifier compares the response with the answer, so every "
                                             "answer must be writable within max_new_tokens"),
    "answer_marker": OptionalAttr(None, "text after which the final answer follows (DUET's abort); absent: none"),
    "bench_mixes": OptionalAttr(None, "named level mixes the bench may run (class attribute); absent: 'default' only"),
    "bench_defaults": OptionalAttr({}, "BenchConfig settings the task's benches default to (class attribute)"),
    # the supervised warm start (policy/warmstart.py)
    "sft_examples": OptionalAttr(None, "sft_examples(n, seed) -> [(prompt, response, level)]: the task can build "
                                   "its own base (with base_fingerprint)", capability=True),
    "base_fingerprint": OptionalAttr(None, "base_fingerprint() -> what of the task its base depends on (hashed into "
                                       "the base's key)", capability=True),
    "alphabet": OptionalAttr("", "alphabet() -> the data's characters, added to the tiny tokenizer's", method=True),
    "sft_rows": OptionalAttr(None, "sft_rows() -> every distinct warm-start row (a task read from files): each is "
                               "checked against the context before training", capability=True),
    "sft_distinct": OptionalAttr(None, "sft_distinct() -> the distinct warm-start rows of a task that samples them "
                                   "from a set (reasoning-gym): the small-family guard counts how many are train-pool "
                                   "prompts", capability=True),
    "sft_apart": OptionalAttr(None, "the option that keeps warm-start rows and the train pool apart, named by the "
                                "small-family guard (e.g. 'task_options.sft_disjoint=true'); absent: none to offer"),
    "describe_sft": OptionalAttr(None, "describe_sft(index) -> where warm-start row `index` came from, for errors "
                                   "(with sft_rows)", capability=True),
    "sft_notes": OptionalAttr([], "lines the warm start logs (e.g. where the rows came from)", method=True),
    "sft_group_by_length": OptionalAttr(False, "warm-start batches of similar response lengths (less padding)"),
    "report_pool_size": OptionalAttr(None, "the base's report takes pass-rate statistics over at most this many "
                                       "train prompts; absent: all of them"),
}


def _undeclared(name: str) -> ValueError:
    return ValueError(f"task attribute {name!r} is not declared in rollwise/core/task.py OPTIONAL "
                      f"(declared: {', '.join(sorted(OPTIONAL))})")


def declares(task: Any, name: str) -> bool:
    """Whether the task (an instance or its class) has optional attribute `name` itself."""
    if name not in OPTIONAL:
        raise _undeclared(name)
    return getattr(task, name, None) is not None


def option(task: Any, name: str) -> Any:
    """Optional attribute `name` of the task, or its declared default (for a method: a function returning
    the default; for `name`: the class name)."""
    spec = OPTIONAL.get(name)
    if spec is None:
        raise _undeclared(name)
    value = getattr(task, name, None)
    if value is not None:
        return value
    if name == "name":
        return task.__name__ if isinstance(task, type) else type(task).__name__
    if spec.method:
        default = spec.default
        return lambda *a, **kw: list(default) if isinstance(default, list) else default
    return dict(spec.default) if isinstance(spec.default, dict) else spec.default


def missing(task: Any) -> list[str]:
    """The required methods the task lacks (empty: it satisfies `Task`)."""
    return [m for m in ("train_pool", "heldout", "verify") if not callable(getattr(task, m, None))]


__all__ = ["Task", "OptionalAttr", "OPTIONAL", "declares", "option", "missing"]
