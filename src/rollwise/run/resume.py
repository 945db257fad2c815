"""What a resume with `--allow-config-change` does with each changed field: apply it, or refuse it.

A checkpoint brings back the weights, the optimizer (its param groups hold lr, betas and weight decay) and
every random stream. So a changed field is either
- applied on top of the loaded state: `learner.lr`, `learner.betas` and `learner.weight_decay` are written
  into the optimizer's param groups after it loads (Adam's moments are kept);
- or refused, even with the flag, because the saved state would silently override it: `seed` (the torch,
  numpy, Python, learner and engine streams all resume where they were), `model` and `warmstart.*` (the
  weights come from the checkpoint, not from the base). Start a new run in another --out instead.
Every other field takes effect through the objects the resumed run builds from the config.
"""
from __future__ import annotations

STATE_OWNED = ("seed", "model", "warmstart.")  # a field equal to, or under, one of these
OPTIMIZER_FIELDS = {"learner.lr": "lr", "learner.betas": "betas", "learner.weight_decay": "weight_decay"}


def refuse_state_owned(changes: dict, out) -> None:
    """Raise, naming them, if `changes` holds a field the checkpoint's state would override."""
    owned = [k for k in changes if any(k == f or (f.endswith(".") and k.startswith(f)) for f in STATE_OWNED)]
    if owned:
        what = ", ".join(f"{k}: {changes[k][0]!r} -> {changes[k][1]!r}" for k in owned)
        raise ValueError(f"--out {out}: cannot resume with {what}, even with --allow-config-change: the checkpoint's "
                         "state (random streams, weights) would override it; start a new run in another --out")


def apply_optimizer_settings(opt, learner_cfg) -> None:
    """The config's lr, betas and weight decay into every param group of a just-loaded optimizer."""
    for group in opt.param_groups:
        for field, key in OPTIMIZER_FIELDS.items():
            value = getattr(learner_cfg, field.split(".")[1])
            group[key] = tuple(value) if key == "betas" else value
