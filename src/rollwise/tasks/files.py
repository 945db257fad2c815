"""A task read from files: prompts and reference answers in jsonl or parquet.

Each row needs a prompt field and an answer field (names configurable). A malformed row raises a
ValueError naming the file, the row (1-based) and the field, before any training starts: a missing
field, an empty prompt or answer, a prompt that is not a string, an answer that is not a string or a
number. Once the policy is loaded, the trainer checks every row against it too (`describe_prompt` names
the row): the prompt's vocabulary and length against the model's context, and the answer's vocabulary and
length against max_new_tokens (the verifier is exact match, so an answer the model cannot write is an
error, not a silent zero).

Numbers [rollwise's choice]: an answer is compared as text, so a number keeps the text the file wrote.
In jsonl, a number is read as its JSON text: `3.0` is the answer "3.0", `3` is "3", `1e3` is "1e3". In
parquet a number has no written text: an integer column gives its decimal digits ("3"); a float column is
refused with an error naming the row (3.0 could be meant as "3" or "3.0": store answers as strings). A
boolean answer is refused in both. NaN and Infinity are not JSON and are refused.

A file task has no supervised warm start, so a run on it needs `--model PATH` (config.validate says so).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.registry import register
from ..core.types import Prompt


class JsonNumber(str):
    """A JSON number kept as the text the file wrote (`3.0` stays "3.0")."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def read_rows(path: str | Path) -> list[tuple[int, dict]]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as f:
            try:
                lines = list(enumerate(f, 1))
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        for i, line in lines:
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_float=JsonNumber, parse_int=JsonNumber, parse_constant=_no_constant)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: row {i}: not valid JSON ({e.msg})") from None
            except ValueError as e:
                raise ValueError(f"{path}: row {i}: not valid JSON ({e})") from None
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


def _answer_text(path, i: int, field_name: str, answer) -> str:
    if isinstance(answer, JsonNumber) or isinstance(answer, str):
        text = str(answer)
    elif isinstance(answer, bool):
        raise ValueError(f"{path}: row {i}: field {field_name!r} must be a string or number, got a boolean")
    elif isinstance(answer, int):
        text = str(answer)
    elif isinstance(answer, float):
        raise ValueError(f"{path}: row {i}: field {field_name!r} is a float ({answer!r}), whose written form is "
                         "unknown (3.0 may mean \"3\" or \"3.0\"); store answers as strings")
    else:
        raise ValueError(f"{path}: row {i}: field {field_name!r} must be a string or number, "
                         f"got {type(answer).__name__}")
    if not text.strip():
        raise ValueError(f"{path}: row {i}: field {field_name!r} is empty (an empty response would match it)")
    return text


def load_prompts(path: str | Path, prompt_field: str = "prompt", answer_field: str = "answer",
                 level_field: str | None = "level", rows_out: list | None = None) -> list[Prompt]:
    """Prompts of a file; `rows_out` (if given) receives each prompt's 1-based row number."""
    prompts = []
    for i, row in read_rows(path):
        for field_name in (prompt_field, answer_field):
            if field_name not in row or row[field_name] is None:
                raise ValueError(f"{path}: row {i}: missing field {field_name!r}")
        text, answer = row[prompt_field], row[answer_field]
        if not isinstance(text, str) or isinstance(text, JsonNumber) or not text.strip():
            raise ValueError(f"{path}: row {i}: field {prompt_field!r} must be a non-empty string")
        answer = _answer_text(path, i, answer_field, answer)
        level = row.get(level_field, -1) if level_field else -1
        if isinstance(level, JsonNumber):
            try:
                level = int(level)
            except ValueError:
                level = None
        if isinstance(level, bool) or not isinstance(level, int):
            raise ValueError(f"{path}: row {i}: field {level_field!r} must be an integer")
        prompts.append(Prompt(len(prompts), text, answer, level))
        if rows_out is not None:
            rows_out.append(i)
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
    answer_marker: str | None = None  # text after which the answer follows (e.g. "\\boxed{"), for DUET's abort

    # the verifier compares the response with the answer: the trainer checks every answer can be written
    answers_are_responses = True

    def __post_init__(self):
        if not self.train_path or not self.heldout_path:
            raise ValueError("file task: set both task_options.train_path and task_options.heldout_path")
        self._rows: dict[str, list[int]] = {"train": [], "held-out": []}
        self._train = load_prompts(self.train_path, self.prompt_field, self.answer_field,
                                   rows_out=self._rows["train"])
        self._heldout = load_prompts(self.heldout_path, self.prompt_field, self.answer_field,
                                     rows_out=self._rows["held-out"])

    def train_pool(self) -> list[Prompt]:
        return self._train

    def heldout(self) -> list[Prompt]:
        return self._heldout

    def describe_prompt(self, split: str, index: int) -> str:
        """`<file>: row <n>` of the index-th prompt of a split ("train" or "held-out")."""
        path = self.train_path if split == "train" else self.heldout_path
        return f"{path}: row {self._rows[split][index]}"

    @staticmethod
    def verify(response: str, answer: str) -> float:
        return 1.0 if response.strip() == answer.strip() else 0.0
