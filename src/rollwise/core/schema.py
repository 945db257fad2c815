"""One validated-config mechanism (issue 44 item 4): pydantic v2 checks every typed config -- the run's
`Config`, a bench plan, cost and cluster profiles, the simulator's `--set` values, components' `*_options`
-- from the dataclass's own annotations, and `build` turns its first error into rollwise's one line naming
the field (`batch_size must be >= 1, got 0`).

Why pydantic and how it is set (the choice is written down in docs/architecture.md):
- strict scalars, because a YAML `true` is not the integer 1 and a string is not a number, with the one
  exception YAML needs: an integral float is an integer (`4e4` steps). A dataclass declares them as `Int`,
  `Float`, `Bool`; `option_type` applies the same to a component's plain annotations. Containers are lax
  (a YAML list is a tuple: `betas: [0.9, 0.99]`), and a nested dataclass takes a mapping.
- unknown keys are an error (`extra="forbid"`): a typo must never fall back to a default.
- ranges are declared beside the type: `steps: Annotated[Int, at_least(1)]`. A `Rule` carries the words the
  error quotes, and `rules(cls)` lists them for the fuzzer (tests/test_fuzz.py), which judges invalid input
  on its own.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable

from pydantic import BeforeValidator, ConfigDict, Strict, TypeAdapter, ValidationError, with_config
from pydantic_core import core_schema

CHECKED = ConfigDict(extra="forbid")


def checked(cls):
    """Class decorator for a config dataclass: unknown keys refused. Its scalar fields say `Int`, `Float`,
    `Bool` (strict: pydantic's lax mode would read `true` as 1 and "3" as 3); a nested dataclass takes a
    mapping."""
    return with_config(CHECKED)(cls)


def _integral(v):
    """YAML reads `4e4` as a float and `--set steps=4e4` too: an integral float is the integer it names."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _tuple(v):
    return tuple(v) if isinstance(v, list) else v  # YAML has lists only


Int = Annotated[int, BeforeValidator(_integral), Strict()]
Float = Annotated[float, Strict()]  # an int is a number too (3 -> 3.0); a bool or a string is not
Bool = Annotated[bool, Strict()]
Pair = Annotated[tuple[Float, Float], BeforeValidator(_tuple)]


@dataclass(frozen=True)
class Rule:
    """A field's range: `test(value)` holds for every valid value (None passes: an unset optional field);
    `words` complete "FIELD must be ..." in the error."""

    test: Callable[[Any], bool]
    words: str

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, v):
        if v is not None and not self.test(v):
            raise ValueError(self.words)
        return v


def at_least(n, note: str = "") -> Rule:
    return Rule(lambda v: v >= n, f">= {n}" + (f" ({note})" if note else ""))


def finite(low: float = 0.0, *, strict: bool = False, note: str = "") -> Rule:
    op = ">" if strict else ">="
    return Rule(lambda v: math.isfinite(v) and (v > low if strict else v >= low),
                f"a finite number {op} {low:g}" + (f" ({note})" if note else ""))


def one_of(*choices: str, words: str = "") -> Rule:
    return Rule(lambda v: v in choices, words or "one of " + ", ".join(choices))


MAX_TIMEOUT_S = 86_400.0  # a day: any larger timeout is a typo, and 1e308 s overflows the OS's timers
SEED = Rule(lambda v: 0 <= v < 2 ** 63, "in [0, 2**63)")  # numpy's and torch's seeds
TIMEOUT = Rule(lambda v: math.isfinite(v) and 0 < v <= MAX_TIMEOUT_S, f"a number in (0, {MAX_TIMEOUT_S:g}] (seconds)")
MEMORY_MB = Rule(lambda v: v == 0 or v >= 64, "0 (no limit) or >= 64")  # below 64 MB Python cannot start


# ---- building a config from data -------------------------------------------------------------------


def build(cls, data, where: str = "", prefix: bool = False):
    """`cls` (a config dataclass) from a mapping, or ValueError with one line naming the first bad field:
    "{where}: unknown key 'x'; known keys: ..." or "learner.lr must be a finite number > 0, got -1". With
    `prefix`, every message starts with `where` (a data file's errors name the file)."""
    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as e:
        message = one_line(e, cls, where)
        if prefix and not message.startswith(f"{where}: "):
            message = f"{where}: {message}"
        raise ValueError(message) from None


@functools.lru_cache(maxsize=None)
def _adapter(cls) -> TypeAdapter:
    return TypeAdapter(cls)


def check(hint, value, name: str):
    """`value` against a plain annotation (a component's option): the converted value, or one line."""
    try:
        return TypeAdapter(option_type(hint)).validate_python(value)
    except ValidationError as e:
        raise ValueError(one_line(e, None, name, top=hint)) from None
    except Exception:  # noqa: BLE001 - an annotation pydantic cannot build a schema for is not checked
        return value


def option_type(hint):
    """A plain annotation with the scalars strict as above (int -> Int, float -> Float, bool -> Bool), through
    unions, lists, tuples and dicts."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (int, float, bool):
        return {int: Int, float: Float, bool: Bool}[hint]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(option_type(a) for a in args)]
    if origin is tuple and args:
        return tuple[tuple(option_type(a) if a is not Ellipsis else a for a in args)]
    if origin is list and args:
        return list[option_type(args[0])]
    if origin is dict and len(args) == 2:
        return dict[args[0], option_type(args[1])]
    return hint


# ---- the one-line error ----------------------------------------------------------------------------

TYPE_WORDS = {"int_type": "an integer", "int_from_float": "an integer", "int_parsing": "an integer",
              "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
              "bool_type": "true or false", "bool_parsing": "true or false", "string_type": "a string",
              "dict_type": "a mapping", "mapping_type": "a mapping", "dataclass_type": "a mapping of its fields",
              "dataclass_exact_type": "a mapping of its fields", "list_type": "a list", "tuple_type": "a list",
              "literal_error": None, "none_required": "unset (null)"}


def _dataclass_in(hint):
    """`hint` if it is a dataclass, the dataclass of `X | None`, else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    members = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)]
    return members[0] if len(members) == 1 else None


