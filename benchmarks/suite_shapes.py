"""Shape of every reasoning-gym family against the suite's task-choice rule, step 2 (benchmarks/plans/LOG.md).

Reads only what the generator and the verifier's code give (no model is run): the validation split's
prompt and answer lengths as `rollwise`'s reasoning-gym task draws it (data seed 0, the "heldout" stream,
first 200 distinct prompts), the distinct-prompt count in 1,500 draws of that stream, whether every entry has
a reference answer, and whether the family overrides the base verifier (`ProceduralDataset.score_answer`:
exact match, or len(oracle)/len(response) when a longer response contains the oracle), which then has to
be read by hand. Each family runs in its own process with a time limit (a few generators are slow).

    python benchmarks/suite_shapes.py --out benchmarks/results/suite_shapes.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp

EXCLUDED = ("gcd", "basic_arithmetic", "chain_sum", "word_sorting", "sudoku", "dice", "polynomial_multiplication",
            "boxnet", "rubiks_cube")  # the rule's step 1: used in the docs, the README or the tests
VALIDATION, DRAWS = 200, 1500
MAX_PROMPT, MAX_ANSWER, MIN_DISTINCT = 200, 8, 1000


def shape(name: str) -> dict:
    import reasoning_gym
    from reasoning_gym.dataset import ProceduralDataset

    from rollwise.tasks._splits import stream_seed

    ds = reasoning_gym.create_dataset(name, seed=stream_seed(0, "heldout"), size=DRAWS)
    seen, val = set(), []
    for i in range(DRAWS):
        e = ds[i]
        if e["question"] not in seen:
            seen.add(e["question"])
            if len(val) < VALIDATION:
                val.append(e)
    answers = [e.get("answer") for e in val]
    has_answer = all(isinstance(a, str) and a != "" for a in answers)
    plen = [len(e["question"]) for e in val]
    alen = [len(a) if isinstance(a, str) else 10**6 for a in answers]
    overrides = type(ds).score_answer is not ProceduralDataset.score_answer
    out = {"family": name, "distinct_in_1500": len(seen), "max_prompt": max(plen), "max_answer": max(alen),
           "mean_chars": round(sum(p + a for p, a in zip(plen, alen)) / len(val), 1) if has_answer else None,
           "has_answer": has_answer, "overrides_score_answer": overrides}
    out["passes_a_b_d_e"] = (out["max_prompt"] <= MAX_PROMPT and out["max_answer"] <= MAX_ANSWER
                             and out["distinct_in_1500"] >= MIN_DISTINCT and has_answer)
    return out


def _run(name, q):
    try:
        q.put(shape(name))
    except Exception as e:  # noqa: BLE001 - a family that cannot be built at its defaults is recorded as such
        q.put({"family": name, "error": f"{type(e).__name__}: {e}"[:200]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    from reasoning_gym.factory import DATASETS

    rows = []
    for name in sorted(DATASETS):
        if name in EXCLUDED:
            rows.append({"family": name, "excluded": "used in the docs, README or tests (rule step 1)"})
            continue
        q = mp.Queue()
        p = mp.Process(target=_run, args=(name, q))
        p.start()
        p.join(args.timeout)
        if p.is_alive():
            p.kill()
            rows.append({"family": name, "error": f"generator slower than {args.timeout:.0f} s for {DRAWS} draws"})
        else:
            rows.append(q.get() if not q.empty() else {"family": name, "error": "no result"})
        print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
