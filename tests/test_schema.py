"""core/schema.py, the one validated-config mechanism: pydantic checks a dataclass from its annotations and the
first error becomes one line naming the field, in the words its declared Rule gives."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Optional

import pytest

from rollwise.core import schema
from rollwise.core.schema import Bool, Float, Int, Pair, Rule, at_least, checked, finite, one_of


@checked
@dataclass
class Inner:
    rate: Annotated[Float, finite(0, strict=True)] = 1.0
    pair: Annotated[Pair, Rule(lambda v: v[0] <= v[1], "two numbers, the first <= the second")] = (0.0, 1.0)


@checked
@dataclass
class Range:
    start: Int
    count: Annotated[Int, at_least(1)]


@checked
@dataclass
class Outer:
    steps: Annotated[Int, at_least(1)] = 1
    flag: Bool = False
    kind: Annotated[str, one_of("a", "b")] = "a"
    limit: Annotated[Int, at_least(0, "0 = none")] | None = None
    inner: Inner = field(default_factory=Inner)
    maybe: Optional[Inner] = None
    seeds: list[Int] | Range = field(default_factory=list)
    by_name: dict[str, Inner] = field(default_factory=dict)


def refused(data) -> str:
    with pytest.raises(ValueError) as e:
        schema.build(Outer, data, "f.yaml")
    assert "\n" not in str(e.value)
    return str(e.value)


def test_valid_data_builds_the_dataclass_with_yaml_conversions():
    o = schema.build(Outer, {"steps": 4e4, "inner": {"rate": 3, "pair": [0.5, 0.75]}, "seeds": {"start": 2, "count": 3}})
    assert o.steps == 40000 and type(o.steps) is int  # an integral float is the integer it names
    assert o.inner.rate == 3.0 and o.inner.pair == (0.5, 0.75)  # an int is a number; a list is a tuple
    assert o.seeds == Range(2, 3) and o.maybe is None


@pytest.mark.parametrize("data, message", [
    ({"steps": 0}, "steps must be >= 1, got 0"),
    ({"steps": 2.5}, "steps must be an integer, got 2.5"),
    ({"steps": True}, "steps must be an integer, got True"),  # YAML's true is not 1
    ({"steps": "3"}, "steps must be an integer, got '3'"),  # nor is a string a number
    ({"flag": 1}, "flag must be true or false, got 1"),
    ({"kind": "c"}, "kind must be one of a, b, got 'c'"),
    ({"limit": -1}, "limit must be >= 0 (0 = none), got -1"),
    ({"inner": {"rate": float("nan")}}, "inner.rate must be a finite number > 0, got nan"),
    ({"inner": {"rate": True}}, "inner.rate must be a number, got True"),
    ({"inner": {"pair": [2, 1]}}, "inner.pair must be two numbers, the first <= the second, got [2, 1]"),
    ({"inner": {"pair": [1]}}, "inner.pair must be two numbers, the first <= the second, got (1,)"),
    ({"inner": 5}, "inner must be a mapping of its fields, got 5"),
    ({"maybe": {"rate": 0}}, "maybe.rate must be a finite number > 0, got 0"),  # through X | None
    ({"seeds": [1, "x"]}, "seeds[1] must be an integer, got 'x'"),  # the union member the value's shape picks
    ({"seeds": {"start": 0, "count": 0}}, "seeds.count must be >= 1, got 0"),
    ({"seeds": {"start": 0}}, "f.yaml: missing field 'seeds.count'"),
    ({"by_name": {"x": {"rate": -1}}}, "by_name.x.rate must be a finite number > 0, got -1"),
    ({"stepz": 1}, "f.yaml: unknown key 'stepz'; known keys: by_name, flag, inner, kind, limit, maybe, seeds, steps"),
    ({"inner": {"rat": 1}}, "f.yaml: inner: unknown key 'rat'; known keys: pair, rate"),
    ({"by_name": {"x": {"zz": 1}}}, "f.yaml: by_name.x: unknown key 'zz'; known keys: pair, rate"),
])
def test_each_bad_value_is_one_line_naming_the_field(data, message):
    assert refused(data) == message


def test_prefix_names_the_file_in_every_message():
    with pytest.raises(ValueError, match=r"^f.yaml: steps must be >= 1, got 0$"):
        schema.build(Outer, {"steps": 0}, "f.yaml", prefix=True)


def test_rules_lists_the_declared_ranges_through_nested_dataclasses():
    r = schema.rules(Outer)
    assert set(r) == {"steps", "kind", "limit", "inner.rate", "inner.pair"}
    assert r["limit"].words == ">= 0 (0 = none)" and r["steps"].test(1) and not r["steps"].test(0)
    assert set(schema.rules(Outer, nested={"maybe": Inner})) >= {"maybe.rate", "maybe.pair"}


@pytest.mark.parametrize("hint, value, expected", [
    (int, 4.0, 4), (float, 2, 2.0), (tuple[float, float], [1, 2], (1.0, 2.0)), (list[int], [1.0], [1]),
    (int | None, None, None), (dict[str, float], {"a": 1}, {"a": 1.0}),
])
def test_check_converts_a_component_option_like_a_field(hint, value, expected):
    got = schema.check(hint, value, "planner_options.x.y")
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("hint, value, message", [
    (int, True, "planner_options.x.y must be an integer, got True"),
    (float, "x", "planner_options.x.y must be a number, got 'x'"),
    (bool, 0, "planner_options.x.y must be true or false, got 0"),
    (list[int], [1, "a"], "planner_options.x.y[1] must be an integer, got 'a'"),
])
def test_check_refuses_a_component_option_in_one_line(hint, value, message):
    with pytest.raises(ValueError) as e:
        schema.check(hint, value, "planner_options.x.y")
    assert str(e.value) == message
