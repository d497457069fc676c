"""The rollout worker: answers `policy.requests` with `ActionProposed` through a policy plugin."""
