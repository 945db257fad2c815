"""A task read from files: prompts and reference answers in jsonl, parquet, or a directory written by
`datasets`' `save_to_disk` (one split; read locally with `load_from_disk`, nothing is downloaded).

Each row needs a prompt field and an answer field (names configurable: `prompt_field="question"` for
GSM8K). `answer_extract` takes the reference answer out of a worked solution: "####" the text after the
last `####` (GSM8K), "boxed" the last `\\boxed{...}` (MATH); a row without it is an error naming the row.

A malformed row raises a ValueError naming the file, the row (1-based) and the field, before any training
starts: a missing field, an empty prompt or answer, a prompt that is not a string, an answer that is not a
string or a number. Once the policy is loaded, the trainer checks every row against it too
(`describe_prompt` names the row): the prompt's vocabulary and length against the model's context, and the
answer's vocabulary and length against max_new_tokens (the verifier is exact match, so an answer the model
cannot write is an error, not a silent zero; with a `--reward` the answers are not checked).

Numbers [rollwise's choice]: an answer is compared as text, so a number keeps the text the file wrote.
In jsonl, a number is read as its JSON text: `3.0` is the answer "3.0", `3` is "3", `1e3` is "1e3". In
parquet (and a saved dataset) a number has no written text: an integer column gives its decimal digits
("3"); a float column is refused with an error naming the row (3.0 could be meant as "3" or "3.0": store
answers as strings). A boolean answer is refused everywhere. NaN and Infinity are not JSON and are refused.

Chat models: when the model's tokenizer has a chat template (a Hugging Face chat model), the trainer passes
it to `use_tokenizer` and every prompt becomes the template's rendering of [system_prompt,] the user's
prompt, with the generation prompt (the assistant turn's opening) added: the form the model was tuned on.
`chat_template=False` keeps the raw text; the tiny model's tokenizer has no template, so it is unchanged.

Warm start: a file task can build a base for the embedded tiny model (`rollwise warmstart --task file`, or
`rollwise train --task file` without `--model`, which builds and caches it). The supervised rows are those
of `sft_path` (same format and prompt field as the train file; the target is the answer field after
`answer_extract`, or the raw `sft_response_field`, e.g. a worked solution), else the train rows. A row whose
prompt text is a held-out prompt is dropped (never a supervised target). The tiny tokenizer's alphabet
grows with every character of the rows (`alphabet()`), so capitals and newlines need no other model.

Overlap and conflicts: a train row whose prompt is also a held-out prompt leaves the RL pool (`notes()`
says how many; the trainer logs it), so no prompt is both trained and tested on, unless train_path and
heldout_path name the same file (a deliberate choice: the note says accuracy measures training prompts).
A prompt written on several rows of one file with different answers is refused, counted and named by its
first row.

Splits [Bench 3.0]: with `data_seed` set, validation and test are carved out of the held-out file's
distinct prompts by that seed (`validation_size`, `test_size`: half each by default; the rule is in
_splits.py) and `split` ("validation", the default, or "test") picks what `heldout()` returns. The train
file stays the train pool, and rows are still dropped from it (and from the warm start) against the whole
held-out file, so the splits never change what is trained on. Without a data seed the held-out file is
the one held-out set, as before.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from ._answers import extract
from ._splits import carve, check_options, split_sizes


class JsonNumber(str):
    """A JSON number kept as the text the file wrote (`3.0` stays "3.0")."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def read_rows(path: str | Path) -> list[tuple[int, dict]]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        return _read_saved_dataset(path)
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
    raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl, .parquet or a directory "
                     "saved with datasets' save_to_disk")


def _read_saved_dataset(path: Path) -> list[tuple[int, dict]]:
    try:
        import datasets
    except ImportError:
        raise ValueError(f"{path}: a directory is read as a dataset saved with save_to_disk, which needs the "
                         "datasets package: pip install datasets") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise ValueError(f"{path}: not a dataset saved with save_to_disk ({e})") from None
    if isinstance(ds, datasets.DatasetDict):
        raise ValueError(f"{path}: holds the splits {', '.join(ds)}; name one split's directory "
                         f"(e.g. {path / next(iter(ds))})")
    return list(enumerate(ds.to_list(), 1))


