"""Generated tokens/s of rollwise's TorchEngine against `transformers`' `model.generate` on the same
weights, on an equal-length mix and a long-tail length mix. Results go to
benchmarks/results/engine_bench.json and .md.

    python benchmarks/engine_bench.py [--prompts 32] [--n 8] [--max-new 256] [--max-new-equal 128]
                                      [--mean-len 30] [--repeats 3] [--threads 1]

Model: a randomly initialised `transformers` LlamaForCausalLM of the embedded model's width (hidden 128,
4 layers, 4 heads, intermediate 512) over rollwise's character tokenizer, saved to a temp dir and loaded
back with `Policy.load` (kind "hf"); both engines then run that one `Policy.model` object. Extra rows run
rollwise's engine on its own TinyGPT of the same width (kind "tiny"); `generate` does not apply there.

Lengths are set by a bias on the EOS logit (the LM head is swapped for an identical Linear with a bias,
zero except at EOS), so every step stops with about the same probability q:
  equal     -- EOS bias -1e9: EOS is never sampled and every row runs to max_new_tokens (128 by
               default, to keep the whole benchmark within a few minutes);
  long_tail -- q = 1 / mean_len: lengths are roughly geometric (mean ~mean_len, a tail up to max_new).
Both engines sample at temperature 1, top_p 1 (generate: do_sample=True, top_k=0), so they draw from
the same length distribution; tokens/s counts the tokens each actually generated (up to and including
EOS). rollwise's time includes its prompt encoding, per-token log-probs/entropies, decoding and Rollout
objects; generate's includes tokenization and sampling only (so the comparison is conservative).

The machine is shared and its load swings, so the runs are interleaved in one process (order alternated
per repeat: A B / B A) and the ratio is given both as median(rollwise)/median(generate) and as the median
of the per-repeat paired ratios. A fixed-size matmul is timed before each repeat as a load probe. Each
engine first runs once at full size, unrecorded (the first full-size run in a process is ~2x slower,
whichever engine it is). torch runs 1 thread by default: with 2 threads on this 2-core machine, shared
with other jobs, OpenMP threads wait on each other and identical runs took anywhere from 15 s to 72 s;
with 1 thread they agree within ~20%.
No network and no downloads: everything is built locally.

`--task NAME` (e.g. `--task chain`, the long-response task) runs the same comparison on that task's
real prompts (its train pool), with its max_new_tokens and, for the long-tail mix, a mean length equal
to the one its base checkpoint produces on those prompts at temperature 1 (measured in the warm-up).
It adds a row `rollwise_base`: the TorchEngine on the task's base itself, whose lengths are the task's
real length mix (a tail of wrong answers cut at max_new_tokens included). Results then go to
benchmarks/results/engine_bench_NAME.json and .md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

HIDDEN, LAYERS, HEADS, INTER = 128, 4, 4, 512


def load_probe_ms() -> float:
    """Median ms of a fixed 256x128 @ 128x512 matmul: a crude gauge of how loaded the machine is."""
    x, w = torch.randn(256, HIDDEN), torch.randn(INTER, HIDDEN)
    ts = []
    for _ in range(15):
        t = time.perf_counter()
        x @ w.T
        ts.append(time.perf_counter() - t)
    return round(statistics.median(ts) * 1e3, 3)


def biased_head(old: torch.nn.Linear) -> torch.nn.Linear:
    """An identical LM head with a bias vector (all zero), so the EOS logit can be shifted."""
    new = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        new.weight.copy_(old.weight)
        new.bias.zero_()
    return new


def eos_bias(q: float, vocab: int) -> float:
    """Bias making P(EOS) ~= q when the other logits are ~0 (true enough at random init)."""
    return -1e9 if q <= 0 else math.log(q * (vocab - 1) / (1 - q))


def build_hf_policy(tmp: Path, max_pos: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    from rollwise.policy.policy import Policy
    from rollwise.policy.tokenizer import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=INTER,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                      max_position_embeddings=max_pos, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, bos_token_id=None, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    pol = Policy.load(tmp)
    assert pol.kind == "hf", pol.kind
    pol.model.eval()
    pol.model.lm_head = biased_head(pol.model.lm_head)
    pol.tokenizer.padding_side = "left"
    return pol


def build_tiny_policy(max_pos: int, seed: int):
    from rollwise.policy.policy import Policy
    from rollwise.policy.tiny import TinyConfig, TinyGPT
    from rollwise.policy.tokenizer import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(seed)
    pol = Policy(TinyGPT(TinyConfig(vocab_size=len(tok), n_layer=LAYERS, n_head=HEADS, n_embd=HIDDEN,
                                    block_size=max_pos)), tok, "tiny")
    pol.model.eval()
    pol.model.head = biased_head(pol.model.head)
    return pol


def set_eos_bias(pol, q: float) -> None:
    head = pol.model.lm_head if pol.kind == "hf" else pol.model.head
    with torch.no_grad():
        head.bias.zero_()
        head.bias[pol.eos_id] = eos_bias(q, head.out_features)


def task_prompts_and_base(name: str, count: int):
    """A task's first `count` train-pool prompts, its base checkpoint (as `rollwise train --task NAME`
    resolves it) and its max_new_tokens."""
    from rollwise.core import registry
    from rollwise.policy.policy import Policy
    from rollwise.policy.warmstart import base_checkpoint
    from rollwise.run.config import load_config

    cfg = load_config(None, {"task": name})
    task = registry.get("task", name).obj(**cfg.task_options)
    base = Policy.load(base_checkpoint(task, cfg.warmstart))
    base.model.eval()
    return task.train_pool()[:count], base, cfg.max_new_tokens


def run_rollwise(pol, prompts, n: int, max_new: int, seed: int) -> dict:
    from rollwise.core.types import Request
    from rollwise.generate.engine import run_sync
    from rollwise.generate.torch_engine import TorchEngine

    eng = TorchEngine(pol, temperature=1.0, top_p=1.0, max_new_tokens=max_new, seed=seed)
    t = time.perf_counter()
    res = run_sync(eng, [Request(p, n, id=i) for i, p in enumerate(prompts)])
    wall = time.perf_counter() - t
    lengths = [r.num_tokens for e in res for r in e.group.rollouts]
    return {"wall_s": wall, "lengths": lengths}


@torch.no_grad()
def run_generate(pol, prompts, n: int, max_new: int, seed: int) -> dict:
    torch.manual_seed(seed)
    tok = pol.tokenizer
    t = time.perf_counter()
    enc = tok([p.text for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
    out = pol.model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             max_new_tokens=max_new, num_return_sequences=n,
                             pad_token_id=pol.pad_id, eos_token_id=pol.eos_id)
    wall = time.perf_counter() - t
    gen = out[:, enc["input_ids"].shape[1]:]
    is_eos = gen == pol.eos_id
    has = is_eos.any(1)
    first = torch.where(has, is_eos.int().argmax(1) + 1, torch.full_like(has, gen.shape[1], dtype=torch.long))
    return {"wall_s": wall, "lengths": first.tolist()}


def summarize(runs: list[dict], max_new: int) -> dict:
    tps = [sum(r["lengths"]) / r["wall_s"] for r in runs]
    lens = [x for r in runs for x in r["lengths"]]
    return {"tokens_per_s_median": round(statistics.median(tps), 1),
            "tokens_per_s_runs": [round(x, 1) for x in tps],
            "wall_s_runs": [round(r["wall_s"], 3) for r in runs],
            "tokens_runs": [sum(r["lengths"]) for r in runs],
            "mean_len": round(statistics.mean(lens), 2), "max_len": max(lens),
            "frac_at_max_new": round(sum(x == max_new for x in lens) / len(lens), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new", type=int, help="max_new_tokens of the long-tail mix (default 256; with "
                                                   "--task: the task's)")
    ap.add_argument("--max-new-equal", type=int,
                    help="max_new_tokens of the equal mix (every row runs to it; default 128, which keeps the "
                         "run short; with --task: the task's)")
    ap.add_argument("--mean-len", type=float, help="target mean length of the long-tail mix (default 30; with "
                                                   "--task: its base's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: with 2 threads on this shared 2-core machine identical runs "
                         "varied 15-72 s, with 1 thread within ~20%%)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mixes", nargs="+", default=["equal", "long_tail"], choices=["equal", "long_tail"])
    ap.add_argument("--no-tiny", action="store_true", help="skip the TinyGPT rows")
    ap.add_argument("--task", default="arithmetic",
                    help="prompts from this task; another than arithmetic also runs its base (real lengths)")
    ap.add_argument("--out", default=None, help="default benchmarks/results/engine_bench[_TASK].json")
    args = ap.parse_args(argv)
    argv_given = sys.argv[1:] if argv is None else argv
    if args.out is None:
        name = "engine_bench.json" if args.task == "arithmetic" else f"engine_bench_{args.task}.json"
        args.out = str(HERE / "results" / name)

    warnings.filterwarnings("ignore")
    import transformers
    transformers.logging.set_verbosity_error()
    from rollwise.tasks.arithmetic import ArithmeticTask

    torch.set_num_threads(args.threads)
    base = None
    if args.task == "arithmetic":
        prompts = ArithmeticTask(pool_size=200).train_pool()[: args.prompts]
        args.max_new = args.max_new or 256
        args.max_new_equal = args.max_new_equal or 128
        args.mean_len = args.mean_len or 30.0
    else:
        prompts, base, task_max_new = task_prompts_and_base(args.task, args.prompts)
        args.max_new = args.max_new or task_max_new
        args.max_new_equal = args.max_new_equal or task_max_new
        # the base's own mean length on these prompts sets the long-tail mix of the random models
        if args.mean_len is None:
            r = run_rollwise(base, prompts, args.n, args.max_new, 10_000)
            args.mean_len = statistics.mean(r["lengths"])
            print(f"[task {args.task}] base mean length {args.mean_len:.1f} tokens", flush=True)
    max_pos = max(300, max(len(p.text) for p in prompts) + max(args.max_new, args.max_new_equal) + 8)
    q_of = {"equal": 0.0, "long_tail": 1.0 / args.mean_len}
    max_new_of = {"equal": args.max_new_equal, "long_tail": args.max_new}
    t_start = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        hf = build_hf_policy(Path(tmp) / "llama", max_pos, args.seed)
        tiny = None if args.no_tiny else build_tiny_policy(max_pos, args.seed)

    def engine_fns(max_new, mix="long_tail"):
        fns = {"rollwise_hf": lambda seed: run_rollwise(hf, prompts, args.n, max_new, seed),
               "generate_hf": lambda seed: run_generate(hf, prompts, args.n, max_new, seed)}
        if tiny is not None:
            fns["rollwise_tiny"] = lambda seed: run_rollwise(tiny, prompts, args.n, max_new, seed)
        if base is not None and mix == "long_tail":  # the task's own lengths
            fns["rollwise_base"] = lambda seed: run_rollwise(base, prompts, args.n, max_new, seed)
        return fns

    def set_mix(mix):
        for pol in (hf, tiny):
            if pol is not None:
                set_eos_bias(pol, q_of[mix])

    # Warm-up, not recorded: each engine once at full size on the long-tail mix. The first full-size
    # run in a process is much slower than the rest (allocator growth), whichever engine goes first.
    set_mix("long_tail")
    for name, fn in engine_fns(args.max_new).items():
        t = time.perf_counter()
        fn(10_000)
        print(f"[warm-up] {name:14s} {time.perf_counter() - t:7.2f} s", flush=True)

    results = {}
    for mix in args.mixes:
        set_mix(mix)
        max_new = max_new_of[mix]
        engines = engine_fns(max_new, mix)
        runs = {k: [] for k in engines}
        probes = []
        order = list(engines)
        for rep in range(args.repeats):
            probes.append(load_probe_ms())
            for name in (order if rep % 2 == 0 else order[::-1]):
                r = engines[name](args.seed + 1 + rep)
                runs[name].append(r)
                print(f"[{mix} rep {rep}] {name:14s} {sum(r['lengths']):6d} tok in {r['wall_s']:7.2f} s "
                      f"= {sum(r['lengths']) / r['wall_s']:8.1f} tok/s (elapsed {time.perf_counter() - t_start:.0f} s)",
                      flush=True)
        s = {k: summarize(v, max_new) for k, v in runs.items()}
        pair = [(sum(a["lengths"]) / a["wall_s"]) / (sum(b["lengths"]) / b["wall_s"])
                for a, b in zip(runs["rollwise_hf"], runs["generate_hf"])]
        entry = {"max_new_tokens": max_new, "eos_stop_prob_target": q_of[mix], "eos_bias": eos_bias(q_of[mix], hf.model.lm_head.out_features),
                 "rollwise_hf": s["rollwise_hf"], "generate_hf": s["generate_hf"],
                 "ratio_rollwise_over_generate": round(s["rollwise_hf"]["tokens_per_s_median"]
                                                       / s["generate_hf"]["tokens_per_s_median"], 3),
                 "paired_ratio_median": round(statistics.median(pair), 3),
                 "paired_ratios": [round(x, 3) for x in pair],
                 # generate keeps all rows until the longest ends: the share of its row-steps that made a token
                 "generate_row_step_utilization": round(statistics.median(
                     sum(r["lengths"]) / (len(r["lengths"]) * max(r["lengths"])) for r in runs["generate_hf"]), 3),
                 "load_probe_ms": probes}
        if tiny is not None:
            entry["rollwise_tiny"] = s["rollwise_tiny"]
            entry["rollwise_tiny"]["generate"] = "n/a (TinyGPT is not a transformers model; no .generate)"
            entry["ratio_tiny_over_hf_rollwise"] = round(s["rollwise_tiny"]["tokens_per_s_median"]
                                                         / s["rollwise_hf"]["tokens_per_s_median"], 3)
        if "rollwise_base" in s:
            entry["rollwise_base"] = s["rollwise_base"]
            entry["rollwise_base"]["model"] = f"the {args.task} task's base checkpoint (real length mix)"
        results[mix] = entry

    total = time.perf_counter() - t_start
    doc = {
        "benchmark": "engine_bench",
        "goal": "rollwise TorchEngine >= 1.5x transformers generate (generated tokens/s) on the long-tail mix",
        "command": "python benchmarks/engine_bench.py" + ("" if not argv_given else " " + " ".join(argv_given)),
        "machine": {"date": dt.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__,
                    "transformers": transformers.__version__, "python": platform.python_version(),
                    "platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "load_avg_at_end": list(os.getloadavg())},
        "config": {"model": f"LlamaForCausalLM hidden {HIDDEN}, {LAYERS} layers, {HEADS} heads, intermediate {INTER}, "
                            f"vocab {hf.model.lm_head.out_features} (char tokenizer), random init seed {args.seed}",
                   "tiny_model": None if tiny is None else f"TinyGPT n_embd {HIDDEN}, {LAYERS} layers, {HEADS} heads",
                   "task": args.task, "prompts": args.prompts, "n": args.n, "rows": args.prompts * args.n,
                   "max_new_tokens": {"equal": args.max_new_equal, "long_tail": args.max_new},
                   "long_tail_mean_len_target": args.mean_len,
                   "repeats": args.repeats, "sampling": "temperature 1, top_p 1 (generate: do_sample, top_k 0)"},
        "results": results,
        "total_s": round(total, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


def markdown(doc: dict) -> str:
    c, m = doc["config"], doc["machine"]
    lines = ["# engine_bench: rollwise TorchEngine vs transformers generate", "",
             f"Command: `{doc['command']}`  ", 
             f"Machine: {m['cpus']} CPUs, torch {m['torch']} (torch threads: {m['torch_threads']}), transformers "
             f"{m['transformers']}, {m['date']}; total {doc['total_s']} s  ",
             f"Model: {c['model']}; workload {c['prompts']} prompts x {c['n']} samples = {c['rows']} rows, "
             f"max_new_tokens {c['max_new_tokens']['equal']} (equal) / {c['max_new_tokens']['long_tail']} (long_tail), "
             f"{c['repeats']} interleaved repeats (median).", "",
             "| mix | engine | model | tokens/s (median) | mean len | max len | rollwise/generate |",
             "|---|---|---|---:|---:|---:|---:|"]
    for mix, e in doc["results"].items():
        rw, g = e["rollwise_hf"], e["generate_hf"]
        ratio = f"{e['ratio_rollwise_over_generate']:.2f}x (paired median {e['paired_ratio_median']:.2f}x)"
        lines.append(f"| {mix} | rollwise TorchEngine | Llama (hf) | {rw['tokens_per_s_median']} | {rw['mean_len']} | "
                     f"{rw['max_len']} | {ratio} |")
        lines.append(f"| {mix} | transformers generate | Llama (hf) | {g['tokens_per_s_median']} | {g['mean_len']} | "
                     f"{g['max_len']} | |")
        if "rollwise_tiny" in e:
            t = e["rollwise_tiny"]
            lines.append(f"| {mix} | rollwise TorchEngine | TinyGPT | {t['tokens_per_s_median']} | {t['mean_len']} | "
                         f"{t['max_len']} | n/a (no generate) |")
        if "rollwise_base" in e:
            t = e["rollwise_base"]
            lines.append(f"| {mix} | rollwise TorchEngine | {c.get('task')} base (real lengths) | "
                         f"{t['tokens_per_s_median']} | {t['mean_len']} | {t['max_len']} | n/a (no generate) |")
    lines += ["", "Tokens/s counts the tokens each engine actually generated (up to and including EOS). Ratios are "
              "median(rollwise)/median(generate); the paired median is the median of per-repeat ratios of "
              "back-to-back runs. The machine is shared, so absolute tokens/s swing; compare the ratios. "
              f"torch ran {m['torch_threads']} thread(s) (see the script's docstring for why 1 is the default). "
              "Details and per-run numbers: engine_bench.json.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
