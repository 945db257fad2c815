"""Code tasks: the model writes Python, the row's tests judge it in a sandbox (`sandbox.py`).

A file task (jsonl, parquet or a saved dataset, as `files.py` reads them) whose rows hold a prompt and
tests: `--task code --set task_options.train_path=... --set task_options.heldout_path=...`, columns
`prompt_field` ("prompt") and `tests_column` ("tests"). The tests are Python run after the response's
code, e.g. `assert add(2, 3) == 5`; a list of strings (MBPP's `test_list`) is one test per line. A row
without tests (missing, null, empty) is an error naming its file and row, before anything runs.

The reward: the response's code is the last fenced block (```python ... ``` or ``` ... ```) if it has
one, else the whole response; `code + "\\n\\n" + tests + print(nonce)` runs as one program in the
sandbox and scores 1 when it exits with status 0 having printed the nonce last (a fresh random one per
program), else 0: a failed assert, an exception, a timeout, a crash, a program killed for its memory or
its processes, and a program that exits early with status 0 (`sys.exit(0)` before the tests). The nonce
is in the program's source, which the program can read: a response written to find it defeats this
check (docs/code_tasks.md). Whatever the response does, the run goes on. Scoring is sequential, one
sandboxed process per rollout (about 0.2-0.4 s each here).

Warm start of the tiny model: from a column of reference solutions (`sft_response_field`, e.g.
"solution"); without one, a run needs --model.

The sandbox needs root (or the capabilities to create namespaces and change user); the task checks it
can run a program when it is built and says in one line what is missing.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from ..core.registry import register
from .files import FileTask
from .sandbox import SandboxLimits, check_available, run_program

FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str:
    """The last fenced code block of a response, else the whole response."""
    blocks = FENCE.findall(response)
    return blocks[-1] if blocks else response


@register("task", "code", provenance="INF",
          summary="Python code judged by the row's tests in a sandbox (namespaces, unprivileged user, limits)")
@dataclass
class CodeTask(FileTask):
    tests_column: str = "tests"
    timeout_s: float = 10.0  # wall clock per program, Python's start included
    cpu_s: int = 5
    memory_mb: int = 512
    nproc: int = 32
    file_mb: int = 16
    sandbox_user: str = "nobody"
    sandbox_python: str = ""  # "": this interpreter if the sandbox user can run it, else the system python3

    answers_are_responses = False  # the answer is the tests, not what the model writes
    answer_list_sep = "\n"

    def __post_init__(self):
        if self.answer_field != "answer":
            raise ValueError("task_options.answer_field: a code task's reference is its tests; "
                             "name their column with task_options.tests_column")
        if self.answer_extract != "none":
            raise ValueError("task_options.answer_extract: a code task runs its tests as written")
        self.answer_field = self.tests_column
        super().__post_init__()
        self.limits = SandboxLimits(timeout_s=self.timeout_s, cpu_s=self.cpu_s, memory_mb=self.memory_mb,
                                    nproc=self.nproc, file_mb=self.file_mb, user=self.sandbox_user,
                                    python=self.sandbox_python)
        check_available(self.limits)
        self.last_outcome = None  # the last program's Outcome (why a response scored 0)

    def _load_sft(self) -> None:
        if not self.sft_response_field:
            raise ValueError("code task: the warm start needs reference solutions: set "
                             "task_options.sft_response_field to their column (or train a model of your own: --model)")
        super()._load_sft()

    def verify(self, response: str, answer: str) -> float:
        """1 when the response's code passes the tests in the sandbox, else 0."""
        nonce = secrets.token_hex(16)
        program = f"{extract_code(response)}\n\n{answer}\n\nprint({nonce!r})\n"
        self.last_outcome = out = run_program(program, self.limits)
        return 1.0 if out.passed and out.stdout.rstrip().endswith(nonce) else 0.0
