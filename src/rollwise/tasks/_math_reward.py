"""The built-in `--reward math`: math-verify's equivalence check of the model's answer and the reference.

It runs in the reward worker process like a user reward (`reward.builtin_reward`), and is imported there as
a top-level module: it imports nothing of rollwise (so the worker starts without torch) and nothing but
math-verify. One function per way of finding the answer in the response (`reward_options.extract`):

- `boxed`: the contents of the last `\\boxed{...}` (braces matched);
- `hashes`: the text after the last `####` (GSM8K's format);
- `number`: the last number (commas in digit groups allowed, e.g. 1,234);
- `auto` (default): the first of these that the response has.

A response without the chosen form, or one or a reference that math-verify cannot parse, scores 0: a parse
failure is a wrong answer, never an error. math-verify bounds its own parsing and checking time; the worker's
timeout bounds the whole call.
"""
from functools import lru_cache

try:
    from math_verify import parse, verify
except ImportError as e:  # the reward worker reports this line: say what to install
    raise ImportError(f"--reward math needs the math-verify package (pip install 'rollwise[math]'): {e}") from None

try:  # imported as part of rollwise (tests), or as a top-level module in the reward worker
    from ._answers import extract
except ImportError:
    from _answers import extract


@lru_cache(maxsize=65536)
def _parsed(text: str):
    """math-verify's parse of an answer's text; as LaTeX math if the plain parse finds nothing."""
    return parse(text) or parse(f"${text}$")


def score(response: str, answer: str, how: str) -> float:
    try:
        found = extract(response, how)
        if found is None or not found.strip():
            return 0.0
        gold, pred = _parsed(answer.strip()), _parsed(found.strip())
        return 1.0 if gold and pred and verify(gold, pred) else 0.0
    except Exception:  # noqa: BLE001 - garbage math-verify cannot read is a wrong answer
        return 0.0


def auto(response: str, answer: str) -> float:
    return score(response, answer, "auto")


def boxed(response: str, answer: str) -> float:
    return score(response, answer, "boxed")


def hashes(response: str, answer: str) -> float:
    return score(response, answer, "####")


def number(response: str, answer: str) -> float:
    return score(response, answer, "number")
