"""The checkpoint format: plain data only (tensors, numbers, strings, lists, tuples, dicts), loaded with
`weights_only=True`, so a crafted file cannot run code; numpy arrays, scalars and sets are tagged and
come back bit for bit."""
from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import torch

CKPT = "checkpoint.pt"
CKPT_FORMAT = 2  # 2: plain data only (weights_only loading), the run's config, skipped-step counters


_TAG = "__rollwise__"


def to_plain(x, where: str = "state"):
    """`x` with numpy arrays and scalars, sets and dicts with non-plain keys turned into tagged plain data
    that `torch.load(weights_only=True)` accepts and `from_plain` turns back, bit for bit. Anything else is
    an error naming where it is: a checkpoint never holds an object that needs code to load."""
    if x is None or isinstance(x, (bool, int, float, str, bytes, torch.Tensor)):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"{where}: cannot checkpoint a numpy array of dtype {x.dtype}")
        arr = np.ascontiguousarray(x).astype(x.dtype.newbyteorder("="), copy=False)
        return {_TAG: "ndarray", "dtype": arr.dtype.str, "data": torch.from_numpy(arr.copy())}
    if isinstance(x, np.generic):
        return {_TAG: "npscalar", "dtype": x.dtype.str, "value": x.item()}
    if isinstance(x, (list, tuple)):
        items = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(x)]
        return items if isinstance(x, list) else tuple(items)
    if isinstance(x, (set, frozenset)):
        return {_TAG: "set", "items": [to_plain(v, where) for v in x]}
    if isinstance(x, dict):
        plain_keys = all(isinstance(k, (str, int, float, bool)) and not isinstance(k, np.generic)
                         and k != _TAG for k in x)
        if plain_keys:
            return {k: to_plain(v, f"{where}.{k}") for k, v in x.items()}
        return {_TAG: "dict", "items": [[to_plain(k, where), to_plain(v, f"{where}.{k}")] for k, v in x.items()]}
    raise TypeError(f"{where}: cannot checkpoint a {type(x).__module__}.{type(x).__qualname__}; a state_dict holds "
                    "tensors, numpy arrays and plain Python data only")


