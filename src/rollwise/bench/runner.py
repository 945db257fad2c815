"""Equal-budget benchmark runs: every (mix, planner, seed) is one `rollwise train` process with the same
task, base checkpoint, learner settings and token budget; planners differ only in Control/Filter/Replay.

Runs execute as separate processes, `jobs` at a time (one torch thread each), and a killed bench resumes:
a finished run (its `done.json` exists) is never redone, and an unfinished one resumes from its own
checkpoint.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..run.records import read_rows
from .environment import environment

# Difficulty mixes of the arithmetic task's train pool (weights of levels 1..6). The default is chosen so
# that roughly 30-60% of GRPO's groups are zero-variance at the base checkpoint, as the papers report on
# real data. Another task brings its own (`bench_mixes`, see task_mixes).
MIXES = {
    "default": (1, 1, 1, 1, 1, 1),
    "easy": (4, 4, 2, 1, 0.5, 0.5),
    "hard": (0.25, 0.25, 0.5, 1, 2, 3),
}


PROGRESS_EVERY_S = 10  # how often run_all prints where each running run is


def task_mixes(task: str) -> dict:
    """The pool difficulty mixes a bench on `task` offers, {name: level weights}: MIXES for the arithmetic
    task, a task's own `bench_mixes`, or else only "default" (None: the task's own pool, unchanged)."""
    if task == "arithmetic":
        return MIXES
    from ..core import registry
    from ..core.task import option

    return dict(option(registry.get("task", task).obj, "bench_mixes") or {"default": None})


def task_bench_defaults(task: str) -> dict:
    """BenchConfig settings a task declares (`bench_defaults`: e.g. a budget sized to its response
    lengths); the arithmetic task's are BenchConfig's own."""
    from ..core import registry
    from ..core.task import option

    return dict(option(registry.get("task", task).obj, "bench_defaults"))


@dataclass
class BenchConfig:
    out: str = "bench-out"
    planners: list[str] = field(default_factory=lambda: ["uniform", "dapo", "greso", "oracle"])
    mixes: list[str] = field(default_factory=lambda: ["default"])
    seeds: int = 3
    # the first seed: a tuning bench runs seeds that are not the reported ones (e.g. 100..102; report 0..7)
    seed_start: int = 0
    budget_tokens: int = 40_000  # the recorded protocol (README, benchmarks/results/bench_full)
    jobs: int = 2
    eval_tokens: int = 0  # evaluate after each multiple of this many generated tokens (0: budget / 10)
    # Bench 3.0 (shared/WAVE3.md): runs end on compute units under `cost_profile` and are evaluated at
    # every `eval_compute`; `budget_tokens` is then only a cap. 0: the token budget alone (earlier benches)
    budget_compute: float = 0.0
    eval_compute: float = 0.0
    cost_profile: str = "gpu-h100-v1"
    # Bench 4.0 (issue 41): runs may end on modelled GPU-seconds under `cluster_profile` (response lengths x
    # `length_scale`), evaluated at every `eval_gpu_seconds` of them instead of compute. 0: not set
    budget_gpu_seconds: float = 0.0
    eval_gpu_seconds: float = 0.0
    cluster_profile: str = "h100x16-llama8b-v1"
    length_scale: float = 0.0
    eval_size: int = 1000
    # Small enough that a run revisits every prompt ~3 times within the budget: history-based selection
    # (GRESO, Prompt Replay, CDAS, ...) needs prompts to come back, as they do over the papers' epochs.
    pool_size: int = 300
    extra: dict = field(default_factory=dict)  # more config overrides for every run
    engine: str = "torch"  # "torch": the tiny model; "sim": the population simulator (sim/bench.py)
    sim_profile: str = "tiny"  # the simulator's parameters (sim/profiles.py)
    task: str = "arithmetic"  # a registered task; its mixes are task_mixes(task)
    seed_values: list[int] | None = None  # explicit seeds (a plan's), in place of seed_start..+seeds
    task_options: dict = field(default_factory=dict)  # more task options for every run (a plan's data_seed)


def seed_list(cfg: BenchConfig) -> list[int]:
    """The bench's seeds: `seed_values` if given, else `seeds` of them from `seed_start`."""
    if cfg.seed_values is not None:
        return list(cfg.seed_values)
    return list(range(cfg.seed_start, cfg.seed_start + cfg.seeds))


class BenchFailed(RuntimeError):
    """Some bench runs failed (each named with its log); the CLI prints it as one line."""


