"""A fuzzer for bad input (issue 30, "so that it stays so"): Hypothesis draws invalid values for every
config field and every `*_options` key of every registered component, malformed plan files and malformed
task rows, and each is given to `rollwise` (its `main`, in this process) as a user would. Each must be
refused the way docs/robustness.md promises: one line on stderr starting `rollwise: error:`, a non-zero
exit, no traceback, and nothing written into `--out`.

What counts as invalid is decided here, independently of rollwise's own checks: a value whose type is not
the field's annotation, a number outside the field's declared range (its `Rule`, whose words the error messages
quote), an unknown option key, NaN for any option, a name no registry holds. The fields and components are
walked from the config dataclasses and the registry at collection time, so a new field or component is
fuzzed without editing this file.

Bounded for the core suite: a few examples per field and per option, derandomized (CI reproduces a
failure exactly), no deadline (a loaded CI core is slow).
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import math
import os
import tempfile
import types
import typing
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from rollwise.core import registry  # noqa: E402
from rollwise.core.settings import settings as config_settings  # noqa: E402
from rollwise.policy.warmstart import WarmStartConfig  # noqa: E402
from rollwise.run.config import Config, ranges  # noqa: E402

RANGES = ranges()  # {dotted field: its declared Rule}

FUZZ = settings(max_examples=2, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

# A base config that is valid and tiny: should a drawn value slip through every check, the run is one short
# step (and the test fails on its exit code), never a long one.
BASE = {"steps": 1, "batch_size": 2, "n": 2, "eval_every": 0, "checkpoint_every": 1, "max_new_tokens": 4}

# Fields where any string is valid (a directory to write to; characters for the tokenizer, which would
# warm-start a new base): only values of another type are drawn for them.
FREE_TEXT = {"out", "warmstart.extra_chars"}


def run_cli(argv: list[str], cwd: Path) -> tuple[int, str]:
    """`rollwise ARGV` in this process from `cwd`: (exit code, stderr). An exception out of main (a
    traceback a user would see) fails the test with the input that caused it."""
    from rollwise.cli import main

    err, old = io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:  # argparse
                code = e.code
            except BaseException as e:  # noqa: BLE001 - what a user would see as a traceback
                pytest.fail(f"rollwise {' '.join(map(str, argv))}: raised {type(e).__name__}: {e}")
    finally:
        os.chdir(old)
    return code, err.getvalue()


def assert_refused(code, err: str, what) -> None:
    lines = err.splitlines()
    assert code not in (0, None), f"{what}: accepted (exit {code})"
    assert "Traceback" not in err, f"{what}: {err}"
    assert len(lines) == 1 and lines[0].startswith("rollwise: error: "), f"{what}: stderr was {err!r}"


def files_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*")) if d.exists() else []


def refuse_config(doc: dict, what) -> None:
    """`rollwise train --config C --out OUT` on `doc` over BASE: refused, and OUT (and the directory it is
    run from) left as they were."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = tmp / "cwd"
        work.mkdir()
        cfg = tmp / "config.yaml"
        cfg.write_text(yaml.safe_dump({**BASE, **doc}))
        out = ["--out", tmp / "run"] if "out" not in doc else []
        code, err = run_cli(["train", "--config", cfg, *out], work)
        assert_refused(code, err, what)
        assert files_under(tmp / "run") == [] and files_under(work) == [], f"{what}: wrote files"


# ---- invalid values by type ------------------------------------------------------------------------

TEXT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", max_size=8)
NUMBERS = st.one_of(st.integers(-10 ** 12, 10 ** 12), st.floats(allow_nan=True, allow_infinity=True))
SCALARS = st.one_of(NUMBERS, st.booleans(), TEXT.map(lambda s: "zz_fuzz_" + s))
JUNK = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(TEXT, SCALARS, max_size=2))


