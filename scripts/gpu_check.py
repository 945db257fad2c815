"""The one-GPU check (run by scripts/gpu_check.sh): what rollwise's GPU path does on this machine.

On a machine with one CUDA GPU (no network needed; nothing is downloaded), in this order, each result
appended to OUT/results.jsonl the moment it is measured (a kill keeps what was done):
  1. the CUDA tests (tests that skip without CUDA, `-k cuda`);
  2. `rollwise train --device cuda` on task 1 (the embedded arithmetic task), fp32 and bf16 (--quick: bf16);
  3. a randomly initialised ~0.5B Llama (Qwen2.5-0.5B's shape; no weights): the torch engine's decoded
     tokens/s beside the memory-bandwidth bound for decode (rows x measured copy bandwidth / weight bytes:
     every decode step reads every weight once), the learner's trained tokens/s (fp32 and bf16), and the
     measured prefill/decode/train cost ratios per token, beside gpu-h100-v1's published ratios (Bench
     3.0's profile, which stays the one its goal is read under; these are only recorded beside it).
Then one table (also OUT/table.txt). A time budget (230 s; --quick 110 s, before the model benchmark's
last minute) caps each command's timeout. Without CUDA it says so, runs step 3 on a small Llama on the CPU
(the same code path, so CI keeps it working) and exits 0.

    bash scripts/gpu_check.sh [--quick] [--out DIR]     # DIR default: benchmarks/results/gpu/<UTC time>
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from rollwise.core.types import Batch, Group, Prompt, Request  # noqa: E402
from rollwise.generate.engine import run_sync  # noqa: E402
from rollwise.generate.torch_engine import TorchEngine  # noqa: E402
from rollwise.learn.learner import Learner, LearnerConfig  # noqa: E402
from rollwise.policy.policy import Policy  # noqa: E402
from rollwise.policy.tokenizer import char_tokenizer  # noqa: E402

# Qwen2.5-0.5B's shape (494M parameters, tied embeddings); the CPU stand-in is small enough for CI
LLAMA_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
LLAMA_CPU = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
PROFILE = ROOT / "src" / "rollwise" / "assets" / "cost_profiles" / "gpu-h100-v1.yaml"


class Results:
    """Rows appended to OUT/results.jsonl as they come, and printed as one line each."""

    def __init__(self, out: Path):
        self.out, self.rows = out, []

    def add(self, check: str, value, unit: str = "", note: str = "") -> None:
        row = {"check": check, "value": value, "unit": unit, "note": note}
        self.rows.append(row)
        with open(self.out / "results.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"  {check}: {fmt(value)} {unit} {note}".rstrip(), flush=True)

    def table(self) -> str:
        w = max(len(r["check"]) for r in self.rows)
        lines = [f"{'check':<{w}}  {'value':>14}  unit / note", "-" * (w + 40)]
        for r in self.rows:
            lines.append(f"{r['check']:<{w}}  {fmt(r['value']):>14}  {' '.join(x for x in (r['unit'], r['note']) if x)}")
        return "\n".join(lines)


def fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(device, nbytes: int) -> float:
    """Bytes per second of a device-to-device copy (read + write counted), best of 5."""
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(5):
        sync(device)
        t = time.perf_counter()
        y.copy_(x)
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def llama_policy(shape: dict, device) -> Policy:
    """A randomly initialised Llama of `shape`, float32, built on `device`, over the char tokenizer (its ids
    beyond the tokenizer are never decoded to text: decode is replaced)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(**shape, max_position_embeddings=1024, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, bos_token_id=None)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).float().eval()
    pol = Policy(model, tok, "hf")
    pol.decode = lambda ids: ""  # random ids past the char vocabulary; the text is not needed here
    return pol


