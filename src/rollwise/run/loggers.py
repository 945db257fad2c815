"""Experiment loggers beside metrics.jsonl (`--logger jsonl,tensorboard,wandb`; config field `loggers`).

metrics.jsonl is the run's record and is always written; the others get each row's numbers with the row's
step as their step:
- tensorboard: `torch.utils.tensorboard.SummaryWriter` event files in `<out>/tensorboard`;
- wandb: a Weights & Biases run in `<out>/wandb`, offline unless WANDB_MODE says otherwise (nothing leaves
  the machine by default; `wandb sync <out>/wandb/offline-run-*` uploads it later). WANDB_PROJECT names the
  project (default "rollwise").
Both need the `logging` extra (`pip install 'rollwise[logging]'`); config.validate refuses a logger whose
package is missing, before any work.
"""
from __future__ import annotations

import os
from pathlib import Path

LOGGERS = {"jsonl": None, "tensorboard": "tensorboard", "wandb": "wandb"}  # name -> the package it needs


def check_loggers(names: list[str]) -> None:
    import importlib.util

    for name in names:
        if name not in LOGGERS:
            raise ValueError(f"loggers: unknown logger {name!r}; known: {', '.join(LOGGERS)}")
        package = LOGGERS[name]
        if package and importlib.util.find_spec(package) is None:
            raise ValueError(f"loggers: {name} needs the {package} package: pip install 'rollwise[logging]'")


def scalars(row: dict) -> dict[str, float]:
    """The row's numbers (a None, written for a non-finite value, and text are left out)."""
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float))}


class TensorBoardLogger:
    def __init__(self, out: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out / "tensorboard"))

    def log(self, row: dict) -> None:
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, global_step=row["step"])
        self.writer.flush()  # a killed run keeps what it logged

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, out: Path, config: dict):
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rollwise"), name=out.name, dir=str(out),
                              config=config, mode=os.environ.get("WANDB_MODE", "offline"))

    def log(self, row: dict) -> None:
        self.run.log(scalars(row), step=row["step"])

    def close(self) -> None:
        self.run.finish()


def open_loggers(names: list[str], out: Path, config: dict) -> list:
    """The loggers other than jsonl (which the trainer writes itself)."""
    out_loggers = []
    for name in dict.fromkeys(names):
        if name == "tensorboard":
            out_loggers.append(TensorBoardLogger(out))
        elif name == "wandb":
            out_loggers.append(WandbLogger(out, config))
    return out_loggers
