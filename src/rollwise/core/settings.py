"""Documented config fields: every field of a config dataclass carries its help text, so `rollwise train
--help` and the docs list each setting with its type, default and meaning from one place.

    lr: float = setting(1e-4, "AdamW learning rate")
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING
from typing import Any, NamedTuple


def setting(default: Any = MISSING, help: str = "", *, factory: Any = MISSING) -> Any:
    """A dataclass field with help text (`factory` for a mutable default, as `default_factory`)."""
    if not help:
        raise ValueError("setting: every config field needs help text")
    return dataclasses.field(default=default, default_factory=factory, metadata={"help": help})


class Setting(NamedTuple):
    key: str  # dotted, as `--set` takes it: "learner.lr"
    type: str
    default: Any
    help: str


def type_name(hint) -> str:
    """`int`, `str | None`, `dict`, `tuple[float, float]`: an annotation as a reader writes it."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # Annotated[int, ...] | None reads Optional[int]
        return " | ".join("None" if a is type(None) else type_name(a) for a in typing.get_args(hint))
    return str(hint).replace("typing.", "").replace("NoneType", "None")


def settings(cls, prefix: str = "", nested: dict | None = None) -> list[Setting]:
    """Every documented field of the dataclass `cls`, nested dataclasses (or those named in `nested`,
    {field: class}, for a field whose default is None) flattened to dotted keys. Fields without help
    (internal state) are left out."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        sub = (nested or {}).get(f.name) or (hints[f.name] if dataclasses.is_dataclass(hints[f.name]) else None)
        if sub is not None:
            out += settings(sub, f"{prefix}{f.name}.")
            continue
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        out.append(Setting(prefix + f.name, type_name(hints[f.name]), default, f.metadata["help"]))
    return out
