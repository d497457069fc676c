"""The actors: scheduler, rollout worker, verifier, trajectory assembler, supervision."""
