"""Disk full while saving (issue 45, item 3): checkpoint.pt's save failed with a raw `RuntimeError ...
unexpected pos` and left a .tmp, and at another size model/ was left without weights after checkpoint.pt
had been replaced. A checkpoint is now written as one unit (run/checkpoint.py `save_unit`): a failure at
any point of the save is one line naming the cause, leaves the previous checkpoint and model/ as they were,
and the run resumes from it exactly."""
import errno
import json
import os

import pytest
import torch
from safetensors.torch import load_file

from rollwise.run.records import TIMING
from rollwise.policy.policy import Policy
from rollwise.run import checkpoint as ckpt
from rollwise.run.checkpoint import CKPT, SAVING, read_checkpoint
from rollwise.run.config import load_config
from rollwise.run.loop import RunStopped, Trainer

from conftest import SMALL
from test_adversarial import one_thread  # noqa: F401  (an autouse fixture)

QUIET = dict(log=lambda m: None)
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def cfg(out, steps):
    return load_config(None, {**SMALL, "out": str(out), "steps": steps, "eval_every": 0, "checkpoint_every": 1})


def strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _partial_then(error):
    """torch.save that writes part of its file, then fails as a full disk does."""
    real = torch.save

    def save(obj, f, *a, **kw):
        real(obj, f, *a, **kw)
        with open(f, "r+b") as fh:
            fh.truncate(100)
        raise error
    return save


def _fail_rename_of_new_model(real=os.replace):
    def replace(src, dst, *a, **kw):
        if os.path.basename(str(src)) == "model" and os.path.basename(os.path.dirname(str(src))) == SAVING:
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst, *a, **kw)
    return replace


# (what fails, how it is patched in, the cause the message names)
POINTS = {
    "checkpoint.pt, at once": (lambda mp: mp.setattr(torch, "save", _raise(ENOSPC)), "no space left on device"),
    "checkpoint.pt, midway (torch: unexpected pos)": (
        lambda mp: mp.setattr(torch, "save", _partial_then(RuntimeError(
            "[enforce fail at inline_container.cc:626] . unexpected pos 4160 vs 4054"))), "unexpected pos"),
    "model weights, midway": (lambda mp: mp.setattr("rollwise.policy.policy.save_file", _raise(ENOSPC)),
                              "no space left on device"),
    "model/, after its weights": (lambda mp: mp.setattr(Policy, "save", _after(Policy.save, ENOSPC)),
                                  "no space left on device"),
    "fsync": (lambda mp: mp.setattr(os, "fsync", _raise(ENOSPC)), "no space left on device"),
    "renaming the new model/ in": (lambda mp: mp.setattr(os, "replace", _fail_rename_of_new_model()),
                                   "Input/output error"),
}


def _raise(error):
    def f(*a, **kw):
        raise error
    return f


def _after(real, error):
    def f(*a, **kw):
        real(*a, **kw)
        raise error
    return f


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_policy):
    """An uninterrupted 2-step run: its rows and final weights."""
    out = tmp_path_factory.mktemp("ref") / "run"
    rows = Trainer(cfg(out, 2), **QUIET).run()
    return strip(rows), load_file(str(out / "model" / "model.safetensors"))


@pytest.mark.parametrize("point", list(POINTS))
def test_a_failure_at_any_point_of_a_save_keeps_the_last_checkpoint_and_resumes_exactly(tmp_path, monkeypatch,
                                                                                      reference, point):
    out = tmp_path / "run"
    Trainer(cfg(out, 1), **QUIET).run()  # step 1: a good checkpoint and model/
    good = load_file(str(out / "model" / "model.safetensors"))
    inject, cause = POINTS[point]
    with monkeypatch.context() as mp:
        inject(mp)
        with pytest.raises(RunStopped) as stop:
            Trainer(cfg(out, 2), **QUIET).run()
    msg = str(stop.value)
    assert "\n" not in msg and msg.startswith("step 2: ") and cause in msg, msg
    assert f"while saving the checkpoint in {out}; the previous checkpoint (step 1) is kept" in msg
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".lock", ".rollwise-run", CKPT, "config.json", "metrics.jsonl", "model"])  # nothing left behind
    state = read_checkpoint(out / CKPT)
    assert state["step"] == 1
    now = load_file(str(out / "model" / "model.safetensors"))  # model/ whole, and the same step as checkpoint.pt
    assert all(torch.equal(now[k], good[k]) and torch.equal(now[k], state["model"][k]) for k in good)
    Policy.load(out / "model")
    rows = Trainer(cfg(out, 2), **QUIET).run()  # space freed: resume
    ref_rows, ref_weights = reference
    assert strip(json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()) == ref_rows
    assert strip(rows) == ref_rows
    final = load_file(str(out / "model" / "model.safetensors"))
    assert all(torch.equal(final[k], ref_weights[k]) for k in ref_weights)


def test_a_save_killed_between_its_renames_is_recovered(tmp_path):
    """A kill after the old model/ was moved aside and before the new one took its place: the next start
    puts the old one back (checkpoint.pt was not replaced yet) and removes the rest."""
    out = tmp_path
    (out / "model").mkdir()
    (out / "model" / "w").write_text("old")
    (out / SAVING / "model").mkdir(parents=True)
    (out / SAVING / "model" / "w").write_text("new")
    os.replace(out / "model", out / SAVING / "model.previous")
    ckpt.recover(out)
    assert (out / "model" / "w").read_text() == "old" and not (out / SAVING).exists()
