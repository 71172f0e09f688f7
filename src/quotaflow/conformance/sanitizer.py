"""Mode ``sanitizer``: Kafka's ``Sanitizer`` examples. The vector has no input file; the ``raw`` column of
``sanitizer.expected.csv`` is the input."""

from __future__ import annotations

import csv
from pathlib import Path

from quotaflow.core.sanitize import desanitize, jmx_sanitize, sanitize


def run(name: str, args: list[str], input_path: Path) -> tuple[list[dict[str, str]], dict[str, str] | None]:
    source = input_path if input_path.exists() else input_path.with_name(f"{name}.expected.csv")
    out = []
    with source.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            raw = row["raw"]
            s = sanitize(raw)
            out.append(
                {
                    "raw": raw,
                    "sanitized": s,
                    "desanitized_roundtrip_ok": "true" if desanitize(s) == raw else "false",
                    "jmx_sanitized": jmx_sanitize(raw),
                }
            )
    return out, None
