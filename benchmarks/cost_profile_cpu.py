"""Measure a CPU cost profile for compute units (bench/costs.py) on this machine, and validate it by
predicting the seconds per step of a real training run.

    OMP_NUM_THREADS=1 python benchmarks/cost_profile_cpu.py [--name cpu-epyc-v1] [--repeats 5] [--steps 10]

One torch thread, the embedded default's model shape (TinyGPT 4 layers, width 128, context 64), random
weights (cost depends on shapes), `--rows` rows of arithmetic prompts, L generated tokens per row (the
default run's 256 rows x max_new_tokens 10). Per token, each cost is the marginal one, (t(L) - t(1)) /
(rows x (L - 1)), so a call's fixed cost and the prompt's own share drop out; each time is the minimum
over `--repeats` interleaved runs (a shared machine: the least-disturbed run estimates the cost itself):
  decode   TorchEngine sampling L tokens per row (KV cache, sampling, log-probs)
  prefill  a no-grad forward over prompt + L tokens (Policy.response_logprobs): what a prompt, prefix or
           draft prefill costs; also the old/reference log-prob pass and prompt scoring, the same call
  learner  the same forward with grad, plus backward of the summed log-probs
The auxiliary head (ARRoL: a linear map of the hidden state the decode already has) is priced by FLOPs,
2d / 2N. The profile is written to src/rollwise/assets/cost_profiles/NAME.yaml with
`seconds_per_unit` = measured decode seconds per token.

Validation: a `--steps`-step GRPO run of the embedded default (arithmetic, eval off, one thread). Its
ledger gives every count compute_units needs (decode, prompt, learner tokens); predicted seconds =
units x seconds_per_unit, against the ledger's measured training seconds (`wall_s`, eval excluded).
Per-step costs that are not per token (the optimizer step, reward checks, the planner, Python) are not
in the profile, so the prediction reads low by about their share; the error is recorded in the profile.
`--compare RUN_DIR` (default: the recorded bench2 GRPO seed-0 run) also predicts a recorded run's seconds
per step. Rows recorded before `prompt_tokens` and `learner_tokens` were in metrics lack them: those
counts are then estimated as the validation run's per decoded token (same task and config), and the
report says so. Results also go to benchmarks/results/cost_profile_cpu.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from rollwise.run.records import rows as metrics_rows

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))
from archive import ensure_unpacked  # noqa: E402  (the recorded run is in bench2's archive)

from prefill_decode_ratio import PROMPTS, build_policy, time_decode, time_verify  # noqa: E402

from rollwise.bench.costs import PROFILE_DIR, compute_units, counts_from_row, load_profile  # noqa: E402


def time_learner(pol, rows: int, k: int) -> float:
    """Forward with grad over prompt + k tokens per row, and backward of the summed log-probs."""
    prompt_ids = [pol.encode(PROMPTS[i % len(PROMPTS)]) for i in range(rows)]
    resp = [[(7 * i + j) % 40 + 3 for j in range(k)] for i in range(rows)]
    pol.model.zero_grad(set_to_none=True)
    t = time.perf_counter()
    logp_NT, _, mask_NT = pol.response_logprobs(prompt_ids, resp, [1.0] * rows)
    (logp_NT * mask_NT).sum().backward()
    return time.perf_counter() - t


def measure(pol, rows: int, L: int, repeats: int) -> dict:
    fns = {"decode": time_decode, "prefill": time_verify, "learner": time_learner}
    runs = {f"{n}_{k}": [] for n in fns for k in ("L", "1")}
    for fn in fns.values():  # warm-up, unrecorded
        fn(pol, rows, L)
    for _ in range(repeats):  # interleaved, so a swing in the machine's load hits all alike
        for n, fn in fns.items():
            runs[f"{n}_L"].append(fn(pol, rows, L))
            runs[f"{n}_1"].append(fn(pol, rows, 1))
    best = {k: min(v) for k, v in runs.items()}
    per_token = {n: (best[f"{n}_L"] - best[f"{n}_1"]) / (rows * (L - 1)) for n in fns}
    return {"per_token_s": per_token, "min_s": best, "runs_s": runs}


def validate(steps: int, profile_path: Path) -> dict:
    """Predict a short real run's training seconds from its ledger counts and the profile."""
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, {"out": tmp, "steps": steps, "eval_every": 0, "eval_every_tokens": 0,
                                 "checkpoint_every": 1000, "seed": 0})
        trainer = Trainer(cfg, log=lambda *a, **k: None)
        rows = trainer.run()
        config = json.loads((Path(tmp) / "config.json").read_text())
        led = trainer.ledger
    last = {**rows[-1], "prompt_tokens": led.prompt_tokens, "learner_tokens": led.learner_tokens}
    counts, missing = counts_from_row(last, config)
    profile = load_profile(str(profile_path))
    units = compute_units(counts, profile)
    predicted = units * profile.seconds_per_unit
    measured = float(rows[-1]["wall_s"])
    return {"steps": steps, "counts": counts, "missing": missing, "units": units,
            "rollouts": rows[-1]["rollouts"],
            "predicted_s_per_step": predicted / steps, "measured_s_per_step": measured / steps,
            "error": predicted / measured - 1}