def model_bench(res: Results, device: str, shape: dict, rows: int, new_tokens: int, label: str) -> None:
    """Engine tokens/s with its bandwidth bound, learner tokens/s (fp32, bf16) and the cost ratios."""
    pol = llama_policy(shape, device)
    n_params = sum(p.numel() for p in pol.model.parameters())
    res.add(f"{label}: parameters", n_params / 1e6, "M", f"float32 weights on {device}")
    prompts = [Prompt(i, f"{i % 97}+{(7 * i) % 89}=" * 4, "") for i in range(rows)]

    def sample():
        engine = TorchEngine(pol, temperature=1.0, max_new_tokens=new_tokens, seed=0)
        reqs = [Request(p, 1, id=i) for i, p in enumerate(prompts)]
        sync(device)
        t = time.perf_counter()
        groups = [e.group.rollouts for e in run_sync(engine, reqs)]
        sync(device)
        return groups, time.perf_counter() - t

    sample()  # warm-up (kernels, allocator)
    groups, t_gen = sample()
    decoded = sum(r.num_tokens for g in groups for r in g)
    res.add(f"{label}: engine decode", decoded / t_gen, "tokens/s",
            f"{rows} rows x {new_tokens} new tokens, fp32, prompt prefill included")
    bw = copy_bandwidth(device, 1 << 30 if torch.device(device).type == "cuda" else 1 << 26)
    bound = rows * bw / (4 * n_params)
    res.add(f"{label}: decode bandwidth bound", bound, "tokens/s",
            f"{rows} rows x {bw / 1e9:.0f} GB/s copy / {4 * n_params / 1e9:.3g} GB fp32 weights "
            f"(engine at {100 * decoded / t_gen / bound:.0f}%)")

    rollouts = [r for g in groups for r in g]
    seq_tokens = sum(len(r.prompt_ids) + r.num_tokens for r in rollouts)
    with torch.no_grad():  # prefill: one no-grad forward over prompt + response (the verify/log-prob pass)
        sync(device)
        t = time.perf_counter()
        for s in range(0, len(rollouts), 16):
            part = rollouts[s: s + 16]
            pol.response_logprobs([r.prompt_ids for r in part], [r.token_ids_T.tolist() for r in part])
        sync(device)
        t_prefill = time.perf_counter() - t
    batch_groups = []
    for k in range(0, len(rollouts), 4):  # groups of 4 with rewards 0,1,0,1: every row learns
        g = rollouts[k: k + 4]
        for i, r in enumerate(g):
            r.reward, r.correct = float(i % 2), bool(i % 2)
        batch_groups.append(Group(Prompt(g[0].prompt_id, "", ""), g))
    batch = Batch(batch_groups, step=0)
    decode_s = t_gen / decoded
    res.add(f"{label}: prefill/decode cost", (t_prefill / seq_tokens) / decode_s, "decode tokens",
            f"per token; gpu-h100-v1 (8B, vLLM): {published('prefill')}")
    for precision in ("fp32", "bf16"):
        learner = Learner(pol, LearnerConfig(precision=precision, minibatches=1, micro_batch_rows=16,
                                             recompute_old=False), seed=0)
        learner.update(batch)  # warm-up
        sync(device)
        t = time.perf_counter()
        stats = learner.update(batch)
        sync(device)
        t_train = time.perf_counter() - t
        res.add(f"{label}: learner {precision}", stats["learner_tokens"] / t_train, "tokens/s",
                "forward + backward + AdamW, prompt + response tokens")
        res.add(f"{label}: train/decode cost {precision}", (t_train / stats["learner_tokens"]) / decode_s,
                "decode tokens", f"per token; gpu-h100-v1: {published('learner')}")
        del learner
    if torch.device(device).type == "cuda":
        res.add(f"{label}: peak GPU memory", torch.cuda.max_memory_allocated() / 2 ** 30, "GiB")
        del pol
        torch.cuda.empty_cache()


def published(kind: str) -> str:
    """gpu-h100-v1's ratio for `kind` (Bench 3.0's profile), or n/a where this tree does not ship it."""
    if not PROFILE.exists():
        return "n/a (no profile file in this tree)"
    import yaml

    return str(yaml.safe_load(PROFILE.read_text())["ratios"][kind]["value"])


