"""In-flight control inside verl: a segmented agent loop and the watcher it consults between segments.

verl's agent loop asks its async rollout server (vLLM or SGLang) for a whole response per session. A
rollwise Watcher (token-only, e.g. an abort rule) needs each sample's tokens as they grow and must be able
to stop or prune single samples. `RollwiseAgentLoop` (registered in verl as "rollwise_segmented")
therefore generates in segments of `segment_tokens`:

    tokens = []
    while the sample is not finished (EOS, or the response length is reached):
        tokens += server.generate(prompt + tokens, max_tokens=segment)     same request_id: the server
                                                                           routes it to the replica that
                                                                           caches prompt + prefix
        action = watcher.decide(uid, session, tokens)                      stop / pruned / keep (+ weight)
        stop or pruned: the session ends there

The watcher is the planner's own WaveWatch for the round, held by a `WatchServer` (a named Ray actor,
since verl's agent loops run in remote workers); the replay buffer opens it for each round and reads its
decisions and metrics back when the round is in. Pruned sessions are written to TransferQueue like any
other (their tokens were decoded) and marked in `extra_fields["rollwise_status"]`; the buffer charges
them as pruned and leaves them out of their group, as rollwise's driver does.

With segment_tokens = 1 the watcher sees every token, as in rollwise's own driver (decisions land on the
same token). With larger segments, decisions land at the next segment boundary: more tokens are decoded
(and charged) past a rule's exact point, and fewer server calls are made.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..control.base import Decision

WATCH_FIELD = "rollwise_watch"  # batch column: the WatchServer's Ray actor name
SEGMENT_FIELD = "rollwise_segment_tokens"  # batch column: tokens per segment
AGENT_NAME = "rollwise_segmented"


class WatchServer:
    """One round's watcher, consulted per sample. `open((watch, metrics), index, n)`: the planner's
    WaveWatch with the step's metrics dict it counts into (one argument, so that a Ray actor receives
    them pickled together and the watcher still counts into that dict), and the request index and n of
    every uid. `decide(uid, session, tokens)` shows the watcher that one sample and returns its action.
    `close()` returns {(uid, session): [Decision, ...]} for every sample the watcher acted on (applied
    to the rollouts as rollwise's driver applies them) and the metrics."""

    def __init__(self):
        self.watch = None
        self.index: dict[str, int] = {}
        self.n: dict[str, int] = {}
        self.decisions: dict[tuple[str, int], list[Decision]] = {}
        self.metrics: dict = {}

    def open(self, watch_and_metrics: tuple, index: dict, n: dict) -> None:
        (self.watch, self.metrics), self.index, self.n, self.decisions = watch_and_metrics, dict(index), dict(n), {}

    def decide(self, uid: str, session: int, tokens: list[int]) -> str:
        """The watcher's action for one running sample ("keep", "stop" or "pruned")."""
        if self.watch is None or uid not in self.index:
            return "keep"
        i, j = self.index[uid], int(session)
        samples = [None] * self.n[uid]  # the others are not shown: segments of samples arrive apart
        samples[j] = torch.as_tensor(tokens, dtype=torch.long)
        action = "keep"
        for d in self.watch({i: samples}):
            if (d.index, d.sample) == (i, j):
                self.decisions.setdefault((uid, j), []).append(d)
                action = d.action if d.action != "keep" else action
        return action

    def close(self) -> tuple[dict, dict]:
        out = (self.decisions, self.metrics)
        self.watch, self.decisions = None, {}
        return out


@dataclass
class Segmented:
    """What one watched session produced: its tokens and behaviour log-probs, how it ended ("eos",
    "length", "stop" or "pruned"), the number of server calls (segments), and the weight versions it was
    generated across (`min_global_steps` / `max_global_steps` of verl's server outputs, which verl's
    trainer reads from every trajectory's tags: verl's own single-turn loop passes them on, so this does)."""

    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    finish: str = "eos"
    segments: int = 0
    min_global_steps: int | None = None
    max_global_steps: int | None = None


async def generate_segmented(generate: Callable[..., Awaitable[Any]], request_id: str, prompt_ids: list[int],
                             sampling_params: dict, max_tokens: int, segment_tokens: int,
                             decide: Callable[[list[int]], Awaitable[str]]) -> Segmented:
    """Generate one sample in segments through `generate` (verl's `server_manager.generate`: keyword
    arguments request_id, prompt_ids, sampling_params; returns a TokenOutput), consulting `decide` after
    every segment that did not finish the sample."""
    if segment_tokens < 1 or max_tokens < 1:
        raise ValueError(f"rollwise segmented agent loop: segment_tokens and the response length must be >= 1 "
                         f"(got {segment_tokens}, {max_tokens})")
    out = Segmented()
    while True:
        left = max_tokens - len(out.token_ids)
        params = dict(sampling_params, max_tokens=min(segment_tokens, left))
        step = await generate(request_id=request_id, prompt_ids=list(prompt_ids) + out.token_ids,
                              sampling_params=params)
        out.segments += 1
        extra = getattr(step, "extra_fields", None) or {}
        first, last = extra.get("min_global_steps"), extra.get("max_global_steps")
        if out.min_global_steps is None:
            out.min_global_steps = first
        if last is not None:
            out.max_global_steps = last
        out.token_ids += list(step.token_ids)
        if step.log_probs:
            out.log_probs += list(step.log_probs)
        if len(out.token_ids) >= max_tokens:
            out.token_ids, out.log_probs, out.finish = out.token_ids[:max_tokens], out.log_probs[:max_tokens], "length"
            return out
        # a segment shorter than asked, or one the server reports complete for its own reason, ended in EOS
        if len(step.token_ids) < params["max_tokens"] or step.stop_reason not in (None, "length", "aborted"):
            out.finish = "eos"
            return out
        action = await decide(out.token_ids)
        if action in ("stop", "pruned"):
            out.finish = action
            return out


try:  # the agent loop itself needs verl's agent-loop package (installed with rollwise[verl])
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
except ImportError:  # pragma: no cover - the buffer module reports the missing extra
    AgentLoopBase = None

if AgentLoopBase is not None:

    @register(AGENT_NAME)
    class RollwiseAgentLoop(AgentLoopBase):
        """verl's single-turn agent loop, generating in segments with the round's watcher consulted
        between them (see the module docstring). Rows reach it with `agent_name = "rollwise_segmented"`,
        `rollwise_watch` (the WatchServer actor's name) and `rollwise_segment_tokens`, set by
        RollwiseReplayBuffer."""

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            messages = list(kwargs["raw_prompt"])
            prompt_ids = await self.ct_build_initial_tokens(messages)
            server = ray.get_actor(kwargs[WATCH_FIELD])
            uid, session = kwargs["uid"], int(kwargs["session_id"])

            async def decide(tokens):
                return await server.decide.remote(uid, session, tokens)

            got = await generate_segmented(self.server_manager.generate, f"{uid}_{session}", prompt_ids,
                                           sampling_params, int(self.rollout_config.response_length),
                                           int(kwargs[SEGMENT_FIELD]), decide)
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                prompt_ids, got.token_ids, [], [] if got.log_probs else None,
                assistant_logprobs=got.log_probs or None)
            response_ids = merged.token_ids[-len(mask):] if mask else []
            return AgentLoopOutput(
                prompt_ids=merged.token_ids[: len(merged.token_ids) - len(mask)], response_ids=response_ids,
                response_mask=mask, response_logprobs=logprobs or None, num_turns=2,
                metrics={"num_preempted": -1},
                extra_fields={"rollwise_status": "pruned" if got.finish == "pruned" else "done",
                              "rollwise_finish": got.finish, "rollwise_segments": got.segments,
                              "min_global_steps": got.min_global_steps, "max_global_steps": got.max_global_steps,
                              "turn_scores": [], "tool_rewards": []})
