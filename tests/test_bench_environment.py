"""What plans and runs record of where they ran, and what a report says of it (rollwise.bench.environment)."""
from __future__ import annotations

import platform

import torch

from rollwise.bench.environment import PACKAGES, describe, environment, environments_note


def test_the_environment_names_this_cpu_its_torch_kernels_and_the_versions():
    env = environment()
    assert set(env["packages"]) == set(PACKAGES)
    assert env["packages"]["torch"] == torch.__version__  # read from the installed distributions
    assert env["torch_cpu_kernels"] == torch.backends.cpu.get_cpu_capability()
    assert env["python"] == platform.python_version() and env["cpu"]


def env(cpu="EPYC", kernels="AVX512", torch_version="2.13.0+cpu", transformers="5.24.0"):
    return {"cpu": cpu, "torch_cpu_kernels": kernels, "packages": {"torch": torch_version, "transformers": transformers,
                                                                   "numpy": None}}


def test_describe_leaves_out_what_is_not_installed():
    assert describe(env()) == "EPYC (AVX512 kernels), torch 2.13.0+cpu, transformers 5.24.0"


def test_the_report_line_counts_environments_and_runs_that_recorded_none():
    assert environments_note([]) is None
    assert environments_note([None, None]) is None  # records from before: the report reads as it did
    assert environments_note([env(), env()]) == "Runs made in one environment: " + describe(env()) + "."
    assert environments_note([env(), None]).endswith("; 1 run recorded none.")
    two = environments_note([env(), env(kernels="AVX2"), env(transformers="5.25.0"), None, None])
    assert two.startswith("Runs made in 3 environments (EPYC (AVX512 kernels)")
    assert "EPYC (AVX2 kernels)" in two and "transformers 5.25.0" in two and "; 2 runs recorded none:" in two
    assert "may part from a run made in another" in two
