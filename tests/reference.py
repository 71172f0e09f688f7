"""Where Kafka's reference vectors live: ``$QUOTAFLOW_KAFKA_REFERENCE``, else ``../shared/kafka-reference`` beside
the checkout, else the workplace's ``/work/shared/kafka-reference`` (a clone made elsewhere, e.g. under /tmp)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def reference_dir() -> Path:
    env = os.environ.get("QUOTAFLOW_KAFKA_REFERENCE")
    candidates = (
        [Path(env)] if env else [ROOT.parent / "shared" / "kafka-reference", Path("/work/shared/kafka-reference")]
    )
    for c in candidates:
        if (c / "vectors" / "index.csv").exists():
            return c
    return candidates[0]


VECTORS = reference_dir() / "vectors"
