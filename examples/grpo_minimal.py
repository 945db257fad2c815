"""GRPO in one file, on rollwise's public API: read it top to bottom.

    python examples/grpo_minimal.py --steps 20            # the embedded task 1 and its shipped base

Each step: draw B prompts, sample n responses for each (one Request per prompt), score them, train on the
groups (the learner computes GRPO's group-normalised advantages and takes a clipped policy-gradient step),
hand the new weights to the engine. `rollwise train` does the same through a Planner, which is where the
methods that choose prompts, size groups or stop rollouts plug in; this file leaves all of that out.
"""
import argparse

import numpy as np

from rollwise import Batch, Group, Request, build_run, evaluate, load_config, run_sync


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32, help="prompts per step")
    ap.add_argument("--n", type=int, default=4, help="responses per prompt")
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--eval-size", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/grpo_minimal")
    args = ap.parse_args(argv)

    # 1. The parts of a run, from a config: task and its prompts, policy, engine, learner, reward.
    cfg = load_config(None, {"out": args.out, "seed": args.seed, "learner.lr": args.lr})
    run = build_run(cfg, log=lambda message: None)
    rng = np.random.default_rng(args.seed)
    heldout = run.heldout[: args.eval_size]

    def accuracy() -> float:
        return evaluate(run.policy, heldout, run.scorer, max_new_tokens=cfg.max_new_tokens)["eval_acc"]

    print(f"step 0: held-out accuracy {accuracy():.3f}")
    for step in range(1, args.steps + 1):
        # 2. Generate: n samples of each of B prompts drawn from the train pool.
        prompts = [run.pool[i] for i in rng.choice(len(run.pool), size=args.batch, replace=False)]
        requests = [Request(p, args.n, id=i) for i, p in enumerate(prompts)]
        groups: list[Group] = [f.group for f in run_sync(run.engine, requests)]

        # 3. Reward: the task's verifier scores every response (reward and correct on each rollout).
        run.scorer.score(groups)

        # 4. Learn: GRPO's advantages within each group, one clipped update; then the engine samples from it.
        stats = run.learner.update(Batch(groups, step))
        run.engine.update_weights(run.learner.version)

        reward = float(np.mean([r.reward for g in groups for r in g.rollouts]))
        line = f"step {step}: reward {reward:.3f}, zero-variance groups {stats['zero_var_frac']:.2f}"
        if step % 10 == 0 or step == args.steps:
            line += f", held-out accuracy {accuracy():.3f}"
        print(line)
    run.scorer.close()
    return accuracy()


if __name__ == "__main__":
    main()
