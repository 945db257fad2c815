"""Measure this machine as a cluster profile (issue 41 item 2: "a CPU profile of this machine measured by a
command in the repo"): one core plays one GPU, the testbed's base model (rollwise's TinyGPT, 4 layers x 128,
as assets/bases/remainder) plays the policy, one torch thread as the benches run.

    OMP_NUM_THREADS=1 python benchmarks/cpu_profile.py [--out src/rollwise/assets/cluster_profiles/cpu-2core-testbed-v1.yaml]

Every value is measured here by a micro-benchmark of its own, never fitted to a step time or a speedup (the
profile is validated against the measured steps of the lossless plans by benchmarks/validate_cpu.py):
  peak_flops        a 512 x 512 float32 matmul, FLOP/s of one thread
  mem_bw            a 64 MiB tensor copied, bytes read + written per second
  mfu_prefill       the model's forward over 64 prompts x 32 tokens: 2 N FLOPs per token over peak
  mfu_decode        the marginal cost of a decode row: one decode iteration at 256 rows minus at 1 row, per
                    row, as 2 N FLOPs per row over peak (attention and the Python around the kernels included)
  iter_overhead_s   one decode iteration at 1 row (the fixed cost: Python and kernel launches)
  mfu_train         forward + backward over 256 rows x 96 tokens: 6 N FLOPs per token over peak
  weight_sync_s     the policy's state_dict copied once (what an in-process weight update costs)
Model shape: N from the model, weights as float32 (4 bytes per parameter), KV bytes per token = layers x 2 x
width x 4. gen_len_mean: the testbed's mean response under tuned GRPO at its first step (lossless_explore_3).
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch
import yaml

from rollwise.policy.tiny import TinyConfig, TinyGPT

OUT = Path(__file__).resolve().parents[1] / "src/rollwise/assets/cluster_profiles/cpu-2core-testbed-v1.yaml"


def best_of(fn, repeats: int = 7) -> float:
    """The fastest of `repeats` timings of fn() (after one warm-up): the machine's cost, not its neighbours'."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure() -> dict:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    peak = 2 * 512 ** 3 / best_of(lambda: torch.mm(a, b))
    x = torch.empty(16 * 2 ** 20)  # 64 MiB of float32
    y = torch.empty_like(x)
    bw = 2 * x.numel() * 4 / best_of(lambda: y.copy_(x))

    cfg = TinyConfig(vocab_size=50, n_layer=4, n_head=4, n_embd=128, block_size=256)  # assets/bases/remainder
    model = TinyGPT(cfg).eval()
    N = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        prompts = torch.randint(0, 50, (64, 32))
        prefill = best_of(lambda: model(prompts))
        mfu_prefill = 2 * N * prompts.numel() / prefill / peak

        def decode_s(rows: int) -> float:
            _, cache = model(torch.randint(0, 50, (rows, 48)))
            step = torch.randint(0, 50, (rows, 1))
            return best_of(lambda: model(step, cache=cache))

        one, many = decode_s(1), decode_s(256)
    mfu_decode = 2 * N / ((many - one) / 255) / peak
    model.train()
    batch = torch.randint(0, 50, (256, 96))

    def train_step():
        logits, _ = model(batch)
        logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)

    mfu_train = 6 * N * batch.numel() / best_of(train_step, repeats=3) / peak
    state = model.state_dict()
    sync = best_of(lambda: {k: v.clone() for k, v in state.items()})
    return {"params": N, "peak": peak, "bw": bw, "mfu_prefill": mfu_prefill, "mfu_decode": mfu_decode,
            "iter_overhead_s": one, "mfu_train": mfu_train, "weight_sync_s": sync,
            "kv": cfg.n_layer * 2 * cfg.n_embd * 4}


def profile_yaml(m: dict) -> str:
    machine = f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread"
    src = f"measured by benchmarks/cpu_profile.py ({machine})"
    values = {
        "gpus": {"value": 2, "source": "this machine's 2 cores, one core per 'GPU' (one torch thread each)"},
        "gen_gpus": {"value": 1, "source": "one-step-off/async with workers: 0: the rollout thread on one core, "
                                           "the learner on the other"},
        "tp": {"value": 1, "source": "one engine per core"},
        "peak_flops": {"value": float(f"{m['peak']:.4g}"), "source": f"{src}: a 512x512 float32 matmul"},
        "mem_bw": {"value": float(f"{m['bw']:.4g}"), "source": f"{src}: a 64 MiB copy, read + write"},
        "params": {"value": m["params"], "source": "the testbed base's TinyGPT (4 layers x 128, vocabulary 50)"},
        "weight_bytes": {"value": m["params"] * 4, "source": "float32: 4 bytes per parameter"},
        "kv_bytes_per_token": {"value": m["kv"], "source": "4 layers x 2 (K, V) x 128 x 4 bytes"},
        "mfu_decode": {"value": float(f"{m['mfu_decode']:.4g}"),
                       "source": f"{src}: (iteration at 256 rows - at 1 row) / 255 per row, 2N FLOPs per row"},
        "mfu_prefill": {"value": float(f"{m['mfu_prefill']:.4g}"), "source": f"{src}: forward of 64 x 32 tokens"},
        "mfu_train": {"value": float(f"{m['mfu_train']:.4g}"), "source": f"{src}: forward + backward of 256 x 96"},
        "iter_overhead_s": {"value": float(f"{m['iter_overhead_s']:.4g}"), "source": f"{src}: one decode iteration at 1 row"},
        "concurrency": {"value": 1024, "source": "the torch engine's max_rows (rows decoded at once)"},
        "weight_sync_s": {"value": float(f"{m['weight_sync_s']:.4g}"), "source": f"{src}: the state_dict copied once"},
        "gen_len_mean": {"value": 55, "assumption": True,
                         "source": "the testbed's mean response under tuned GRPO at its first step (~55 tokens, "
                                   "lossless_explore_2's rows); only scaling reads it"},
    }
    head = ("# This machine as a cluster profile: one core per 'GPU', the testbed's base model as the policy, one\n"
            "# torch thread per core as the benches run. Every value measured by benchmarks/cpu_profile.py (its\n"
            "# docstring says how); rerun it to re-measure, and a re-measured profile is -v2, never an edit.\n")
    return head + yaml.safe_dump({"name": "cpu-2core-testbed-v1", "version": 1, "values": values}, sort_keys=False,
                                 width=120)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    m = measure()
    args.out.write_text(profile_yaml(m))
    print(f"wrote {args.out}: " + ", ".join(f"{k} {v:.4g}" for k, v in m.items()))


if __name__ == "__main__":
    main()
