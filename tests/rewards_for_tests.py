"""Reward functions for tests: they vary within a group even for a model that solves nothing, so that
every estimator, loss, correction and aggregation has non-zero advantages to train on."""
import os  # noqa: F401 - imported before the sandbox: `evaluates` tests the sandbox, not what it can import
import socket  # noqa: F401


def by_length(response: str, answer: str) -> float:
    return float(len(response) % 2)


def by_length_parts(response: str, answer: str) -> dict:
    return {"correct": float(len(response) % 2), "format": float(len(response) % 3 == 0)}


class TaskWithoutWarmStart:
    """A task with prompts and a verifier but no supervised examples: a run on it needs --model."""

    rollwise_kind = "task"  # the registry marker: it may be named by import path

    def train_pool(self):
        return []

    def heldout(self):
        return []

    @staticmethod
    def verify(response: str, answer: str) -> float:
        return float(response == answer)


def evaluates(response: str, answer: str) -> float:
    """A verifier that evaluates the response as Python, as sympy's parse_expr does: for the sandbox."""
    return float(eval(response))  # noqa: S307 - the point of the test (os and socket are in its globals)
