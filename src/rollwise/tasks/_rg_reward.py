"""reasoning-gym's own verifier, run in a reward worker process (`reward.RewardWorker`).

A reasoning-gym task's reference "answer" is a JSON object holding everything its `score_answer` needs:
the dataset's name and options, and the entry (answer and metadata). Tuples, which several datasets keep
in their metadata and compare as tuples (arc_agi's grids), are written as {"__tuple__": [...]}, so the
entry decoded here is the one the generator made. This module is imported as a top-level module by the
worker and imports nothing of rollwise.

Why a worker rather than inline: about twenty of reasoning-gym's verifiers parse the response with
sympy's `parse_expr`/`sympify`, which evaluate Python, and some can take long on adversarial text. A
response is model output: it is scored where a timeout and a memory limit hold, never in the trainer.
"""
import json

import reasoning_gym  # at import, so the worker's start (not a scoring call's deadline) pays for it
from reasoning_gym.utils import extract_answer

_datasets: dict = {}


def encode(obj):
    """JSON-ready form of an entry: tuples marked so that `decode` gives them back as tuples."""
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v) for v in obj]}
    if isinstance(obj, list):
        return [encode(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    return obj


def _tuples(d: dict):
    return tuple(d["__tuple__"]) if set(d) == {"__tuple__"} else d


def decode(text: str):
    return json.loads(text, object_hook=_tuples)


def extract(response: str, tag: str | None) -> str | None:
    """The answer part of a response: the whole response stripped, or the last <tag>...</tag>."""
    if not tag:
        return response.strip()
    return extract_answer(response, tag_name=tag)


def score(response: str, answer: str) -> float:
    ref = decode(answer)
    key = json.dumps([ref["dataset"], ref.get("options", {})], sort_keys=True, default=str)
    if key not in _datasets:
        _datasets[key] = reasoning_gym.create_dataset(ref["dataset"], **ref.get("options", {}), seed=0, size=1)
    got = extract(response, ref.get("tag"))
    if got is None:
        return 0.0  # no <tag>...</tag> in the response
    return float(_datasets[key].score_answer(got, ref["entry"]))


def reference_response(answer: str) -> str:
    """A response that is the reference answer (in its tag, if the task has one). A sandboxed worker
    scores it before it confines itself, so the verifier imports what it imports lazily and builds its
    dataset while it can read every file, and again after, to check that the sandbox changes nothing."""
    ref = decode(answer)
    got = ref["entry"].get("answer")
    text = "" if got is None else str(got)
    return f"<{ref['tag']}>{text}</{ref['tag']}>" if ref.get("tag") else text