def from_plain(x):
    if isinstance(x, list):
        return [from_plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(from_plain(v) for v in x)
    if isinstance(x, dict):
        tag = x.get(_TAG)
        if tag == "ndarray":
            return x["data"].numpy().view(np.dtype(x["dtype"])).copy()
        if tag == "npscalar":
            return np.dtype(x["dtype"]).type(x["value"])
        if tag == "set":
            return {from_plain(v) for v in x["items"]}
        if tag == "dict":
            return {_hashable(from_plain(k)): from_plain(v) for k, v in x["items"]}
        return {k: from_plain(v) for k, v in x.items()}
    return x


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def read_checkpoint(path: Path) -> dict:
    """A checkpoint's state, loaded with `weights_only=True`: tensors and plain data only, so a crafted
    file cannot run code. Anything else (a foreign pickle, a truncated file, another format) is refused
    with an error naming the file."""
    try:
        raw = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        found = re.search(r"(?:unsupported|Unsupported global:) GLOBAL (\S+)", str(e))  # torch words it both ways
        if not found:  # not a pickle that asks for code: damaged or foreign
            raise ValueError(f"{path}: not a readable checkpoint (its pickle stream is not valid)") from None
        what = f" ({found.group(1)})"
        raise ValueError(f"{path}: refused: it holds objects other than tensors and plain data{what}, which a "
                         "rollwise checkpoint never does; loading it could run code. Remove it, or use another "
                         "--out") from None
    except Exception as e:  # noqa: BLE001 - truncated, not a torch file, unreadable
        first = str(e).split(". ")[0][:200]
        raise ValueError(f"{path}: not a readable checkpoint ({type(e).__name__}: {first})") from None
    if not isinstance(raw, dict) or raw.get("format") != CKPT_FORMAT:
        fmt = raw.get("format") if isinstance(raw, dict) else None
        raise ValueError(f"{path}: checkpoint format {fmt} is not {CKPT_FORMAT} (written by another version of "
                         "rollwise); start a new run in another --out")
    return from_plain(raw)


def to_cpu(x):
    """x with every tensor in it (nested dicts, lists, tuples) copied to the CPU."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, dict):
        return type(x)((k, to_cpu(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(to_cpu(v) for v in x)
    return x


# ---- saving a checkpoint as one unit: checkpoint.pt and model/ -----------------------------------------

SAVING = ".checkpoint-saving"  # the directory a checkpoint is written into, beside the one it replaces
MODEL = "model"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (the disk is full, a write failed); the previous one is kept.
    Its message is one line naming the directory, the cause and the step kept."""


def save_unit(out: Path, state: dict, write_model, step: int, previous_step: int | None) -> None:
    """Write `state` (plain data: `to_plain`) as `out/checkpoint.pt` and `write_model(dir)`'s files as
    `out/model/`, as one unit: everything is written and fsynced into `out/.checkpoint-saving/` first,
    then renamed into place (renames need no space), model/ first and checkpoint.pt last. Until the
    renames, the previous checkpoint and model/ are untouched; a failure while writing (a full disk, at any
    point) removes what was written and raises CheckpointWriteError naming the cause and the step kept.
    A kill between the two renames leaves model/ one step ahead of checkpoint.pt, which a resume rewrites;
    a kill between moving the old model/ aside and the new one in is undone by `recover`."""
    out = Path(out)
    saving = out / SAVING
    recover(out)
    try:
        saving.mkdir()
        torch.save(state, saving / CKPT)
        write_model(saving / MODEL)
        _fsync_tree(saving)
    except BaseException as e:
        shutil.rmtree(saving, ignore_errors=True)
        if _is_write_failure(e):
            raise CheckpointWriteError(_write_failure(out, e, step, previous_step)) from None
        raise
    model, aside = out / MODEL, saving / (MODEL + ".previous")
    try:
        if model.exists():
            os.replace(model, aside)
        os.replace(saving / MODEL, model)
    except OSError as e:
        try:
            recover(out)  # the old model/ back in place, the new files removed
        except OSError:  # then the next start does it
            pass
        raise CheckpointWriteError(_write_failure(out, e, step, previous_step)) from None
    os.replace(saving / CKPT, out / CKPT)  # the commit: a resume reads this file
    shutil.rmtree(saving, ignore_errors=True)
    try:
        _fsync_dir(out)  # the renames on disk (best effort: the checkpoint is in place either way)
    except OSError:
        pass


def recover(out: Path) -> None:
    """Undo what a save that was killed or failed left in `out`: the previous model/ moved back if the
    new one never took its place, and the saving directory removed."""
    out = Path(out)
    saving = out / SAVING
    if not saving.exists():
        return
    aside = saving / (MODEL + ".previous")
    if aside.exists() and not (out / MODEL).exists():
        os.replace(aside, out / MODEL)
    shutil.rmtree(saving, ignore_errors=True)


def _is_write_failure(e: BaseException) -> bool:
    """An error of writing files: OSError, torch's RuntimeError of its stream writer ("unexpected pos",
    "file write failed"), safetensors' error. (Anything else is a bug and keeps its traceback.)"""
    if isinstance(e, (OSError, RuntimeError)):
        return True
    return type(e).__name__ == "SafetensorError"


def _write_failure(out: Path, e: BaseException, step: int, previous_step: int | None) -> str:
    import errno

    try:
        free = shutil.disk_usage(out).free
    except OSError:
        free = None
    text = " ".join(str(e).split())[:200]
    if getattr(e, "errno", None) == errno.ENOSPC or (free is not None and free < (16 << 20)):
        cause = f"no space left on device ({type(e).__name__}: {text})"
    else:
        cause = f"a write failed ({type(e).__name__}: {text})"
    kept = (f"the previous checkpoint (step {previous_step}) is kept: free space, then resume"
            if previous_step is not None else "no checkpoint was saved before this one")
    return f"step {step}: {cause} while saving the checkpoint in {out}; {kept}"


def _fsync_tree(root: Path) -> None:
    for d, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(d, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(d))


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # not on this platform
        return
    try:
        os.fsync(fd)
    except OSError as e:  # a directory fsync that the file system does not support is no failure
        import errno

        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
