"""The rollout worker's logic: answer a `PolicyRequest` with an `ActionProposed` from a policy plugin.

The answer's header is the request's, echoed (`Origin.reply_meta`: episode, step, attempt, chain head),
with this worker's id, time and producer, and the policy version that sampled. The latency is the time
the plugin took, read from the origin's clock (fixed in tests). The Kafka loop is in `kafka_loop`.
"""

from __future__ import annotations

import dataclasses

from actors.kafka_loop import Refused, Route
from actors.rollout.policy import Policy, PolicyError, Sample
from schemas.events import ActionProposed
from schemas.requests import PolicyRequest
from schemas.sources import Origin

DEFAULT_GROUP = "trialog-rollout"
ROUTE = Route(PolicyRequest, "policy.requests", "policy.results")


class RolloutWorker:
    def __init__(self, policy: Policy, origin: Origin) -> None:
        self.policy = policy
        self.origin = origin

    def handle(self, request: PolicyRequest) -> ActionProposed:
        started = self.origin.clock.now_us()
        try:
            sample = self.policy.sample(request)
        except PolicyError as exc:
            raise Refused(exc.reason, exc.detail) from exc
        latency = max(0, self.origin.clock.now_us() - started)
        return action_proposed(self.origin, request, sample, latency)


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
