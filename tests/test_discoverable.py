"""Discoverable configuration: every config field has help and shows in `rollwise train --help`, every
registered component's options print with `rollwise list --options`, facts about components live in
the registry, and one `--set` parser serves train, bench and sim."""
import dataclasses

import pytest

from rollwise.cli import main
from rollwise.core import registry
from rollwise.core.describe import options
from rollwise.learn.learner import LearnerConfig
from rollwise.policy.warmstart import WarmStartConfig
from rollwise.run.config import Config, load_config, parse_sets


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("cls", [Config, LearnerConfig, WarmStartConfig])
def test_every_config_field_has_help(cls):
    missing = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help") and f.name != "explicit"]
    assert missing == []


def test_train_help_lists_every_field_with_type_default_and_help(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for prefix, cls in (("", Config), ("learner.", LearnerConfig), ("warmstart.", WarmStartConfig)):
        for f in dataclasses.fields(cls):
            if f.name in ("explicit", "learner", "warmstart"):
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            assert f"  {prefix}{f.name} (" in text, prefix + f.name
            assert f"default {default!r})" in text, prefix + f.name
            assert " ".join(f.metadata["help"].split()[:4]) in " ".join(text.split()), prefix + f.name
    assert "  learner.lr (float, default 0.0001)\n      AdamW learning rate" in text


def test_list_options_shows_every_parameter_of_every_component(capsys):
    for kind in registry.KINDS:
        for e in registry.entries(kind):
            rc, out, err = run(["list", "--options", e.name, "--kind", kind], capsys)
            assert rc == 0, (kind, e.name, err)
            assert out.startswith(f"{e.name} ({kind}) [{e.provenance}]")
            for o in options(e):
                assert f"    {o.name} " in out, (kind, e.name, o.name)


def test_list_options_arrol_prints_types_defaults_paper_and_where_to_set(capsys):
    rc, out, _ = run(["list", "--options", "arrol"], capsys)
    assert rc == 0
    assert "paper: ARRoL" in out and "arXiv 2603.24840" in out
    assert "options (--set planner_options.arrol.NAME=VALUE):" in out
    assert "ratio       float = 2.0" in out and "prune_at    int = 32" in out


def test_list_options_of_a_shared_name_shows_each_kind_unless_one_is_chosen(capsys):
    _, both, _ = run(["list", "--options", "gpg"], capsys)
    assert "gpg (advantage)" in both and "gpg (loss)" in both
    _, one, _ = run(["list", "--options", "gpg", "--kind", "loss"], capsys)
    assert "gpg (loss)" in one and "gpg (advantage)" not in one


def test_list_options_unknown_name_is_one_line_with_close_matches(capsys):
    rc, out, err = run(["list", "--options", "arol"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("rollwise: error: no component named 'arol'; close matches: arrol")


def test_group_estimators_are_a_registry_fact():
    facts = {e.name: e.facts.get("needs_groups") for e in registry.entries("advantage")}
    assert facts["grpo"] is True and facts["rloo"] is True and facts["mc-grpo"] is True
    assert facts["reinforce++"] is False and facts["mssr"] is False and facts["pvpo"] is False
    with pytest.raises(ValueError, match=r"n must be >= 2 with advantage 'rloo'.*without groups: mssr, pvpo, "
                                         r"reinforce\+\+\)"):
        load_config(None, {"n": 1, "learner.advantage": "rloo"})
    assert load_config(None, {"n": 1, "learner.advantage": "reinforce++"}).n == 1


def test_parse_sets_yaml_values_and_dotted_keys():
    assert parse_sets(["learner.lr=3e-4", "loggers=[jsonl, wandb]", "task_options={a: 1}", "x=true", "s=abc"]) == {
        "learner.lr": 3e-4, "loggers": ["jsonl", "wandb"], "task_options": {"a": 1}, "x": True, "s": "abc"}


@pytest.mark.parametrize("bad, message", [
    ("nokey", "--set 'nokey': expected KEY=VALUE"),
    ("a..b=1", "--set 'a..b=1': expected KEY=VALUE with a key such as learner.lr"),
    ("x=[1", "--set value '[1': not a YAML value"),
])
def test_the_same_bad_set_gives_the_same_error_in_train_bench_and_sim(bad, message, tmp_path, capsys):
    errors = []
    for argv in (["train", "--out", str(tmp_path / "t")], ["bench", "--out", str(tmp_path / "b")],
                 ["sim", "--prompts", "100", "--steps", "1"]):
        rc, _, err = run(argv + ["--set", bad], capsys)
        assert rc == 2, argv
        errors.append(err)
    assert errors[0] == errors[1] == errors[2]
    assert errors[0].startswith(f"rollwise: error: {message}") and errors[0].count("\n") == 1
    assert not (tmp_path / "t").exists() and not (tmp_path / "b").exists()


def test_sim_set_reaches_its_section_typed(capsys):
    from rollwise.sim.cli import add_sim_parser, build_config
    import argparse

    parser = argparse.ArgumentParser()
    add_sim_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["sim", "--set", "timing.engines=4", "--set", "dynamics.eta_cluster=0.2"])
    cfg = build_config(args)
    assert cfg.timing.engines == 4 and isinstance(cfg.timing.engines, int)
    assert cfg.dynamics.eta_cluster == 0.2
    with pytest.raises(ValueError, match="--set timing.engines must be an integer"):
        build_config(parser.parse_args(["sim", "--set", "timing.engines=many"]))