def safe_name(name: str) -> str:
    """A name as one directory name: `greso+ar3po` -> `greso_plus_ar3po`, and every character outside
    [A-Za-z0-9._-] -> `_`, so a planner, task or mix name never becomes a path (`../../x` -> `.._.._x`,
    and a name of dots only is refused)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", name.replace("+", "_plus_").replace(":", "_"))
    if not slug.strip("."):
        raise ValueError(f"name {name!r} cannot name a run directory")
    return slug


def run_dir(cfg: BenchConfig, mix: str, planner: str, seed: int) -> Path:
    return Path(cfg.out) / "runs" / safe_name(mix) / safe_name(planner) / f"seed{seed}"


def eval_tokens(cfg: BenchConfig) -> int:
    return cfg.eval_tokens or max(cfg.budget_tokens // 10, 1)


def run_settings(cfg: BenchConfig, mix: str, planner: str, seed: int) -> dict:
    """The config overrides of one bench run (its identity: a finished run is reused only if equal).
    `--set planner_options.X...` reaches only the planners that have the component X."""
    names = set(planner.split("+"))
    extra = {}
    for key, value in cfg.extra.items():  # `planner_options={X: {...}}` or `planner_options.X.key=...`
        if key == "planner_options" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k in names}
            if not value:
                continue
        elif key.startswith("planner_options.") and key.split(".")[1] not in names:
            continue
        extra[key] = value
    return {
        "planner": planner, "seed": seed, "steps": 100_000, "budget_tokens": cfg.budget_tokens,
        "eval_every": 0, "eval_every_tokens": eval_tokens(cfg), "eval_size": cfg.eval_size, "checkpoint_every": 10,
        # the arithmetic task is the default and unnamed, so runs recorded before tasks had a name match
        **({"task": cfg.task} if cfg.task != "arithmetic" else {}),
        "task_options": {**pool_options(cfg, mix), **cfg.task_options},
        **({"engine": cfg.engine} if cfg.engine != "torch" else {}),
        **(compute_settings(cfg) if cfg.budget_compute else {}),
        **(gpu_settings(cfg) if cfg.budget_gpu_seconds else {}),
        **extra,
    }


def compute_settings(cfg: BenchConfig) -> dict:
    """A compute-ended run (a plan's): it stops once `budget_compute` units are spent and is evaluated at
    every `eval_compute` of them, not at token multiples."""
    return {"budget_compute": float(cfg.budget_compute), "cost_profile": cfg.cost_profile, "eval_every_tokens": 0,
            "eval_every_compute": float(cfg.eval_compute or cfg.budget_compute / 10)}


def gpu_settings(cfg: BenchConfig) -> dict:
    """A run ended on modelled GPU-seconds (a plan's `budget.gpu_seconds`): it stops once `budget_gpu_seconds`
    are spent and is evaluated at every `eval_gpu_seconds` of them, in place of the compute spacing (a compute
    budget, when set too, still ends it if reached first)."""
    return {"budget_gpu_seconds": float(cfg.budget_gpu_seconds), "cluster_profile": cfg.cluster_profile,
            "length_scale": float(cfg.length_scale), "eval_every_tokens": 0, "eval_every_compute": 0.0,
            "eval_every_gpu_seconds": float(cfg.eval_gpu_seconds or cfg.budget_gpu_seconds / 10)}


def pool_options(cfg: BenchConfig, mix: str) -> dict:
    """The task options that set the train pool: its size and the mix's level weights, where the task
    takes them (a file task takes neither: its pool is its file)."""
    import inspect

    from ..core import registry

    mixes = task_mixes(cfg.task)
    if mix not in mixes:
        raise ValueError(f"task {cfg.task!r} has no mix {mix!r}; available: {', '.join(mixes)}")
    params = inspect.signature(registry.get("task", cfg.task).obj).parameters
    out = {"pool_size": cfg.pool_size} if "pool_size" in params else {}
    if mixes[mix] is not None:
        out["level_weights"] = list(mixes[mix])
    return out


def run_command(cfg: BenchConfig, mix: str, planner: str, seed: int) -> list[str]:
    cmd = [sys.executable, "-m", "rollwise.cli", "train", "--out", str(run_dir(cfg, mix, planner, seed))]
    for k, v in run_settings(cfg, mix, planner, seed).items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    return cmd


def check_reusable(cfg: BenchConfig, key: tuple) -> bool:
    """True if the run is finished with these very settings; an unfinished run dir with these settings
    resumes. A run dir made with other settings is an error naming them: rollwise never reuses or
    overwrites it (choose another --out)."""
    d = run_dir(cfg, *key)
    want = run_settings(cfg, *key)
    have_file = d / "bench.json"
    if have_file.exists():
        have = json.loads(have_file.read_text())["settings"]
        if have != json.loads(json.dumps(want)):
            keys = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
            raise ValueError(f"{d} holds a run made with other settings ({', '.join(keys)}); "
                             "use another --out or remove it")
    elif d.exists() and any(d.iterdir()):
        raise ValueError(f"{d} holds files of a run rollwise cannot identify (no bench.json); "
                         "use another --out or remove it")
    return any((d / f).exists() for f in ("done.json", "skipped.json"))


def check_engine(name: str) -> None:
    """The bench engine must be registered (an unknown name lists the known ones)."""
    from ..core import registry

    registry.get("engine", name)


def run_all(cfg: BenchConfig, log=print) -> None:
    """Every run of the bench, `jobs` at a time. The bench holds a lock on its --out while it runs (a
    second bench on it fails at once), and each trainer holds its own run directory's."""
    run_benches([cfg], cfg.jobs, log)


def run_benches(cfgs: list[BenchConfig], jobs: int, log=print) -> None:
    """The runs of several benches (a plan's arms) from one queue, `jobs` at a time, so no core idles while
    an arm's last seed runs alone. Each bench's --out is locked while its runs go."""
    from contextlib import ExitStack

    from ..run.rundir import OutLock

    if jobs < 1:
        raise ValueError(f"bench: --jobs must be >= 1, got {jobs}")
    for cfg in cfgs:
        _check(cfg)
    with ExitStack() as locks:
        todo = []
        for cfg in cfgs:
            Path(cfg.out).mkdir(parents=True, exist_ok=True)
            locks.enter_context(OutLock(Path(cfg.out), "bench --out"))
            todo.append([(cfg, k) for k in _prepare(cfg, log)])
        queue = interleave(todo)
        if not queue:
            return
        for cfg in {id(c): c for c, _ in queue}.values():
            _ensure_base(cfg, log)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ROLLWISE_PROGRESS": "0"}
        running: list[tuple[subprocess.Popen, BenchConfig, tuple, float]] = []
        try:
            _run_processes(queue, jobs, running, env, log)
        finally:  # a stopped bench (Ctrl-C, SIGTERM) stops its trainers: no orphan writes into run dirs
            for proc, _, _, _ in running:
                if proc.returncode is None:
                    proc.terminate()
            for proc, cfg, key, _ in running:
                deadline = time.perf_counter() + 30
                while (cpu := finished_cpu_seconds(proc)) is None and time.perf_counter() < deadline:
                    time.sleep(0.1)
                if cpu is None:
                    proc.kill()
                    proc.wait()
                else:  # the stopped part's CPU: the resumed run adds it to its own (done.json)
                    add_partial_cpu(run_dir(cfg, *key), cpu)


def interleave(runs: list[list]) -> list:
    """Several benches' runs (a plan's arms, each in seed order) as one queue, seed by seed, the arms' order
    rotated one place each seed: arm A's seed 0, B's 0, B's 1, A's 1, ... So every arm's runs meet the same
    spells of load on a shared machine (WAVE4's rule for wall-clock figures), and none waits for the end."""
    out = []
    for i in range(max((len(r) for r in runs), default=0)):
        order = runs[i % len(runs):] + runs[:i % len(runs)]
        out += [r[i] for r in order if i < len(r)]
    return out


def _check(cfg: BenchConfig) -> None:
    check_engine(cfg.engine)
    if cfg.jobs < 1:
        raise ValueError(f"bench: --jobs must be >= 1, got {cfg.jobs}")
    for name, value in (("seeds", cfg.seeds), ("pool-size", cfg.pool_size)):
        if value < 1:
            raise ValueError(f"bench: --{name} must be >= 1, got {value}")
    if cfg.seed_start < 0:
        raise ValueError(f"bench: --seed-start must be >= 0, got {cfg.seed_start}")
    if not str(cfg.out).strip():
        raise ValueError("bench: --out must name a directory, got an empty string")


def _prepare(cfg: BenchConfig, log) -> list[tuple]:
    """Check every run's settings, write each unfinished run's bench.json, and return the runs still to
    make (the simulator's sub-second runs are made here, in this process, and none is returned)."""
    keys = [(m, p, s) for m in cfg.mixes for p in cfg.planners for s in seed_list(cfg)]
    named = {k.split(".")[1] for k in cfg.extra if k.startswith("planner_options.")} | set(
        cfg.extra["planner_options"] if isinstance(cfg.extra.get("planner_options"), dict) else ())
    have = {c for p in cfg.planners for c in p.split("+")}
    if named - have:
        raise ValueError(f"--set planner_options: {', '.join(sorted(named - have))} is in none of the bench's "
                         f"planners ({', '.join(cfg.planners)})")
    if cfg.engine != "sim":  # every run's settings are checked before the first one starts
        from ..run.config import load_config

        for k in keys[:: len(seed_list(cfg))]:
            load_config(None, run_settings(cfg, *k))
    todo = [k for k in keys if not check_reusable(cfg, k)]
    for k in todo:
        d = run_dir(cfg, *k)
        d.mkdir(parents=True, exist_ok=True)
        (d / "bench.json").write_text(json.dumps({"settings": run_settings(cfg, *k)}, indent=1))
    done_already = len(keys) - len(todo)
    if done_already:
        log(f"bench: {done_already} runs already finished, {len(todo)} to go")
    if cfg.engine == "sim":  # sub-second runs: in this process, one after the other
        from ..sim.bench import run_sim_bench

        for key in todo:
            run_sim_bench(cfg, *key, run_dir(cfg, *key), log=log)
        return []
    return todo


def trainer_warnings(log_path: Path, start: int = 0) -> list[str]:
    """The `warning:` lines a trainer wrote to its log from byte `start` on (each once, in order)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("warning:") and line not in out:
            out.append(line)
    return out


def finished_cpu_seconds(proc: subprocess.Popen) -> float | None:
    """None while the run's process lives; once it has ended, its CPU seconds (user + system, with the
    reward workers it waited for), read from the kernel as it is reaped: the core-seconds the run cost
    whatever else shared the machine (wall seconds grow with the load; Bench 3.0's envelope is in
    core-hours). Sets the process's returncode as poll() would."""
    if proc.returncode is not None:
        return 0.0
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return float(usage.ru_utime + usage.ru_stime)


def metrics_record(d: Path) -> dict:
    """What done.json records of a finished run's metrics.jsonl: its complete rows and the sha256 of its
    bytes, so a file cut or edited afterwards is caught before a status or a report reads it."""
    import hashlib

    path = Path(d) / "metrics.jsonl"
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return {"rows": len(read_rows(d)[0]), "metrics_sha256": digest}


def run_record_problem(d: Path) -> str | None:
    """Why a finished run's metrics no longer are what it recorded at its end (None: they are, or the run
    is legacy: finished before done.json held a digest, see is_legacy_run). Read by `bench status` and
    every report of finished runs."""
    try:
        done = json.loads((Path(d) / "done.json").read_text())
    except (OSError, ValueError) as e:
        return f"{Path(d) / 'done.json'}: unreadable ({e})"
    if not isinstance(done, dict) or "metrics_sha256" not in done:
        return None
    path = Path(d) / "metrics.jsonl"
    if not path.exists():
        return f"{path}: missing; the run recorded {done.get('rows')} rows when it finished"
    have = metrics_record(d)
    if have["metrics_sha256"] != done["metrics_sha256"]:
        return (f"{path}: changed since the run finished ({have['rows']} rows now, {done.get('rows')} recorded; "
                "sha256 differs)")
    return None


def is_legacy_run(d: Path) -> bool:
    """A finished run whose done.json predates digests: reportable, but its completeness is unchecked."""
    try:
        done = json.loads((Path(d) / "done.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(done, dict) and "metrics_sha256" not in done


def check_finished_runs(dirs: list[Path], what: str) -> list[str]:
    """Refuse (ValueError, one line) when a finished run's metrics changed since it finished; else the note
    lines to print (legacy runs counted and named as such)."""
    done = [Path(d) for d in dirs if (Path(d) / "done.json").exists()]
    bad = [p for p in map(run_record_problem, done) if p]
    if bad:
        raise ValueError(f"{what}: {len(bad)} finished run(s) no longer match their record, first {bad[0]}; "
                         "nothing was written (rerun them: remove their done.json, or restore the file)")
    legacy = sum(is_legacy_run(d) for d in done)
    return [f"note: {legacy} of {len(done)} finished runs predate recorded digests (legacy): their metrics are "
            "reported unchecked"] if legacy else []


def add_partial_cpu(d: Path, cpu: float) -> None:
    """Keep the CPU seconds of a stopped part of a run (cpu_partial.json), for its done.json to add up."""
    f = d / "cpu_partial.json"
    before = json.loads(f.read_text()).get("cpu_seconds", 0.0) if f.exists() else 0.0
    f.write_text(json.dumps({"cpu_seconds": before + cpu}))


def _run_processes(queue: list, jobs: int, running: list, env: dict, log) -> None:
    """Run the (bench config, run key) items of `queue`, `jobs` at a time."""
    failures = []
    starts: dict = {}
    last_progress = time.perf_counter()
    while queue or running:
        while queue and len(running) < jobs:
            cfg, key = queue.pop(0)
            d = run_dir(cfg, *key)
            d.mkdir(parents=True, exist_ok=True)
            logf = open(d / "train.log", "a")
            starts[d] = logf.tell()  # this run's part of the log begins here (a resumed bench appends)
            proc = subprocess.Popen(run_command(cfg, *key), stdout=logf, stderr=subprocess.STDOUT,
                                    env={**env, "ROLLWISE_PARENT_PID": str(os.getpid())})
            running.append((proc, cfg, key, time.perf_counter()))
        time.sleep(0.2)
        if time.perf_counter() - last_progress >= PROGRESS_EVERY_S:  # runs take minutes: say where they are
            last_progress = time.perf_counter()
            for line in filter(None, (progress_line(cfg, key) for _, cfg, key, _ in running)):
                log(line)
        for item in list(running):
            proc, cfg, key, t0 = item
            cpu = finished_cpu_seconds(proc)
            if cpu is None:
                continue
            running.remove(item)
            d = run_dir(cfg, *key)
            name = f"{key[0]}/{key[1]}/seed{key[2]}"
            warnings = trainer_warnings(d / "train.log", starts.pop(d, 0))
            for w in warnings[:3]:  # a run whose reward failed must not pass as a plain result
                log(f"bench: {name}: {w}")
            if len(warnings) > 3:
                log(f"bench: {name}: {len(warnings) - 3} more warnings in {d / 'train.log'}")
            if proc.returncode != 0:  # a failed part's CPU was spent too: a rerun adds it
                add_partial_cpu(d, cpu)
            if proc.returncode == 0:
                partial = d / "cpu_partial.json"  # stopped parts before this one (a resumed run)
                cpu += json.loads(partial.read_text())["cpu_seconds"] if partial.exists() else 0.0
                (d / "done.json").write_text(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": cpu,
                                                         "warnings": warnings, **metrics_record(d),
                                                         "environment": environment()}))
                log(f"bench: done {name} in {time.perf_counter() - t0:.0f}s")
            else:
                failures.append(d)
                log(f"bench: FAILED {name} (exit {proc.returncode}); see {d / 'train.log'}")
    if failures:
        raise BenchFailed(f"{len(failures)} bench runs failed: {', '.join(str(d) for d in failures)}; "
                          "see train.log in each")


def progress_line(cfg: BenchConfig, key: tuple) -> str | None:
    """Where a running run is, from its metrics so far: `bench: default/uniform/seed0 step 12 tokens
    14.2k/40k acc 0.51` (acc: its latest evaluation). None before its first row."""
    rows, _ = read_rows(run_dir(cfg, *key), live=True)  # the line being written is left out
    if not rows:
        return None
    accs = [r["eval_acc"] for r in rows if "eval_acc" in r]
    acc = f" acc {accs[-1]:.3f}" if accs else ""
    if cfg.budget_gpu_seconds and "model_gpu_s" in rows[-1]:  # a plan's run on modelled GPU-seconds
        return (f"bench: {Path(cfg.out).name}/seed{key[2]} step {rows[-1]['step']} GPU-s "
                f"{rows[-1]['model_gpu_s']:,.0f}/{cfg.budget_gpu_seconds:,.0f}{acc}")
    if cfg.budget_compute and "compute" in rows[-1]:  # a plan's run: its arm (the bench's dir) and its compute
        return (f"bench: {Path(cfg.out).name}/seed{key[2]} step {rows[-1]['step']} compute "
                f"{rows[-1]['compute'] / 1e3:.0f}k/{cfg.budget_compute / 1e3:g}k{acc}")
    return (f"bench: {key[0]}/{key[1]}/seed{key[2]} step {rows[-1]['step']} tokens "
            f"{rows[-1]['tokens'] / 1e3:.1f}k/{cfg.budget_tokens / 1e3:g}k{acc}")


def _ensure_base(cfg: BenchConfig, log) -> None:
    """Build the shared base checkpoint once, before the parallel runs race to build it: the one the
    first run resolves (its task, the task's warm-start defaults, any `--set warmstart...`)."""
    from ..core import registry
    from ..policy.warmstart import base_checkpoint
    from ..run.config import load_config

    run = load_config(None, run_settings(cfg, cfg.mixes[0], cfg.planners[0], 0))
    if run.model is None:
        base_checkpoint(registry.get("task", run.task).obj(**run.task_options), run.warmstart, log=log)
