"""The sandbox daemon: Docker backend, isolation, quotas, warm pool, per-step snapshots, restore anywhere.

    backend = DockerBackend(docker_client, LocalObjectStore(root))    # or any SandboxBackend
    with WarmPool(backend, SandboxSpec(image, Quotas(...)), size=4) as pool:
        sandbox = pool.acquire()                                      # a hand-over, no container start
        result = backend.exec(sandbox, ["pytest", "-q"], limits=ExecLimits(timeout_s=60))
        snapshot_id = backend.snapshot(sandbox)                       # content-addressed, in the store
        backend.restore(other_sandbox, snapshot_id)                   # byte-identical tree, any host
        pool.release(sandbox)                                         # destroyed, never reused

`IdempotentExecutor` runs keyed steps (episode, step, attempt) once; `SandboxWorker` (its `ROUTE` on the
shared `streams.kafka.request_loop`) serves `sandbox.requests`; `ops.cli` has `trialog worker sandbox`.
Modules are imported directly (`from sandbox_agent.docker_backend import DockerBackend`): this package
imports nothing on its own, so the CLI stays quick to start.
"""
