"""A task read from files: prompts and reference answers in jsonl or parquet.

Each row needs a prompt field and an answer field (names configurable). A malformed row raises a
ValueError naming the file, the row (1-based) and the field, before any training starts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.registry import register
from ..core.types import Prompt


def read_rows(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".jsonl":
        rows = []
        with path.open() as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: row {i}: not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}: row {i}: expected a JSON object, got {type(row).__name__}")
                rows.append((i, row))
        return rows
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:  # pragma: no cover - the parquet extra is not installed
            raise ImportError("reading parquet needs pyarrow: pip install 'rollwise[parquet]'") from e
        return list(enumerate(pq.read_table(path).to_pylist(), 1))
    raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl or .parquet")


def load_prompts(path: str | Path, prompt_field: str = "prompt", answer_field: str = "answer",
                 level_field: str | None = "level") -> list[Prompt]:
    prompts = []
    for i, row in read_rows(path):
        for field_name in (prompt_field, answer_field):
            if field_name not in row or row[field_name] is None:
                raise ValueError(f"{path}: row {i}: missing field {field_name!r}")
        text, answer = row[prompt_field], row[answer_field]
        if not isinstance(text, str) or not text:
            raise ValueError(f"{path}: row {i}: field {prompt_field!r} must be a non-empty string")
        if not isinstance(answer, (str, int, float)):
            raise ValueError(f"{path}: row {i}: field {answer_field!r} must be a string or number")
        level = row.get(level_field, -1) if level_field else -1
        if not isinstance(level, int):
            raise ValueError(f"{path}: row {i}: field {level_field!r} must be an integer")
        prompts.append(Prompt(len(prompts), text, str(answer), level))
    if not prompts:
        raise ValueError(f"{path}: no rows")
    return prompts


@register("task", "file", provenance="INF", summary="prompts + reference answers from jsonl/parquet, exact-match verifier")
@dataclass
class FileTask:
    train_path: str = ""
    heldout_path: str = ""
    prompt_field: str = "prompt"
    answer_field: str = "answer"

    def __post_init__(self):
        if not self.train_path or not self.heldout_path:
            raise ValueError("file task: set both train_path and heldout_path")
        self._train = load_prompts(self.train_path, self.prompt_field, self.answer_field)
        self._heldout = load_prompts(self.heldout_path, self.prompt_field, self.answer_field)

    def train_pool(self) -> list[Prompt]:
        return self._train

    def heldout(self) -> list[Prompt]:
        return self._heldout

    @staticmethod
    def verify(response: str, answer: str) -> float:
        return 1.0 if response.strip() == answer.strip() else 0.0
