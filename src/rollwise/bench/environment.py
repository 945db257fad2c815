"""Where a run ran: the CPU, the kernels torch chose for it and the library versions its numbers depend on.

A rerun of a commit, seed and plan is exact where the environment is the same, and may part from a record made
in another one by the last bits of a float: torch picks its CPU kernels (AVX-512, AVX2) by the machine, and a
library release may reorder a sum. One such rounding difference grows until it changes a sampled token, and
from there the runs are two draws of one distribution (benchmarks/plans/LOG.md, 2026-12-06: the Llama pick's
rerun parted from its 2026-12-03 record; the old commit, rerun here, reproduces today's run bit for bit, so
the cause was the environment, which no record then held). Plans and runs record it now, so a difference
between a record and its rerun can be read off them instead of bisected.
"""
from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

# what a run's numbers go through: the learner and engine (torch), the models and tokenizers, the data arrays
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy")


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; the platform's own word elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict:
    """This process's environment, as plan_record.json and each run's done.json record it."""
    import torch

    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {"cpu": cpu_model(), "machine": platform.machine(),
            "torch_cpu_kernels": torch.backends.cpu.get_cpu_capability(),  # AVX512, AVX2, DEFAULT, ...
            "python": platform.python_version(), "packages": packages}


def describe(env: dict) -> str:
    """One environment in a few words: the CPU, its kernels and the versions."""
    versions = ", ".join(f"{k} {v}" for k, v in env.get("packages", {}).items() if v)
    return f"{env.get('cpu', 'unknown')} ({env.get('torch_cpu_kernels', '?')} kernels), {versions}"


def environments_note(envs: list[dict | None]) -> str | None:
    """What a report says of its runs' environments; None where no run recorded one (records made before
    2026-12-06), so those reports read as they did."""
    seen = [e for e in envs if e]
    if not seen:
        return None
    distinct = list({describe(e): e for e in seen})
    unknown = len(envs) - len(seen)
    tail = f"; {unknown} run{'s' if unknown != 1 else ''} recorded none" if unknown else ""
    if len(distinct) == 1:
        return f"Runs made in one environment: {distinct[0]}{tail}."
    return (f"Runs made in {len(distinct)} environments ({'; '.join(distinct)}){tail}: a rerun is exact within one, "
            "and may part from a run made in another by floating-point rounding (rollwise.bench.environment).")