def type_ok(value, hint) -> bool:
    """Whether `value` has the type `hint` as a YAML config writes it (an integral float is an int; a list
    of two numbers is a tuple[float, float]). The fuzzer's own notion, not rollwise's."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if hint is int:
        return isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if hint is float:
        return isinstance(value, (int, float))
    if hint is str:
        return isinstance(value, str)
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(type_ok(v, a) for v, a in zip(value, args))
        return all(type_ok(v, args[0]) for v in value) if args else True
    return True  # a type this fuzzer does not know: never counted as invalid by type


def invalid_values(key: str, hint) -> st.SearchStrategy:
    """Values that must be refused for the field `key` of type `hint`: another type, a number outside its
    documented range, or (for a string field that names something) a name nothing has."""
    test = getattr(RANGES.get(key), "test", None)

    def invalid(v) -> bool:
        if not type_ok(v, hint):
            return True
        if test is not None and v is not None:
            try:
                return not test(v)
            except TypeError:
                return True
        return False

    draws = [JUNK.filter(invalid)]
    if type_ok("x", hint) and key not in FREE_TEXT and test is None:  # a string field that names something
        draws.append(TEXT.map(lambda s: "zz_fuzz_" + s))  # no component, device, file or mode has this name
    return st.one_of(*draws)


def nested(key: str, value) -> dict:
    doc: dict = {}
    node = doc
    *parents, last = key.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return doc


def _field_types() -> list[tuple[str, object]]:
    """(dotted key, annotation) of every documented config field, nested sections flattened."""
    from rollwise.learn.learner import LearnerConfig

    sections = {"learner": LearnerConfig, "warmstart": WarmStartConfig}
    out = []
    for s in config_settings(Config, nested={"warmstart": WarmStartConfig}):
        head, _, rest = s.key.partition(".")
        out.append((s.key, typing.get_type_hints(sections[head] if rest else Config)[rest or head]))
    return out


CONFIG_FIELDS = _field_types()


@pytest.mark.parametrize("key,hint", CONFIG_FIELDS, ids=[k for k, _ in CONFIG_FIELDS])
def test_every_config_field_refuses_invalid_values(key, hint):
    @FUZZ
    @given(invalid_values(key, hint))
    def check(value):
        refuse_config(nested(key, value), f"{key}={value!r}")

    check()


# ---- every option of every registered component ----------------------------------------------------

# Where a component of each kind is named in a config, and where its options go
PLACES = {
    "planner": lambda name, opts: {"planner": name, "planner_options": {name: opts}},
    "task": lambda name, opts: {"task": name, "task_options": opts},
    "engine": lambda name, opts: {"engine": name, "engine_options": opts},
    "shaping": lambda name, opts: {"reward_shaping": name, "reward_shaping_options": opts},
    "advantage": lambda name, opts: {"learner": {"advantage": name, "advantage_options": opts}},
    "loss": lambda name, opts: {"learner": {"loss": name, "loss_options": opts}},
    "aggregation": lambda name, opts: {"learner": {"loss_agg": name, "loss_agg_options": opts}},
    "correction": lambda name, opts: {"learner": {"correction": name, "correction_options": opts}},
    "recompose": lambda name, opts: {"learner": {"recompose": name, "recompose_options": opts}},
}


def options_of(kind: str, obj) -> dict[str, object]:
    """{option: annotation (None if it has none)}: the keyword parameters with defaults that a config's
    options set (a recomposer class takes them per call, the others when built)."""
    target = obj.__call__ if kind == "recompose" and isinstance(obj, type) else obj
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return {}
    try:
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: not checked by type
        hints = {}
    return {p.name: hints.get(p.name) for p in params
            if p.default is not p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and not p.name.startswith("_")}


def _option_cases():
    cases = []
    for kind in registry.KINDS:
        assert kind in PLACES, f"kind {kind!r}: tell the fuzzer where its options go in a config"
        for e in registry.entries(kind):
            cases.append((kind, e.name, "zz_fuzz_unknown_key", None))
            for opt, hint in options_of(kind, e.obj).items():
                cases.append((kind, e.name, opt, hint))
    return cases


OPTION_CASES = _option_cases()


@pytest.mark.parametrize("kind,name,option,hint", OPTION_CASES,
                         ids=[f"{k}-{n}-{o}" for k, n, o, _ in OPTION_CASES])
def test_every_option_of_every_component_refuses_invalid_values(kind, name, option, hint):
    if option == "zz_fuzz_unknown_key":
        values = JUNK  # any value: the key is unknown
    elif hint is None or not any(not type_ok(v, hint) for v in (1.5, "x", [1], {"a": 1}, True, None)):
        values = st.just(math.nan)  # unannotated (or takes anything): NaN is refused in every option
    else:
        values = st.one_of(JUNK.filter(lambda v: not type_ok(v, hint)), st.just(math.nan))

    @settings(FUZZ, max_examples=1)
    @given(values)
    def check(value):
        refuse_config(PLACES[kind](name, {option: value}), f"{kind} {name}: {option}={value!r}")

    check()


# ---- code named by a data file: standard-library and installed callables are refused (issue 45, item 1) ----

# Every config field that imports code by `module:Attr`, and where it goes in a config
CODE_FIELDS = {
    "reward": lambda spec: {"reward": spec},
    "planner": lambda spec: {"planner": spec},
    "task": lambda spec: {"task": spec},
    "engine": lambda spec: {"engine": spec},
    "reward_shaping": lambda spec: {"reward_shaping": spec},
    **{f"learner.{k}": (lambda k: lambda spec: {"learner": {k: spec}})(k)
       for k in ("advantage", "loss", "loss_agg", "correction", "recompose")},
    "learner.recompose_options.advantage": lambda spec: {"learner": {"recompose": "shuffle-r1",
                                                                     "recompose_options": {"advantage": spec}}},
}
# Callables that would delete, run or open something, and modules whose import alone does something
# (`this` prints; none of them may be imported because a config names them)
FOREIGN_CODE = ["shutil:rmtree", "os:remove", "os:system", "posix:unlink", "subprocess:run", "subprocess:Popen",
                "builtins:exec", "builtins:eval", "pathlib:Path", "tempfile:mkdtemp", "webbrowser:open", "this:s",
                "yaml:load", "numpy:save", "torch:save", "rollwise.run.rundir:start"]


@pytest.mark.parametrize("field", sorted(CODE_FIELDS))
def test_every_field_that_imports_code_refuses_foreign_callables(field):
    """A config naming a standard-library (or installed, or rollwise-internal) callable in any field that
    imports code: one line saying it is refused, nothing written, and its module never imported."""
    import sys

    @settings(FUZZ, max_examples=4)
    @given(st.sampled_from(FOREIGN_CODE))
    def check(spec):
        module = spec.partition(":")[0]
        had = module in sys.modules
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            for answer in ("1", "2", "10", "42"):  # the probe: folders named like the model's answers
                (work / answer).mkdir()
            cfg = work / "config.yaml"
            cfg.write_text(yaml.safe_dump({**BASE, **CODE_FIELDS[field](spec)}))
            code, err = run_cli(["train", "--config", cfg, "--out", work / "run"], work)
            assert_refused(code, err, f"{field}={spec}")
            assert "refused" in err and repr(spec) in err, f"{field}={spec}: {err}"
            assert sorted(p.name for p in work.iterdir()) == ["1", "10", "2", "42", "config.yaml"], f"{field}={spec}"
        assert had or module not in sys.modules, f"{field}={spec}: {module} was imported"

    check()


PLAN_CODE_FIELDS = {
    "task": lambda plan, spec: {**plan, "task": spec},
    "engine": lambda plan, spec: {**plan, "engine": spec},
    "planner": lambda plan, spec: {**plan, "arms": {**plan["arms"], "ar3po": {"planner": spec}}},
    **{f"set.{k}": (lambda k: lambda plan, spec: {**plan, "arms": {
        **plan["arms"], "ar3po": {"planner": "ar3po", "set": {k: spec}}}})(k)
       for k in ("reward", "engine", "learner.advantage", "learner.loss", "reward_shaping")},
}


@pytest.mark.parametrize("field", sorted(PLAN_CODE_FIELDS))
def test_a_plan_naming_foreign_code_is_refused(field):
    """The same rule for a plan file: every field that names code, on a dry run."""

    @settings(FUZZ, max_examples=4)
    @given(st.sampled_from(FOREIGN_CODE))
    def check(spec):
        code, err = run_plan(yaml.safe_dump(PLAN_CODE_FIELDS[field](EXAMPLE_PLAN, spec)), f"plan {field}={spec}")
        assert code != 0 and (repr(spec) in err or spec.replace(":", "") in err), f"plan {field}={spec}: {err}"

    check()


def _range_cases():
    """(kind, component, option, hint, where, test) for every `*_options` range (run/config.py
    OPTION_RANGES) and every registered component that takes that option."""
    from rollwise.run.config import OPTION_RANGES

    kinds = {"engine_options": "engine", "task_options": "task", "reward_shaping_options": "shaping"}
    cases = []
    for key, rule in OPTION_RANGES.items():
        test = rule.test
        where, opt = key.rsplit(".", 1)
        cases += [(k, n, o, h, where, test) for k, n, o, h in OPTION_CASES if k == kinds[where] and o == opt]
    return cases


RANGE_CASES = _range_cases()


def test_every_option_range_applies_to_some_component():
    from rollwise.run.config import OPTION_RANGES

    assert {f"{w}.{o}" for _, _, o, _, w, _ in RANGE_CASES} == set(OPTION_RANGES)


@pytest.mark.parametrize("kind,name,option,hint,where,test", RANGE_CASES,
                         ids=[f"{k}-{n}-{o}" for k, n, o, *_ in RANGE_CASES])
def test_every_option_refuses_values_outside_its_range(kind, name, option, hint, where, test):
    values = st.one_of(st.integers(-10 ** 6, 10 ** 12), st.floats(allow_nan=False, allow_infinity=True),
                       st.sampled_from([0, -1, 0.0, 1e308])).filter(lambda v: type_ok(v, hint) and not test(v))

    @settings(FUZZ, max_examples=3)
    @given(values)
    def check(value):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "c.yaml").write_text(yaml.safe_dump({**BASE, **PLACES[kind](name, {option: value})}))
            code, err = run_cli(["train", "--config", tmp / "c.yaml", "--out", tmp / "run"], tmp)
            assert_refused(code, err, f"{name}: {option}={value!r}")
            assert f"{where}.{option} must be" in err, err  # refused by its range, not by something else
            assert files_under(tmp / "run") == []

    check()


# ---- malformed plan files (rollwise bench --plan) -------------------------------------------------

EXAMPLE_PLAN = yaml.safe_load((Path(__file__).parents[1] / "benchmarks/plans/example_task1.yaml").read_text())


def _paths(node, prefix=()):
    """Every key path of a YAML document (into mappings)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))