def _field_path(cls, loc: tuple) -> tuple[list, Any, Any]:
    """The part of pydantic's `loc` that names fields, keys and items, the dataclass that holds the last field
    named, and the annotation of what the path names. A union member's tag (`SeedRange` in `list[int] |
    SeedRange`) is not part of the path but says which dataclass the next field belongs to."""
    path, holder, hint, owner = [], cls, (None if dataclasses.is_dataclass(cls) else cls), _dataclass_in(cls)
    for part in loc:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is dict and len(args) == 2:  # a key of a mapping: the value's type next
            path.append(part)
            hint, owner = args[1], _dataclass_in(args[1])
            continue
        if isinstance(part, int):
            path.append(part)
            if origin in (list, tuple) and args:
                hint = args[min(part, len(args) - 1)] if origin is tuple and args[-1] is not Ellipsis else args[0]
                owner = _dataclass_in(hint)
            continue
        if origin in (typing.Union, types.UnionType):  # a member's tag: `SeedRange`, `list[...]`
            tagged = [a for a in args if part.startswith(getattr(typing.get_origin(a) or a, "__name__", "?"))]
            if tagged:
                hint, owner = tagged[0], _dataclass_in(tagged[0])
                continue
        if owner is None or part not in {f.name for f in dataclasses.fields(owner)}:
            break
        holder, hint = owner, typing.get_type_hints(owner).get(part)
        path.append(part)
        owner = _dataclass_in(hint)
    return path, holder, hint


def _dotted(prefix: str, path: list) -> str:
    out = prefix
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def one_line(err: ValidationError, cls, where: str, top=None) -> str:
    """pydantic's first error in rollwise's words. With a dataclass `cls`, `where` (a file) prefixes
    unknown-key and missing-field errors; without one (`check`), `where` is the option's own name and `top`
    its annotation."""
    errors = err.errors(include_url=False)
    # the first field's error; of a union's, the deepest (the member whose shape the value has)
    e = max((x for x in errors if x["loc"][:1] == errors[0]["loc"][:1]), key=lambda x: len(x["loc"]))
    kind, loc, value = e["type"], tuple(e["loc"]), e.get("input")
    if cls is None:
        path, holder, hint = [p for p in loc if isinstance(p, int)], None, top
        name = _dotted(where, path)
    else:
        path, holder, hint = _field_path(cls, loc)
        name = _dotted("", path)
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        parent, _, parent_hint = _field_path(cls, loc[:-1])
        owner = _dataclass_in(parent_hint) if parent else cls
        known = sorted(f.name for f in dataclasses.fields(owner) if f.init)
        at = (where or "config") + (f": {_dotted('', parent)}" if parent else "")
        return f"{at}: unknown key {loc[-1]!r}; known keys: {', '.join(known)}"
    if kind in ("too_long", "too_short") or (kind == "missing" and path and isinstance(path[-1], int)):
        if kind == "missing":  # a fixed-length tuple's item: too few of them
            path, name = path[:-1], name[:name.rindex("[")]
        rule = rules(holder).get(str(path[-1])) if holder is not None and path else None
        need = f"{len(typing.get_args(hint))} items" if typing.get_origin(hint) is tuple else "another length"
        return f"{name} must be {rule.words if rule else need}, got {value!r}"
    if kind == "missing":
        return f"{where + ': ' if where else ''}missing field {name!r}"
    if kind == "value_error":  # a Rule's words
        return f"{name} must be {e['ctx']['error']}, got {value!r}"
    if kind == "literal_error":
        return f"{name} must be one of {e['ctx']['expected']}, got {value!r}"
    words = TYPE_WORDS.get(kind)
    return f"{name} must be {words}, got {value!r}" if words else f"{name}: {e['msg']}, got {value!r}"


# ---- the declared ranges, for the fuzzer and the docs ------------------------------------------------


def rules(cls, prefix: str = "", nested: dict | None = None) -> dict[str, Rule]:
    """{dotted field: its Rule} over `cls` and the dataclasses it nests (or those named in `nested`,
    {field: class}, for a field that may be None)."""
    out = {}
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        plain = (nested or {}).get(f.name) or typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(plain):
            out.update(rules(plain, f"{prefix}{f.name}."))
            continue
        for meta in _metadata(hint):
            if isinstance(meta, Rule):
                out[prefix + f.name] = meta
    return out


def _metadata(hint) -> list:
    """Annotated metadata of `hint`, including that of an Optional's member (`Annotated[int, ...] | None`)."""
    if typing.get_origin(hint) is Annotated:
        return list(hint.__metadata__) + _metadata(typing.get_args(hint)[0])
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(hint) for m in _metadata(a)]
    return []


__all__ = ["Int", "Float", "Bool", "Pair", "Rule", "at_least", "finite", "one_of", "checked", "build", "check", "option_type", "rules",
           "SEED", "TIMEOUT", "MEMORY_MB"]