def run_cmd(res: Results, check: str, cmd: list[str], timeout: int, out: Path) -> subprocess.CompletedProcess | None:
    """Run `cmd` (stdout and stderr to OUT/<check>.log); a result row says pass/fail and how long it took."""
    log = out / (check.replace(" ", "_").replace("/", "_") + ".log")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        res.add(check, "timeout", "", f"after {timeout} s; see {log.name}")
        return None
    log.write_text(p.stdout + p.stderr)
    tail = (p.stdout.strip().splitlines() or [""])[-1][:80]
    res.add(check, "pass" if p.returncode == 0 else f"FAIL rc={p.returncode}", "",
            f"{time.perf_counter() - t:.0f} s; {tail}")
    return p


def train_run(res: Results, out: Path, precision: str, steps: int, timeout: int) -> None:
    run_dir = out / f"train-task1-{precision}"
    p = run_cmd(res, f"train task1 cuda {precision}",
                [sys.executable, "-m", "rollwise.cli", "train", "--device", "cuda", "--steps", str(steps),
                 "--out", str(run_dir), "--set", f"learner.precision={precision}"], timeout, out)
    metrics = run_dir / "metrics.jsonl"
    if p is not None and p.returncode == 0 and metrics.exists():
        last = json.loads(metrics.read_text().splitlines()[-1])
        res.add(f"train task1 cuda {precision}: last step", last.get("wall_s", float("nan")), "s",
                f"loss {last.get('loss')}, reward {last.get('reward_mean')}, held-out {last.get('eval_acc')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and rows (under 2 minutes on a GPU)")
    ap.add_argument("--out", help="results folder (default benchmarks/results/gpu/<UTC time>)")
    args = ap.parse_args(argv)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / "gpu" / stamp
    if out.exists() and any(out.iterdir()):
        print(f"gpu_check: --out {out}: exists and is not empty (results are never overwritten)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    res = Results(out)
    import transformers

    cuda = torch.cuda.is_available()
    res.add("environment", "cuda" if cuda else "cpu", "",
            f"torch {torch.__version__}, transformers {transformers.__version__}, python {sys.version.split()[0]}"
            + (f", {torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).total_memory / 2 ** 30:.0f} GiB"
               if cuda else ""))
    started = time.perf_counter()
    if not cuda:
        print("gpu_check: no GPU found (torch.cuda.is_available() is False): running the CPU-able checks only",
              flush=True)
        model_bench(res, "cpu", LLAMA_CPU, rows=8, new_tokens=8, label="small llama cpu")
    else:
        # a time budget (under 4 minutes; --quick under 2): each command's timeout leaves the model benchmark
        # (in this process, ~1 minute) its share; a command that runs out is recorded as a timeout
        deadline = started + (110 if args.quick else 230)
        left = lambda nominal: max(5, min(nominal, int(deadline - time.perf_counter() - 50)))  # noqa: E731
        run_cmd(res, "cuda tests", [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                    "tests/test_device.py", "tests/test_learner_gpu_options.py", "tests/test_lora.py",
                                    "-k", "cuda"],
                left(40 if args.quick else 70), out)
        for precision in (("bf16",) if args.quick else ("fp32", "bf16")):
            train_run(res, out, precision, steps=2 if args.quick else 4, timeout=left(50))
        rows, new = (32, 64) if args.quick else (64, 128)
        try:
            model_bench(res, "cuda", LLAMA_05B, rows=rows, new_tokens=new, label="llama 0.5B cuda")
        except Exception as e:  # noqa: BLE001 (recorded, and the table still printed)
            res.add("llama 0.5B cuda", "ERROR", "", f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
    res.add("total", time.perf_counter() - started, "s")
    table = res.table()
    (out / "table.txt").write_text(table + "\n")
    print("\n" + table + f"\n\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
