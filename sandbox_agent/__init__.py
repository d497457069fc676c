"""The sandbox daemon: Docker backend, isolation, quotas, warm pool, snapshots."""