ANSWER_EXTRACTS = {"none": None, "####": "####", "boxed": "boxed"}


def _extract_answer(path, i: int, field_name: str, text: str, how: str) -> str:
    if how == "none":
        return text
    found = extract(text, ANSWER_EXTRACTS[how])
    if found is None or not found.strip():
        mark = "'####'" if how == "####" else "'\\boxed{...}'"
        raise ValueError(f"{path}: row {i}: field {field_name!r} has no answer after {mark} "
                         f"(answer_extract={how!r})")
    return found.strip()


def _answer_text(path, i: int, field_name: str, answer, list_sep: str | None = None) -> str:
    if list_sep is not None and isinstance(answer, list):  # e.g. a code row's tests, one per item (MBPP)
        if not all(isinstance(a, str) and not isinstance(a, JsonNumber) for a in answer):
            raise ValueError(f"{path}: row {i}: field {field_name!r} must be a string or a list of strings")
        answer = list_sep.join(answer)
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
                 level_field: str | None = "level", rows_out: list | None = None,
                 answer_extract: str = "none", list_sep: str | None = None) -> list[Prompt]:
    """Prompts of a file; `rows_out` (if given) receives each prompt's 1-based row number. With `list_sep`,
    an answer may be a list of strings, joined with it."""
    if answer_extract not in ANSWER_EXTRACTS:
        raise ValueError(f"answer_extract must be one of {', '.join(ANSWER_EXTRACTS)}, got {answer_extract!r}")
    prompts = []
    for i, row in read_rows(path):
        for field_name in (prompt_field, answer_field):
            if field_name not in row or row[field_name] is None:
                raise ValueError(f"{path}: row {i}: missing field {field_name!r}")
        text, answer = row[prompt_field], row[answer_field]
        if not isinstance(text, str) or isinstance(text, JsonNumber) or not text.strip():
            raise ValueError(f"{path}: row {i}: field {prompt_field!r} must be a non-empty string")
        answer = _extract_answer(path, i, answer_field, _answer_text(path, i, answer_field, answer, list_sep),
                                 answer_extract)
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


def check_one_answer(prompts: list[Prompt], rows: list[int], path) -> None:
    """A prompt written on several rows must have one answer: with two, the verifier rewards one and
    punishes the other for the same response. The error counts such prompts and names the first row."""
    first: dict[str, int] = {}
    conflicts = []
    for i, p in enumerate(prompts):
        j = first.setdefault(p.text, i)
        if prompts[j].answer != p.answer:
            conflicts.append((j, i))
    if conflicts:
        j, i = conflicts[0]
        n = len({prompts[a].text for a, _ in conflicts})
        raise ValueError(f"{path}: row {rows[i]}: {n} prompt(s) appear on several rows with different answers (first: "
                         f"row {rows[i]} has the prompt of row {rows[j]}, answer {prompts[i].answer!r} vs "
                         f"{prompts[j].answer!r}); a prompt needs one answer: fix or remove those rows")


@register("task", "file", provenance="INF",
          summary="prompts + reference answers from jsonl/parquet/saved datasets, exact-match verifier")
