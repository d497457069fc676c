"""The verifier worker: answers `verify.requests` with `RewardAssigned`, graded by frozen tests."""