def compare(run_dir: Path, profile_path: Path, validation: dict) -> dict:
    """Predict a recorded run's training seconds per step (its last row's cumulative counts)."""
    rows = metrics_rows(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    counts, missing = counts_from_row(rows[-1], config)
    per_decode = {k: validation["counts"][k] / validation["counts"]["decode_tokens"] for k in counts}
    for name in missing:  # prompt_tokens -> prefill_tokens; learner_tokens -> learner and logprob
        for key in {"prompt_tokens": ["prefill_tokens"], "learner_tokens": ["learner_tokens", "logprob_tokens"]}[name]:
            counts[key] = per_decode[key] * counts["decode_tokens"]
    units = compute_units(counts, load_profile(str(profile_path)))
    steps = rows[-1]["step"]
    predicted = units * load_profile(str(profile_path)).seconds_per_unit / steps
    measured = rows[-1]["wall_s"] / steps
    return {"run": str(run_dir), "steps": steps, "estimated_from_validation": missing, "counts": counts,
            "predicted_s_per_step": predicted, "measured_s_per_step": measured, "error": predicted / measured - 1}


def write_profile(path: Path, name: str, m: dict, machine: dict, rows: int, L: int) -> None:
    import yaml

    pt = m["per_token_s"]
    n_params = sum(p.numel() for p in build_policy().model.parameters())
    aux = 2 * 128 / (2 * n_params)
    doc = {
        "name": name, "version": 1,
        "description": f"measured on this machine ({machine['cpu']}, one torch thread) by "
                       f"benchmarks/cost_profile_cpu.py: the tiny model, {rows} rows x {L} tokens",
        "seconds_per_unit": pt["decode"],
        "derivation": "marginal seconds per token of each kind of work, (t(L) - t(1)) / (rows x (L - 1)), "
                      "minimum over interleaved repeats, divided by decode's; see the script's docstring",
        "machine": machine,
        "ratios": {
            "decode": {"value": 1.0, "source": f"TorchEngine decode, {pt['decode'] * 1e6:.2f} us/token measured"},
            "prefill": {"value": round(pt["prefill"] / pt["decode"], 4),
                        "source": f"no-grad forward (Policy.response_logprobs), {pt['prefill'] * 1e6:.2f} us/token"},
            "learner": {"value": round(pt["learner"] / pt["decode"], 4),
                        "source": f"forward with grad + backward, {pt['learner'] * 1e6:.2f} us/token"},
            "logprob": {"value": round(pt["prefill"] / pt["decode"], 4),
                        "source": "the same no-grad forward as prefill (old/reference log-probs)"},
            "scoring": {"value": round(pt["prefill"] / pt["decode"], 4),
                        "source": "a prefill-only forward over the prompt (HIVE, DOTS): priced as prefill"},
            "aux_head": {"value": float(f"{aux:.3g}"),
                         "source": f"a linear head on the hidden state: 2d / 2N FLOPs (d 128, N {n_params:,})"},
        },
    }
    path.write_text("# Measured; do not edit by hand: rerun benchmarks/cost_profile_cpu.py with a new --name\n"
                    + yaml.safe_dump(doc, sort_keys=False, width=110))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="cpu-epyc-v1", help="the profile's name (cpu-<machine>-v<version>)")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--length", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps of the validation run (0: no validation)")
    ap.add_argument("--compare", default=str(HERE / "results" / "bench2" / "runs" / "default" / "uniform" / "seed0"),
                    help="a recorded run directory whose seconds per step to predict ('' for none)")
    ap.add_argument("--out", default=str(HERE / "results" / "cost_profile_cpu.json"))
    args = ap.parse_args(argv)
    path = PROFILE_DIR / f"{args.name}.yaml"
    if path.exists():
        raise SystemExit(f"{path} exists: a profile version is never overwritten; choose a new --name")
    torch.set_num_threads(1)
    machine = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "cpu": _cpu_name(), "torch": str(torch.__version__), "python": platform.python_version(),
               "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}
    m = measure(build_policy(), args.rows, args.length, args.repeats)
    write_profile(path, args.name, m, machine, args.rows, args.length)
    report = {"benchmark": "cost_profile_cpu", "profile": str(path.relative_to(HERE.parent)),
              "command": "OMP_NUM_THREADS=1 python benchmarks/cost_profile_cpu.py " + " ".join(argv or sys.argv[1:]),
              "machine": machine, "per_token_us": {k: v * 1e6 for k, v in m["per_token_s"].items()},
              "min_s": m["min_s"]}
    if args.steps:
        report["validation"] = validate(args.steps, path)
        v = report["validation"]
        if args.compare:
            report["compare"] = compare(ensure_unpacked(Path(args.compare)), path, v)
        path.write_text(path.read_text() + yaml_validation(v, report.get("compare")))
    report["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.name}: decode {report['per_token_us']['decode']:.2f} us/token, prefill "
          f"{report['per_token_us']['prefill']:.2f}, learner {report['per_token_us']['learner']:.2f}; wrote {path}")
    if args.steps:
        print(f"validation: predicted {v['predicted_s_per_step']:.3f} s/step, measured {v['measured_s_per_step']:.3f} "
              f"s/step, error {v['error']:+.1%}")
    if report.get("compare"):
        c = report["compare"]
        print(f"recorded run {c['run']}: predicted {c['predicted_s_per_step']:.3f} s/step, measured "
              f"{c['measured_s_per_step']:.3f} s/step, error {c['error']:+.1%} (estimated from the validation run: "
              f"{', '.join(c['estimated_from_validation']) or 'nothing'})")
    return 0


def yaml_validation(v: dict, c: dict | None) -> str:
    import yaml

    out = {"validation": {
        "run": f"{v['steps']} GRPO steps of the embedded default (arithmetic, eval off, one thread)",
        "predicted_s_per_step": round(v["predicted_s_per_step"], 4),
        "measured_s_per_step": round(v["measured_s_per_step"], 4),
        "error": round(v["error"], 4),
        # what `rollwise bench --plan --dry-run` estimates a GRPO run's seconds from
        "measured_s_per_decode_token": round(v["measured_s_per_step"] * v["steps"] / v["counts"]["decode_tokens"], 7),
        "decode_tokens_per_rollout": round(v["counts"]["decode_tokens"] / v["rollouts"], 3)}}
    if c:
        out["validation_recorded_run"] = {
            "run": str(Path(c["run"]).relative_to(HERE.parent)) if Path(c["run"]).is_relative_to(HERE.parent) else c["run"],
            "counts_estimated_from_validation_run": c["estimated_from_validation"],
            "predicted_s_per_step": round(c["predicted_s_per_step"], 4),
            "measured_s_per_step": round(c["measured_s_per_step"], 4), "error": round(c["error"], 4)}
    return yaml.safe_dump(out, sort_keys=False)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
