"""Conformance runner: replays Kafka's reference vectors through quotaflow and compares exactly.

``python -m quotaflow.conformance DIR [--modes rate,client,conn,sanitizer] [--engine python|spark]``. One module
per mode (``rate``, ``client``, ``conn``, ``sanitizer``), each exposing
``run(name, args, input_path) -> (output rows, final metrics | None)``; :mod:`.compare` holds the comparison rules.
"""

from quotaflow.conformance.runner import SetResult, run_all, run_set

__all__ = ["SetResult", "run_all", "run_set"]
