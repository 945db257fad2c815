"""Finding an answer in a text: the last `\\boxed{...}`, the text after the last `####`, the last number.
Used by the file task (`answer_extract`, on reference answers) and by `--reward math` (on responses), which
imports it in the reward worker as a top-level module: so it imports nothing.
"""
import re

_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}`, braces matched; None if there is none (or it is unclosed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1: j]
    return None


def after_hashes(text: str) -> str | None:
    _, found, tail = text.rpartition("####")
    return (tail.strip() or None) if found else None


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


EXTRACT = {"boxed": last_boxed, "####": after_hashes, "number": last_number}


def extract(text: str, how: str) -> str | None:
    """The answer found `how` ("boxed", "####", "number", or "auto": the first of them the text has)."""
    if how == "auto":
        for f in EXTRACT.values():
            found = f(text)
            if found is not None:
                return found
        return None
    return EXTRACT[how](text)