@dataclass
class FileTask:
    train_path: str = ""
    heldout_path: str = ""
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    answer_marker: str | None = None  # text after which the answer follows (e.g. "\\boxed{"), for DUET's abort
    answer_extract: str = "none"  # "####" or "boxed": the reference answer is taken out of the answer field
    system_prompt: str | None = None  # the chat template's system message
    chat_template: bool = True  # prompts through the tokenizer's chat template, if it has one
    sft_path: str = ""  # the warm start's supervised rows (same format and prompt field); "": the train rows
    # the run's memorised-pool warning offers it (policy/warmstart.py: pool_overlap)
    sft_apart = "task_options.sft_path=FILE (warm-start rows of their own, not the train rows)"
    sft_response_field: str | None = None  # the warm start's target column (e.g. a worked solution), taken
    # as written; None: the answer field after answer_extract
    data_seed: int | None = None  # None: the held-out file is the one held-out set (no splits)
    validation_size: int | None = None  # with data_seed; None: half the held-out file's distinct prompts
    test_size: int | None = None  # with data_seed; None: the other half
    split: str | None = None  # with data_seed: what heldout() returns, "validation" (default) or "test"

    # the verifier compares the response with the answer: the trainer checks every answer can be written
    answers_are_responses = True
    answer_list_sep = None  # (str) a subclass's answers may be lists of strings, joined with it
    report_pool_size = 512  # the base's report: pass-rate statistics over at most this many train prompts

    def __post_init__(self):
        if not self.train_path or not self.heldout_path:
            raise ValueError("file task: set both task_options.train_path and task_options.heldout_path")
        check_options("file task", self.data_seed, self.split, self.validation_size, self.test_size)
        self._rows: dict[str, list[int]] = {"train": [], "held-out": []}
        self._train = load_prompts(self.train_path, self.prompt_field, self.answer_field,
                                   rows_out=self._rows["train"], answer_extract=self.answer_extract,
                                   list_sep=self.answer_list_sep)
        self._heldout = load_prompts(self.heldout_path, self.prompt_field, self.answer_field,
                                     rows_out=self._rows["held-out"], answer_extract=self.answer_extract,
                                     list_sep=self.answer_list_sep)
        for split, path in (("train", self.train_path), ("held-out", self.heldout_path)):
            check_one_answer(self._train if split == "train" else self._heldout, self._rows[split], path)
        self._read = (list(self._train), list(self._rows["train"]))  # as read: the warm start's default rows
        self._notes = self._drop_heldout_from_train()
        self._raw = [(p.text, p.answer) for p in self._train + self._heldout]  # before any chat template
        self._heldout_texts = {p.text for p in self._heldout}
        self._sft: list[tuple[str, str, int]] | None = None
        if self.data_seed is not None:
            self._carve_split()

    def _carve_split(self) -> None:
        """Keep only the split `split` names of the held-out rows (their file rows with them)."""
        v, t = split_sizes(len(self._heldout_texts), self.validation_size, self.test_size)
        c = carve([p.text for p in self._heldout], [-1] * len(self._heldout), self.data_seed, v, t,
                  what=f"held-out file {self.heldout_path}")
        keep = c.test if self.split == "test" else c.validation
        self._heldout = [replace(self._heldout[i], id=j) for j, i in enumerate(keep)]
        self._rows["held-out"] = [self._rows["held-out"][i] for i in keep]
        self._notes += c.notes

    def _drop_heldout_from_train(self) -> list[str]:
        """Train rows whose prompt is also a held-out prompt leave the RL pool (the policy would be trained on
        what it is tested on); returns the note that counts them. One file named as both says so on purpose
        (held-out accuracy then measures the training prompts): nothing is dropped, and the note says so."""
        if Path(self.train_path).resolve() == Path(self.heldout_path).resolve():
            return [f"train_path and heldout_path are the same file ({self.train_path}): held-out accuracy "
                    "measures the training prompts"]
        heldout = {p.text for p in self._heldout}
        keep = [i for i, p in enumerate(self._train) if p.text not in heldout]
        if len(keep) == len(self._train):
            return []
        if not keep:
            raise ValueError(f"{self.train_path}: every train prompt is also a held-out prompt of {self.heldout_path}; "
                             "none is left to train on")
        dropped = len(self._train) - len(keep)
        self._train = [replace(self._train[i], id=j) for j, i in enumerate(keep)]  # ids index the pool
        self._rows["train"] = [self._rows["train"][i] for i in keep]
        return [f"{dropped} train row(s) of {self.train_path} dropped from the RL pool: their prompt is a held-out "
                f"prompt of {self.heldout_path} ({len(keep)} left)"]

    def notes(self) -> list[str]:
        """What the trainer logs about the rows as it builds the task (rows dropped, and why)."""
        return list(self._notes)

    # ---- the supervised warm start (policy/warmstart.py) --------------------------------------------
    def _load_sft(self) -> None:
        """The supervised rows (read once): prompt text, target and level, with their file rows; a row
        whose prompt is a held-out prompt is dropped and counted."""
        if self._sft is not None:
            return
        path = self.sft_path or self.train_path
        field = self.sft_response_field or self.answer_field
        how = "none" if self.sft_response_field else self.answer_extract
        if path == self.train_path and field == self.answer_field and how == self.answer_extract:
            prompts, rows = self._read  # the raw text, as read (held-out prompts are dropped below)
        else:
            rows = []
            prompts = load_prompts(path, self.prompt_field, field, rows_out=rows, answer_extract=how)
        keep = [i for i, p in enumerate(prompts) if p.text not in self._heldout_texts]
        self._sft_dropped = len(prompts) - len(keep)
        if not keep:
            raise ValueError(f"{path}: every supervised row's prompt is a held-out prompt; none is left to "
                             "warm-start on")
        self._sft = [(prompts[i].text, prompts[i].answer, prompts[i].level) for i in keep]
        self._sft_rows = [rows[i] for i in keep]
        self._sft_from = path

    def sft_rows(self) -> list[tuple[str, str, int]]:
        """The distinct supervised rows (prompt, target, level), held-out prompts dropped."""
        self._load_sft()
        return self._sft

    def describe_sft(self, index: int) -> str:
        """`<file>: row <n>` of the index-th supervised row."""
        self._load_sft()
        return f"{self._sft_from}: row {self._sft_rows[index]}"

    def sft_notes(self) -> list[str]:
        """What the warm start logs about its rows: where they came from and how many were dropped."""
        self._load_sft()
        notes = [] if self.sft_path else [f"task_options.sft_path is not set: the {len(self._sft)} supervised "
                                          f"rows are the train rows of {self.train_path}"]
        if self._sft_dropped:
            notes.append(f"{self._sft_dropped} supervised row(s) dropped: their prompt is a held-out prompt")
        return notes

    def sft_examples(self, n: int, seed: int) -> list[tuple[str, str, int]]:
        """n supervised examples (prompt, target, level) drawn from the rows with repeats, seeded."""
        rows = self.sft_rows()
        return [rows[i] for i in np.random.default_rng(seed).integers(len(rows), size=n)]

    def alphabet(self) -> str:
        """Every character of the rows as read (supervised, train and held-out prompts and answers)."""
        if getattr(self, "_alphabet", None) is None:
            self._alphabet = "".join(sorted({c for text, ans in self._raw + [r[:2] for r in self.sft_rows()]
                                             for c in text + ans}))
        return self._alphabet

    def base_fingerprint(self) -> list:
        """What shapes the base: the supervised rows as read (prompt and target), the held-out rows (which
        rows are dropped; the base's report), the alphabet and the options that read them; not the files'
        paths or times."""
        def digest(rows) -> str:
            h = hashlib.sha256()
            for row in rows:
                h.update(json.dumps(list(row)).encode() + b"\n")
            return h.hexdigest()

        heldout = [(t, a) for t, a in self._raw[len(self._train):]]
        return ["file-v1", digest(r[:2] for r in self.sft_rows()), digest(heldout), self.alphabet(),
                self.prompt_field, self.answer_field, self.answer_extract, self.sft_response_field]

    def use_tokenizer(self, tokenizer) -> None:
        """Render every prompt with the tokenizer's chat template (once; see the module's docstring)."""
        if not (self.chat_template and getattr(tokenizer, "chat_template", None)):
            if self.system_prompt is not None:
                why = "chat_template is false" if not self.chat_template else \
                    "the model's tokenizer has no chat template"
                raise ValueError(f"task_options.system_prompt: set, but {why}, so there is no system message")
            return
        if getattr(self, "_templated", False):
            return
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        for split, prompts in (("train", self._train), ("held-out", self._heldout)):
            for i, p in enumerate(prompts):
                try:
                    text = tokenizer.apply_chat_template(system + [{"role": "user", "content": p.text}],
                                                         tokenize=False, add_generation_prompt=True)
                except Exception as e:  # noqa: BLE001 - jinja's errors (e.g. a template without a system role)
                    raise ValueError(f"{self.describe_prompt(split, i)}: the chat template failed on it "
                                     f"({type(e).__name__}: {e})") from None
                prompts[i] = replace(p, text=text)
        self._templated = True

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
