"""Prefill/decode cost ratio of the torch engine: what one draft token verified by a prefill costs, in
decoded tokens. SPEC-RL (replay/spec_rl.py) verifies a cached draft in one forward pass over prompt +
draft; decoding makes the same tokens one step at a time with a KV cache. The ratio

    (prefill seconds per draft token) / (decode seconds per token)

on the same rows and lengths is spec-rl's default `draft_cost`: the weight of draft-verified tokens in
the budget (core/ledger.py). Results go to benchmarks/results/prefill_decode_ratio.json.

    OMP_NUM_THREADS=1 python benchmarks/prefill_decode_ratio.py [--rows 256] [--lengths 10 40] [--repeats 7]

Model: the embedded default's architecture (TinyGPT, 4 layers, 4 heads, width 128, context 64) over
rollwise's character tokenizer, randomly initialised (seed 0): the cost depends on shapes, not weights.
EOS is never produced (its id is set out of the vocabulary), so every row decodes exactly L tokens.
Rows: `--rows` copies of arithmetic prompts (the default run decodes 32 prompts x 8 samples = 256 rows).

Per token, with the prompt's own prefill subtracted out:
  decode  = (t_engine(L) - t_engine(1)) / (rows * (L - 1)), t_engine(k) = TorchEngine sampling k tokens
            per row (the prompt prefill, sampling, log-probs, Rollout objects)
  prefill = (t_verify(L) - t_verify(1)) / (rows * (L - 1)), t_verify(k) = the step driver's verification
            pass (Policy.response_logprobs, no grad) over prompt + a k-token draft per row
Each time is the minimum over `--repeats` interleaved runs, after one unrecorded warm-up: the machine
is shared (load ~5 on 2 cores) and the least-disturbed run is the best estimate of the cost itself. The default
`draft_cost` is the ratio at L = the default run's max_new_tokens (10); longer L is reported beside it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from rollwise.core.types import Prompt, Request, SamplingParams  # noqa: E402
from rollwise.generate.engine import run_sync  # noqa: E402
from rollwise.generate.torch_engine import TorchEngine  # noqa: E402
from rollwise.policy.policy import Policy  # noqa: E402
from rollwise.policy.tiny import TinyConfig, TinyGPT  # noqa: E402
from rollwise.policy.tokenizer import char_tokenizer  # noqa: E402

PROMPTS = ["12+345=", "9081-77=", "5+5=", "31415+9265=", "100-1=", "271+828=", "42-17=", "606+60="]


def build_policy() -> Policy:
    torch.manual_seed(0)
    tok = char_tokenizer()
    pol = Policy(TinyGPT(TinyConfig(vocab_size=len(tok))), tok, "tiny")
    pol.model.eval()
    pol.eos_id = -1  # never sampled: every row decodes its full length
    return pol


def time_decode(pol: Policy, rows: int, k: int) -> float:
    eng = TorchEngine(pol, max_new_tokens=k, seed=0, max_rows=rows)
    reqs = [Request(Prompt(i, PROMPTS[i % len(PROMPTS)], ""), 1, sampling=SamplingParams(max_tokens=k), id=i)
            for i in range(rows)]
    t = time.perf_counter()
    out = run_sync(eng, reqs)
    dt_s = time.perf_counter() - t
    assert all(e.group.rollouts[0].num_tokens == k for e in out)
    return dt_s


def time_verify(pol: Policy, rows: int, k: int) -> float:
    prompt_ids = [pol.encode(PROMPTS[i % len(PROMPTS)]) for i in range(rows)]
    drafts = [[(7 * i + j) % 40 + 3 for j in range(k)] for i in range(rows)]
    t = time.perf_counter()
    with torch.no_grad():
        pol.response_logprobs(prompt_ids, drafts, [1.0] * rows)
    return time.perf_counter() - t


def measure(pol: Policy, rows: int, L: int, repeats: int) -> dict:
    runs = {"decode_L": [], "decode_1": [], "verify_L": [], "verify_1": []}
    time_decode(pol, rows, L), time_verify(pol, rows, L)  # warm-up, unrecorded
    for _ in range(repeats):  # interleaved, so a swing in the machine's load hits all four alike
        runs["decode_L"].append(time_decode(pol, rows, L))
        runs["verify_L"].append(time_verify(pol, rows, L))
        runs["decode_1"].append(time_decode(pol, rows, 1))
        runs["verify_1"].append(time_verify(pol, rows, 1))
    med = {k: min(v) for k, v in runs.items()}
    decode = (med["decode_L"] - med["decode_1"]) / (rows * (L - 1))
    prefill = (med["verify_L"] - med["verify_1"]) / (rows * (L - 1))
    return {"L": L, "rows": rows, "decode_us_per_token": round(decode * 1e6, 3),
            "prefill_us_per_token": round(prefill * 1e6, 3), "ratio": round(prefill / decode, 4),
            "min_s": {k: round(v, 5) for k, v in med.items()},
            "runs_s": {k: [round(x, 5) for x in v] for k, v in runs.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--lengths", type=int, nargs="+", default=[10, 40])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(HERE / "results" / "prefill_decode_ratio.json"))
    args = ap.parse_args(argv)
    if any(L < 2 or L + 12 > 64 for L in args.lengths):
        raise SystemExit("--lengths: each L must be in [2, 52] (prompt + draft within the 64-token context)")
    torch.set_num_threads(1)
    pol = build_policy()
    results = [measure(pol, args.rows, L, args.repeats) for L in args.lengths]
    report = {
        "benchmark": "prefill_decode_ratio",
        "command": "OMP_NUM_THREADS=1 python benchmarks/prefill_decode_ratio.py " + " ".join(argv or sys.argv[1:]),
        "draft_cost": results[0]["ratio"],
        "draft_cost_from": f"L = {results[0]['L']}, rows = {args.rows}",
        "machine": {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "load_avg_at_end": list(os.getloadavg())},
        "model": "TinyGPT 4 layers, 4 heads, n_embd 128, block 64 (the embedded default's shape), random init seed 0",
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for r in results:
        print(f"L={r['L']:>3} rows={r['rows']}: decode {r['decode_us_per_token']:.2f} us/token, "
              f"prefill {r['prefill_us_per_token']:.2f} us/token, ratio {r['ratio']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