PLAN_PATHS = list(_paths(EXAMPLE_PLAN))


def _set_path(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for k in path[:-1]:
        node = node.setdefault(k, {})  # an optional block the example leaves out (task_options)
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DELETE = object()


def run_plan(text: str, what) -> tuple[int, str]:
    """`rollwise bench --plan P --dry-run --out OUT`: (exit code, stderr); OUT must stay empty either way."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "plan.yaml").write_text(text)
        code, err = run_cli(["bench", "--plan", tmp / "plan.yaml", "--dry-run", "--out", tmp / "out"], tmp)
        assert "Traceback" not in err, f"{what}: {err}"
        assert files_under(tmp / "out") == [], f"{what}: wrote into --out"
        if code != 0:
            assert_refused(code, err, what)
        return code, err


def _same_kind(a, b) -> bool:
    number = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b)
    return type(a) is type(b) or isinstance(a, number) and isinstance(b, number)


@settings(FUZZ, max_examples=40)
@given(st.sampled_from(PLAN_PATHS), st.one_of(JUNK, st.none(), st.just(_DELETE)))
def test_a_malformed_plan_is_one_line_and_writes_nothing(path, value):
    """A value of any kind put anywhere in the example plan (or a field deleted): a clean refusal or, for a
    value the plan may hold, a dry run; never a traceback. A required field deleted, or a value of another
    type in place of a scalar field (every one but the free-text `notes` has a type), must be refused."""
    code, _ = run_plan(yaml.safe_dump(_set_path(EXAMPLE_PLAN, path, value)),
                       f"plan {'.'.join(map(str, path))}={value!r}")
    from rollwise.bench.plan import REQUIRED

    old = EXAMPLE_PLAN
    for k in path:
        old = old[k]
    deleted_required = value is _DELETE and len(path) == 1 and path[0] in REQUIRED
    scalar_retyped = value not in (_DELETE, None) and not isinstance(old, (dict, list)) and \
        not _same_kind(old, value) and path[0] != "notes"
    if deleted_required or scalar_retyped:
        assert code != 0, f"plan {path}={value!r} accepted"


def _key_line_twice(doc: dict, path: tuple) -> str:
    """The plan as YAML with the line of the key at `path` written twice (for a mapping, its `key:` header:
    the first copy is then an empty value, the second holds the mapping)."""
    lines = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=10 ** 6).splitlines()
    at: list = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("- ") or not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        at = at[:depth] + [yaml.safe_load(line.strip().split(":")[0])]
        if tuple(at) == tuple(path):
            return "\n".join(lines[:i + 1] + [line] + lines[i + 1:]) + "\n"
    raise AssertionError(f"no line for {path}")


@settings(FUZZ, max_examples=12)
@given(st.sampled_from(PLAN_PATHS))
def test_a_plan_with_a_key_given_twice_is_refused_naming_the_key(path):
    """A key given twice anywhere in a plan (two arms of one name, a budget field twice): yaml.safe_load
    would keep the last without a word."""
    code, err = run_plan(_key_line_twice(EXAMPLE_PLAN, path), f"plan key {'.'.join(map(str, path))} twice")
    assert code != 0 and f"key {path[-1]!r} given twice" in err, err


def _numeric_paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numeric_paths(v, prefix + (k,))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield prefix


# every number of the example plan, and the optional numeric fields it leaves out
PLAN_NUMBERS = list(_numeric_paths(EXAMPLE_PLAN)) + [("pool_size",), ("evaluation", "k"), ("evaluation", "samples"),
                                                     ("task_options", "pool_size")]


@pytest.mark.parametrize("path", PLAN_NUMBERS, ids=[".".join(p) for p in PLAN_NUMBERS])
def test_a_non_finite_number_anywhere_in_a_plan_is_refused(path):
    @settings(FUZZ, max_examples=2)
    @given(st.sampled_from([math.nan, math.inf, -math.inf]))
    def check(value):
        code, _ = run_plan(yaml.safe_dump(_set_path(EXAMPLE_PLAN, path, value)), f"plan {'.'.join(path)}={value}")
        assert code != 0, f"plan {'.'.join(path)}={value} accepted"

    check()


def _plan_bounds():
    from rollwise.bench.plan import MAX_SEEDS, MAX_SIZE

    paths = {"pool_size": ("pool_size",), "budget.compute_units": ("budget", "compute_units")}
    cases = [(paths.get(k, tuple(k.split("."))), v) for k, v in MAX_SIZE.items()]
    return cases + [(("seeds", "count"), MAX_SEEDS)]


@pytest.mark.parametrize("path,bound", _plan_bounds(), ids=[".".join(p) for p, _ in _plan_bounds()])
def test_a_plan_size_past_its_bound_is_refused_at_once(path, bound):
    """No size makes `--dry-run` enumerate or build without end: past its bound, one line at once."""
    import time

    t0 = time.perf_counter()
    code, err = run_plan(yaml.safe_dump(_set_path(EXAMPLE_PLAN, path, int(bound) * 10 + 1)), f"plan {path} huge")
    assert code != 0 and path[-1] in err and time.perf_counter() - t0 < 30, err


@settings(FUZZ, max_examples=10)
@given(st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                 JUNK.map(yaml.safe_dump)))
def test_a_plan_that_is_not_a_plan_is_one_line(text):
    code, _ = run_plan(text, f"plan text {text!r}")
    assert code != 0


# ---- malformed task rows (--task file) ------------------------------------------------------------

GOOD_ROWS = {"train": [{"prompt": f"{a}+{a}=", "answer": str(a + a)} for a in range(1, 9)],
             "heldout": [{"prompt": f"{a}+{a + 1}=", "answer": str(a + a + 1)} for a in range(1, 9)]}
BAD_ROW = st.one_of(
    st.text(max_size=20).filter(lambda s: s.strip() and "\n" not in s and "\r" not in s),  # not JSON (or not an object)
    JUNK.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v)),
    st.fixed_dictionaries({"prompt": st.one_of(JUNK.filter(lambda v: not isinstance(v, str)), st.just(""),
                                               st.just("   ")), "answer": st.just("2")}).map(json.dumps),
    st.fixed_dictionaries({"prompt": st.just("1+1="),
                           "answer": st.one_of(st.booleans(), st.lists(SCALARS, max_size=2),
                                               st.dictionaries(TEXT, SCALARS, max_size=1), st.just(""),
                                               st.just(" "))}).map(json.dumps),
    st.dictionaries(TEXT, SCALARS, max_size=2).filter(lambda d: not {"prompt", "answer"} <= set(d)).map(json.dumps),
)


@settings(FUZZ, max_examples=20)
@given(BAD_ROW, st.integers(0, 8), st.sampled_from(["train", "heldout"]))
def test_a_malformed_task_row_is_one_line_naming_the_row(line, at, which):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = {}
        for split in ("train", "heldout"):
            lines = [json.dumps(r) for r in GOOD_ROWS[split]]
            if split == which:
                lines.insert(at, line)
            files[split] = tmp / f"{split}.jsonl"
            files[split].write_text("\n".join(lines) + "\n", encoding="utf-8")
        code, err = run_cli(["train", "--task", "file", "--set", f"task_options.train_path={files['train']}",
                             "--set", f"task_options.heldout_path={files['heldout']}", "--out", tmp / "run",
                             *sum((["--set", f"{k}={v}"] for k, v in BASE.items()), [])], tmp)
        assert_refused(code, err, f"{which} row {at + 1}: {line!r}")
        assert f"row {at + 1}" in err and f"{which}.jsonl" in err, err
        assert files_under(tmp / "run") == []
