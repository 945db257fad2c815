"""Which part of a chain step a checkpoint has learned: its mean loss (nats per token) on the supervised
traces, by the kind of token. A diagnostic of the warm start (docs/task2.md quotes it).

    python benchmarks/task2_token_loss.py CHECKPOINT_DIR [--examples 128]

Kinds: label (the next letter: a successor), op (+/-), operand (the digit copied from the prompt after
that label), eq, total (the running total's digits: the addition), sep (',' or ':': is this the last
label?), final (the answer after ':'), eos. Per label letter too: later letters are seen only in longer
chains. Examples come from ChainTask().sft_examples with a seed the warm start does not use.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F

from rollwise.policy.policy import Policy
from rollwise.tasks.chain import ChainTask


def kind(s: str, i: int) -> str:
    ch = s[i]
    if ch.isalpha():
        return "label"
    if ch in "+-":
        return "op"
    if ch == "=":
        return "eq"
    if ch in ",:":
        return "sep"
    if s[i - 1] in "+-":
        return "operand"
    return "final" if ":" in s[:i] else "total"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--examples", type=int, default=128)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    pol = Policy.load(args.model)
    pol.model.eval()
    by_kind, by_label = {}, {}
    with torch.no_grad():
        for text, trace, _ in ChainTask().sft_examples(args.examples, seed=777):
            p, a = pol.encode(text), pol.encode(trace) + [pol.eos_id]
            logits = pol.model(torch.tensor([p + a]))[0][0, len(p) - 1: -1]
            nll = -F.log_softmax(logits, -1)[torch.arange(len(a)), torch.tensor(a)]
            for i in range(len(trace)):
                by_kind.setdefault(kind(trace, i), []).append(nll[i].item())
                if trace[i].isalpha():
                    by_label.setdefault(trace[i], []).append(nll[i].item())
            by_kind.setdefault("eos", []).append(nll[-1].item())
    print("kind: " + ", ".join(f"{k} {np.mean(v):.2f}" for k, v in by_kind.items()))
    print("label: " + " ".join(f"{k} {np.mean(v):.2f}" for k, v in sorted(by_label.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
