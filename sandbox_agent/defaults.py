"""The sandbox side's clean-up defaults, in a module that imports nothing: the libraries use them, and the
CLI shows them in --help without importing Docker or RocksDB (one value each, no copies)."""

from __future__ import annotations

# A warm pool (one per image and quotas) unused this long is closed, its warm sandboxes destroyed.
DEFAULT_POOL_IDLE_S = 600.0
# The executed-steps store's bounds, for the ends of episodes a worker did not hear of: a redelivery comes
# within minutes of the first delivery.
DEFAULT_MAX_STEPS_KEPT = 100_000
DEFAULT_STEPS_KEPT_S = 86_400.0
# How often every sandbox and verifier worker removes the sandboxes of dead owners on its host.
DEFAULT_REAP_EVERY_S = 10.0
# What one episode's snapshots may add to the object store, on one worker (`store_quota`): twice the default
# workspace quota.
DEFAULT_EPISODE_STORE_QUOTA = 2 * 1024 * 1024 * 1024
