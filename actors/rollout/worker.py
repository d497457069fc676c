"""The rollout worker's logic: answer a `PolicyRequest` with an `ActionProposed` from a policy plugin.

The answer's header is the request's, echoed (`Origin.reply_meta`: episode, step, attempt, chain head),
with this worker's id, time and producer, and the policy version that sampled. The latency is the time
the plugin took, read from the origin's clock (fixed in tests). The Kafka loop is in `kafka_loop`.

`handle_batch` answers several requests at once when the plugin can sample a batch (`BatchPolicy`, the
LLM policy: one batched generate); each answer is the one the request would get alone, and its latency is
the batch's (what the request waited for).

Hot swap (`weights`, a `WeightsWatcher`): before each request or batch, never during one, the worker loads
the newest published policy version (or the pinned one), so every answer records the version that
actually sampled it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol, runtime_checkable

from actors.rollout.policy import Policy, PolicyError, Sample
from schemas import topics
from schemas.events import ActionProposed
from schemas.origin import Origin
from schemas.requests import PolicyRequest
from streams.kafka.request_loop import Refused, Route

log = logging.getLogger(__name__)
ROUTE = Route(PolicyRequest, topics.POLICY_REQUESTS, topics.POLICY_RESULTS)


@runtime_checkable
class BatchPolicy(Protocol):
    def sample_batch(self, requests: list[PolicyRequest]) -> list[Sample]:
        """One sample per request, in order."""
        ...


class Weights(Protocol):
    """Where newer policy weights come from (`actors.rollout.weights.WeightsWatcher`)."""

    @property
    def version(self) -> int: ...

    def refresh(self) -> int | None:
        """Load a newer (or the pinned) version if one was published; the version loaded, or None."""
        ...


class RolloutWorker:
    def __init__(self, policy: Policy, origin: Origin, weights: Weights | None = None) -> None:
        self.policy = policy
        self.origin = origin
        self.weights = weights

    def handle(self, request: PolicyRequest) -> ActionProposed:
        self._refresh()
        started = self.origin.clock.now_us()
        try:
            sample = self._versioned(self.policy.sample(request))
        except PolicyError as exc:
            raise Refused(exc.reason, exc.detail) from exc
        latency = max(0, self.origin.clock.now_us() - started)
        return action_proposed(self.origin, request, sample, latency)

    def handle_batch(self, requests: list[PolicyRequest]) -> list[ActionProposed | Refused]:
        """Answers to `requests` in order, sampled together when the plugin batches."""
        if not isinstance(self.policy, BatchPolicy):
            return [self._handled(request) for request in requests]
        self._refresh()
        started = self.origin.clock.now_us()
        samples = [self._versioned(sample) for sample in self.policy.sample_batch(requests)]
        latency = max(0, self.origin.clock.now_us() - started)
        # What a batch was worth: how full batches run is what decides generation throughput on a CPU.
        tokens = sum(len(sample.token_ids) for sample in samples)
        log.info(
            "batch of %d: %d tokens in %.2f s (%.1f per s)",
            len(requests), tokens, latency / 1e6, tokens / max(latency / 1e6, 1e-6),
        )  # fmt: skip
        return [action_proposed(self.origin, r, s, latency) for r, s in zip(requests, samples, strict=True)]

    def _refresh(self) -> None:
        """Hot swap before a request; a failing swap must cost neither the request nor the worker (the
        request would be dead-lettered as a handler error): serve with the weights held."""
        if self.weights is None:
            return
        try:
            loaded = self.weights.refresh()
        except Exception:
            log.exception("hot swap failed; serving with policy version %d", self.weights.version)
            return
        if loaded is not None:
            log.info("loaded policy version %d", loaded)

    def _versioned(self, sample: Sample) -> Sample:
        """The sample with the version of the weights that drew it, when they are hot-swapped."""
        if self.weights is None:
            return sample
        return dataclasses.replace(sample, policy_version=self.weights.version)

    def _handled(self, request: PolicyRequest) -> ActionProposed | Refused:
        try:
            return self.handle(request)
        except Refused as exc:
            return exc


def action_proposed(
    origin: Origin, request: PolicyRequest, sample: Sample, latency_us: int
) -> ActionProposed:
    meta = origin.reply_meta(request.meta)
    if sample.policy_version is not None:
        meta = dataclasses.replace(meta, policy_version=sample.policy_version)
    return ActionProposed(
        meta=meta,
        action=sample.action,
        response=sample.response,
        prompt_tokens=sample.prompt_tokens,
        token_ids=sample.token_ids,
        logprobs=sample.logprobs,
        latency_us=latency_us,
        finish_reason=sample.finish_reason,
    )
